"""Self-distillation text for the exits: the verifier's own greedy answers, deterministic, cached."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from edge_spec_ros import warm_start
from edge_spec_ros.bench.tasks import task_prompts, text_encoder
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.training.drafter_distill import Sample, save_samples
from edge_spec_ros.training.self_distill import (
    STREAM_FILE,
    answers_stream,
    cached_stream,
    self_generated_stream,
    stream_batches,
)


def test_stream_is_prompts_and_greedy_answers(target_model, tokenizer, tmp_path):
    verifier = EarlyExitVerifier(target_model)
    prompts = [t.prompt for t in task_prompts(text_encoder(tokenizer), 1, split="train", tasks=("maths", "qa"))]
    stream = self_generated_stream(verifier, prompts, 5)
    expected = []
    for p in prompts:
        expected += p.input_ids.tolist() + autoregressive(verifier, p, DecodeConfig(max_new_tokens=5)).tokens
    assert stream == expected
    assert cached_stream(tmp_path, lambda: stream) == stream and (tmp_path / STREAM_FILE).is_file()
    assert cached_stream(tmp_path, list) == stream  # a resumed run reads the same tokens back
    batch = stream_batches(stream, 3, 8, seed=1)
    assert batch(5).shape == (3, 8) and torch.equal(batch(5), batch(5)) and not torch.equal(batch(5), batch(6))


def test_answers_stream_is_the_distillation_sequences_in_order(tmp_path):
    path = tmp_path / "distill_data.json"
    save_samples([Sample([1, 2, 3, 4], 2, [[3], [4]], [[1.0], [1.0]]), Sample([5, 6, 7], 1)], path)
    assert answers_stream(path) == [1, 2, 3, 4, 5, 6, 7]
    path.write_text(json.dumps({"ids": [1, 2]}))
    with pytest.raises(ValueError, match="not a distill_data.json"):
        answers_stream(path)


def test_train_exits_refuses_answers_without_task_text(tmp_path):
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "train-exits", "--out", str(tmp_path / "exits"),
           "--answers", str(tmp_path / "distill_data.json")]
    result = warm_start.run(cmd, capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert result.returncode != 0 and "--answers needs --text tasks" in result.stderr
