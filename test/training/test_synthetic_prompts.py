"""Prompts the verifier writes itself (Magpie): kinds in turn, kept by clear rules, seeded, resumable."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from edge_spec_ros import warm_start
from edge_spec_ros.bench.tasks import BENCH, TASK_KINDS, text_encoder
from edge_spec_ros.training.drafter_distill import generate_samples
from edge_spec_ros.training.synthetic_prompts import (
    KINDS,
    MIN_WORDS,
    OPENINGS,
    PromptBatch,
    finish,
    near_copy,
    opening,
    template_tail,
    words,
    write_prompts,
)

HELD_OUT = tuple(t for texts in BENCH.values() for t in texts)
BENCH_WORDS = [words(t) for t in HELD_OUT]


def near_bench(text: str) -> bool:
    return near_copy(text, BENCH_WORDS)


def test_the_openings_cover_the_task_kinds_in_their_order():
    assert KINDS == TASK_KINDS


def test_openings_take_the_kinds_in_turn():
    firsts = [opening(i) for i in range(2 * len(TASK_KINDS))]
    assert [task for task, _ in firsts] == list(TASK_KINDS) * 2
    assert firsts[0][1] == OPENINGS[TASK_KINDS[0]][0] and firsts[len(TASK_KINDS)][1] == OPENINGS[TASK_KINDS[0]][1]


def test_a_prompt_is_kept_whole_cut_at_a_sentence_or_dropped():
    assert finish("Who wrote", " the book Dune?", ended=True) == "Who wrote the book Dune?"
    assert finish("Who wrote", " the book Dune? And when did it", ended=False) == "Who wrote the book Dune?"
    assert finish("Give me", " ten ideas for a party and", ended=False) is None  # no sentence end: dropped
    assert finish("Hi!", " Hello", ended=True) is None  # fewer than MIN_WORDS words
    assert MIN_WORDS == 4


def test_the_template_tail_is_what_follows_a_user_message(tokenizer):
    encoder = text_encoder(tokenizer)
    ids = encoder.encode("Who wrote").input_ids.tolist()
    tail = template_tail(encoder)
    assert 0 < tail < len(ids)
    assert tokenizer.decode(ids[:-tail]).rstrip().endswith("Who wrote")


def test_written_prompts_are_seeded_resumable_and_never_a_bench_prompt(target_model, tokenizer):
    encoder = text_encoder(tokenizer)
    sizes: list[int] = []
    state = write_prompts(target_model, encoder, 12, 5, HELD_OUT, seed=3,
                          checkpoint=lambda s: sizes.append(s.attempts))
    assert sizes == [5, 10, 12] and state.attempts == 12 and state.prompts
    for p in state.prompts:
        assert p.task in TASK_KINDS and not near_bench(p.text) and len(p.text.split()) >= MIN_WORDS
        assert any(p.text.startswith(words.strip()) for words in OPENINGS[p.task])
    assert len({p.text for p in state.prompts}) == len(state.prompts)
    first = write_prompts(target_model, encoder, 5, 5, HELD_OUT, seed=3)
    resumed = write_prompts(target_model, encoder, 12, 5, HELD_OUT, seed=3,
                            done=PromptBatch(first.attempts, list(first.prompts)))
    assert resumed == state  # seeded by (seed, batch start)
    other = write_prompts(target_model, encoder, 12, 5, HELD_OUT, seed=4)
    assert [p.text for p in other.prompts] != [p.text for p in state.prompts]  # control: another seed


def test_prompt_batches_round_trip(tmp_path, target_model, tokenizer):
    state = write_prompts(target_model, text_encoder(tokenizer), 6, 6, HELD_OUT, seed=0)
    state.save(tmp_path / "p.json")
    assert PromptBatch.load(tmp_path / "p.json") == state
    assert PromptBatch.load(tmp_path / "none.json") == PromptBatch(0, [])


def test_answers_after_the_sampled_ones_are_greedy_again(target_model, tokenizer):
    encoder = text_encoder(tokenizer)
    ids = [encoder.encode(t).input_ids.tolist() for t in ("Who wrote the book?", "Write a Python function.")]
    stop = tokenizer.eos_token_id
    sizes: list[int] = []
    prompts = [ids[0], ids[0], ids[1]]  # greedy, sampled, then greedy (a synthetic prompt)
    samples = generate_samples(target_model, prompts, stop, stop, 8, 4, batch_size=3, sampled_from=1, sampled_to=2,
                               seed=1, checkpoint=lambda s: sizes.append(len(s)))
    assert sizes == [1, 2, 3]  # no batch straddles a boundary
    greedy = generate_samples(target_model, [ids[1]], stop, stop, 8, 4, batch_size=1)
    assert samples[2] == greedy[0]
    assert [r[0] for r in samples[0].top_ids] == samples[0].ids[samples[0].answer_start:]


def test_near_copies_of_bench_prompts_are_caught_and_other_questions_are_not():
    assert near_bench("What is the capital of France.") and near_bench("what is the CAPITAL of france ?")
    assert all(near_bench(t) for texts in BENCH.values() for t in texts)
    assert not near_bench("What is the capital of Spain?")
    assert not near_bench("Write a Python function that returns the smallest element of a set.")


def test_distill_drafter_command_answers_its_own_prompts_after_the_task_sets(tmp_path):
    out = tmp_path / "distilled"
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "distill-drafter", "--verifier", "embedded", "--splits", "distill",
           "--out", str(out), "--answer-tokens", "4", "--synthetic-prompts", "6", "--gen-batch", "16", "--steps", "2",
           "--layers", "1", "--head-rows", "2048"]
    result = warm_start.run(cmd, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((out / "distill_report.json").read_text())
    written = PromptBatch.load(out / "synthetic_prompts.json")
    assert written.attempts == 6 and report["synthetic_prompts"] == len(written.prompts) > 0
    data = json.loads((out / "distill_data.json").read_text())
    assert report["answers"] == len(data) and len(data) > len(written.prompts)
    assert "synthetic prompts: 6/6 written" in result.stdout
