"""Dynamic relevance (dragon/relevance.py, §4.1): BM25 re-scoring of a side's fixed documents against
the query plus the text decoded so far, as a pure function of the context."""

import torch

from edge_spec_ros.dragon.relevance import DynamicRelevance, static_relevance
from edge_spec_ros.dragon.stores import RobotMemory

WORDS = ["the", "red", "chair", "kitchen", "cat", "stairs", "sleeps", "door"]


def _decode(ids):
    return " ".join(WORDS[i] for i in ids)


def _memory():
    memory = RobotMemory()
    memory.add("observation", "a red chair next to the kitchen door", pose=(1.0, 2.0, 0.0), time=1.0)
    memory.add("note", "the cat sleeps under the stairs", time=2.0)
    return memory


def test_weights_follow_the_generated_text():
    """As the continuation starts talking about the cat, the cat note's R rises above the chair's."""
    memory = _memory()
    ids = ("mem-0", "mem-1")
    rel = DynamicRelevance(memory, ids, "what do you remember", prompt_length=2, decode=_decode)
    prompt = [0, 0]
    assert torch.equal(rel(prompt), torch.zeros(2, dtype=torch.float64))  # no query word matches yet
    after_chair = rel(prompt + [1, 2])  # "red chair"
    after_cat = rel(prompt + [4, 6, 5])  # "cat sleeps stairs"
    assert after_chair[0] > after_chair[1] == 0
    assert after_cat[1] > after_cat[0] == 0
    assert torch.equal(rel(prompt + [4, 6, 5]), after_cat)  # pure in the context


def test_every_holds_the_last_estimate_and_scale_multiplies():
    memory = _memory()
    ids = ("mem-0", "mem-1")
    rel = DynamicRelevance(memory, ids, "where", prompt_length=1, decode=_decode, every=2)
    assert torch.equal(rel([0, 1]), rel([0]))  # one generated token: still the query-only estimate
    assert torch.equal(rel([0, 1, 2, 4]), rel([0, 1, 2]))  # three tokens: held at two
    scaled = DynamicRelevance(memory, ids, "red chair", prompt_length=0, decode=_decode, scale=0.5)
    plain = DynamicRelevance(memory, ids, "red chair", prompt_length=0, decode=_decode)
    assert torch.allclose(scaled([]), 0.5 * plain([]))


def test_static_relevance_ignores_the_context():
    rel = static_relevance([2.0, 1.0], scale=2.0)
    assert torch.equal(rel([1, 2, 3]), torch.tensor([4.0, 2.0], dtype=torch.float64))
    assert torch.equal(rel([]), rel([5]))
