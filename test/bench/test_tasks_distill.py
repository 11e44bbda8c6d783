"""The text task set's distillation split: every kind, disjoint from the bench and training prompts."""

from __future__ import annotations

import pytest

from edge_spec_ros.bench.tasks import BENCH, DISTILL, TASK_KINDS, TRAIN, task_prompts, text_encoder


def test_the_distill_split_covers_every_kind_and_never_a_bench_prompt(tokenizer):
    assert set(DISTILL) == set(TASK_KINDS)
    assert all(len(DISTILL[t]) >= 10 and len(set(DISTILL[t])) == len(DISTILL[t]) for t in TASK_KINDS)
    distill = {p for t in TASK_KINDS for p in DISTILL[t]}
    assert not distill & {p for t in TASK_KINDS for p in BENCH[t]}
    assert not distill & {p for t in TASK_KINDS for p in TRAIN[t]}
    # the summaries are of the training articles, never of a bench article
    bench_articles = {p.split("\n\n", 1)[1] for p in BENCH["summarisation"]}
    assert all(p.split("\n\n", 1)[1] not in bench_articles for p in DISTILL["summarisation"])
    prompts = task_prompts(text_encoder(tokenizer), split="distill")
    assert len(prompts) == len(distill) and [p.task for p in prompts][::20] == list(TASK_KINDS)
    with pytest.raises(ValueError, match="'bench', 'train' or 'distill'"):
        task_prompts(text_encoder(tokenizer), split="test")
