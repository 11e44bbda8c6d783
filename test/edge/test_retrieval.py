"""The retrieval draft source (REST over the verifier's earlier answers): the longest suffix match
decides, the continuations vote token by token, loading refuses what is not a datastore, and a
decoder drafting through it still gives the verifier's own greedy output."""

from __future__ import annotations

import json

import pytest

from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
from edge_spec_ros.edge.draft_sources import FirstProposal, LookupDrafter, PromptLookup
from edge_spec_ros.edge.retrieval import Retrieval
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier


def test_the_longest_suffix_match_decides_and_continuations_vote():
    store = Retrieval([[9, 1, 2, 3, 4], [8, 1, 2, 3, 4], [7, 1, 2, 5, 6], [5, 5, 2, 5, 6]], min_count=2)
    # "1 2" occurs three times; extended backwards, "9 1 2" occurs once, but a single continuation
    # cannot pass min_count 2: ...
    assert store.propose([9, 1, 2], 3) == ()
    # ... while after "1 2" alone, two of the three continuations say "3 4"
    assert store.propose([0, 1, 2], 3) == (3, 4)
    assert store.propose([4, 4, 2, 5], 2) == (6,)  # "2 5" → 6 twice (a continuation's end cuts the path)
    assert store.propose([1], 2) == () and store.propose([3, 9], 2) == ()  # too short; never seen
    assert Retrieval([[1, 2, 3]], min_count=1).propose([1, 2], 4) == (3,)
    with pytest.raises(ValueError, match="γ must be >= 1"):
        store.propose([1, 2], 0)
    # a split vote stops the path: 3 and 5 follow "1 2" equally often under min_share 0.6
    split = Retrieval([[1, 2, 3], [1, 2, 3], [1, 2, 5], [1, 2, 5]], min_count=1, min_share=0.6)
    assert split.propose([1, 2], 2) == ()
    assert Retrieval([[1, 2, 3], [1, 2, 3], [1, 2, 5]], min_count=1, min_share=0.6).propose([1, 2], 2) == (3,)
    for bad in ({"min_ngram": 0}, {"min_ngram": 3, "max_ngram": 2}, {"min_count": 0}, {"min_share": 0.0}):
        with pytest.raises(ValueError):
            Retrieval([[1, 2]], **bad)


def test_first_proposal_asks_sources_in_order():
    store = Retrieval([[1, 2, 7], [1, 2, 7]])
    chain = FirstProposal(store, PromptLookup())
    assert chain.propose([1, 2], 2) == (7,)  # the datastore first
    assert chain.propose([4, 3, 5, 4, 3], 2) == (5, 4)  # nothing there: prompt lookup
    with pytest.raises(ValueError):
        FirstProposal()


def test_a_datastore_loads_from_token_lists_or_distillation_samples(tmp_path):
    lists, samples = tmp_path / "lists.json", tmp_path / "distill_data.json"
    lists.write_text(json.dumps([[1, 2, 3], [4, 5]]))
    samples.write_text(json.dumps([{"ids": [100, 101, 1, 2, 3], "answer_start": 2, "top_ids": None,
                                    "top_logits": None}]))
    assert Retrieval.load(lists).sequences == [[1, 2, 3], [4, 5]]
    assert Retrieval.load(samples).sequences == [[1, 2, 3]]  # the answers only, never the prompts
    for text in ("{not json", json.dumps({"a": 1}), json.dumps([{"ids": [1]}]), json.dumps([["x"]])):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(ValueError, match="datastore"):
            Retrieval.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="cannot read"):
        Retrieval.load(tmp_path / "missing.json")


def test_drafting_through_retrieval_keeps_the_verifiers_greedy_output(target_model, text_prompt):
    verifier = EarlyExitVerifier(target_model)
    config = DecodeConfig(max_new_tokens=24, gamma=4)
    answer = autoregressive(verifier, text_prompt, config).tokens
    # a datastore that knows half of the answer, and one that knows a wrong version of all of it
    right = answer[:12]
    wrong = [(t + 1) % target_model.config.text_config.vocab_size for t in answer]
    model = Drafter(truncated_copy(target_model, 1))
    for sequences in ([right, right], [wrong, wrong], [right, right, wrong, wrong, wrong]):
        chain = LookupDrafter(model, FirstProposal(Retrieval(sequences), PromptLookup(min_ngram=1)))
        assert speculative(chain, verifier, text_prompt, config).tokens == answer
        assert chain.lookup_tokens > 0
    # with no model, retrieval alone drafts (a model-free token when nothing matches)
    alone = LookupDrafter(None, FirstProposal(Retrieval([right, right])))
    assert speculative(alone, verifier, text_prompt, config).tokens == answer
