"""DRAGON's quality bench (dragon/bench/quality.py): the shipped question set is well-formed and its
facts are where its ``need`` says and are retrieved; DRAGON's scored target is the distribution its
decoder follows; the harness runs end to end on the tiny shipped pair (the full run uses SmolLM2)."""

from __future__ import annotations

import json
import math
import re
import tempfile
from pathlib import Path

import pytest
import torch

from edge_spec_ros.cli import main
from edge_spec_ros.dragon.aggregation import drdg_tw, side_weights, target_distribution
from edge_spec_ros.dragon.bench.baselines import teacher_forced
from edge_spec_ros.dragon.bench.quality import (
    DATA,
    METHODS,
    ItemResult,
    contains_answer,
    load_items,
    summarise,
    write_item_world,
)
from edge_spec_ros.dragon.document_lm import build_side, chat_prompt_ids
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def test_question_set_is_well_formed_and_its_facts_are_retrieved():
    top_k, items = load_items()
    assert top_k == 2 and len(items) == 30
    assert {n: sum(i.need == n for i in items) for n in ("robot", "cloud", "both")} == {"robot": 10, "cloud": 10,
                                                                                      "both": 10}
    for item in items:
        robot_fact, cloud_fact = item.memory[0][1].lower(), item.documents[0].lower()
        if item.need == "robot":
            assert any(a in robot_fact for a in item.answers), item.id
            assert not any(a in " ".join(item.documents).lower() for a in item.answers), item.id
        elif item.need == "cloud":
            assert any(a in cloud_fact for a in item.answers), item.id
            assert not any(a in " ".join(t for _, t in item.memory).lower() for a in item.answers), item.id
        else:  # two steps: the answer is in the cloud's fact, the bridge word in both, not in the question
            assert any(a in cloud_fact for a in item.answers), item.id
            bridge = (words(robot_fact) & words(cloud_fact)) - words(item.question) - {"the", "in", "is", "a", "this"}
            assert bridge, item.id
        assert any(a in item.reference.lower() for a in item.answers), item.id
        with tempfile.TemporaryDirectory() as tmp:
            memory, store = write_item_world(item, Path(tmp))
            if item.need in ("robot", "both"):
                assert any(item.memory[0][1] in h.text for h in memory.top_k(item.question, top_k)), item.id
            if item.need in ("cloud", "both"):
                assert item.documents[0] in [h.text for h in store.top_k(item.question, top_k)], item.id


def test_malformed_items_are_refused(tmp_path):
    data = json.loads(DATA.read_text())
    data["items"] = data["items"][:2]
    data["items"][1]["need"] = "neither"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="r02.*need 'neither'"):
        load_items(path)
    data["items"][1] = dict(data["items"][0])
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="duplicate id"):
        load_items(path)


def test_contains_and_summary_arithmetic():
    assert contains_answer("It is on the Ground floor.", ("ground",)) and not contains_answer("first", ("ground",))
    rows = [ItemResult("a", "robot", "DRAGON", 2.0, 4, "", True, True, True),
            ItemResult("b", "both", "DRAGON", 6.0, 2, "", False, True, True)]
    by = {(s.method, s.need): s for s in summarise(rows)}
    assert by[("DRAGON", "all")].perplexity == pytest.approx(math.exp(8.0 / 6))
    assert by[("DRAGON", "all")].accuracy == 0.5 and by[("DRAGON", "robot")].perplexity == pytest.approx(math.exp(0.5))
    assert ("DRAGON", "cloud") not in by


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    return load_pair("embedded")


def test_scored_target_is_the_one_the_decoder_follows(shipped):
    """Teacher-forcing DRAGON's own greedy reply: at every position the scored p_t (eq. 4 over the
    teacher-forced sides) puts its argmax on the token DRDG/TW chose."""
    _, items = load_items()
    item = next(i for i in items if i.need == "both")
    prompt_ids = chat_prompt_ids(shipped.prompt_encoder())
    greedy = SamplingConfig(0.0)
    with tempfile.TemporaryDirectory() as tmp:
        memory, store = write_item_world(item, Path(tmp))
        robot = build_side(shipped.drafter.stack, memory, memory.top_k(item.question, 2), item.question, prompt_ids,
                           shipped.tokenizer.decode, greedy)
        cloud = build_side(shipped.verifier.stack, store, store.top_k(item.question, 2), item.question, prompt_ids,
                           shipped.tokenizer.decode, greedy)
        trace = drdg_tw(robot.next_distribution, cloud.next_distribution, [], 6, PositionalRNG(0), greedy)
        y = list(trace.tokens)
        for t, (a_l, a_r) in enumerate(zip(teacher_forced(robot, y), teacher_forced(cloud, y))):
            eta_l, _ = side_weights(a_l.log_h, a_r.log_h)
            assert int(torch.argmax(target_distribution(a_l.probs, a_r.probs, eta_l))) == y[t]
            assert eta_l == pytest.approx(trace.eta_robot[t], abs=1e-6)


def test_harness_on_the_tiny_shipped_pair(capsys):
    assert main(["bench", "dragon-quality", "--model", "embedded", "--items", "2", "--max-new-tokens", "4",
                 "--threads", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    per_item = [r for r in lines if "method" in r]
    assert [r["method"] for r in per_item] == list(METHODS) * 2
    assert all(math.isfinite(r["nll"]) and r["nll"] > 0 and r["tokens"] > 3 for r in per_item)
    summaries = [r["summary"] for r in lines if "summary" in r]
    assert {(s["method"], s["need"]) for s in summaries} == {(m, n) for m in METHODS for n in ("robot", "all")}
    assert all(s["perplexity"] > 1 for s in summaries)
