"""Self-distillation text for the exits: the verifier's own greedy answers, deterministic, cached."""

from __future__ import annotations

import torch

from edge_spec_ros.bench.tasks import task_prompts, text_encoder
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.training.self_distill import (
    STREAM_FILE,
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
