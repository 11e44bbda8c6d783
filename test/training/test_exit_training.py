"""Early-exit adapter training: only adapters learn, exits move towards the final exit, a resumed
run is the same run, and the command writes the Fig. 7-style report."""

from __future__ import annotations

import json
import sys

import torch

from edge_spec_ros import warm_start
from edge_spec_ros.models.adapters import ExitAdapters
from edge_spec_ros.models.corpus import corpus
from edge_spec_ros.training.exits import ExitTrainingConfig, evaluate, exit_losses, token_batches, train_exits

CONFIG = ExitTrainingConfig(steps=60, batch_size=4, seq_len=24, lr=3e-3, checkpoint_every=20)


def test_training_improves_exits_and_leaves_the_base_model_alone(target_model, tokenizer, tmp_path):
    base = {k: v.clone() for k, v in target_model.state_dict().items()}
    torch.manual_seed(0)
    adapters = ExitAdapters(64, [1, 3, 5], bottleneck=32)
    batch = token_batches(tokenizer, corpus(), CONFIG)
    held_out = [batch(10**9 + i) for i in range(3)]
    before = evaluate(target_model, adapters, held_out)
    loss_before = sum(float(v.detach()) for v in exit_losses(target_model, adapters, held_out[0]).values())
    assert train_exits(target_model, adapters, batch, CONFIG, tmp_path) == CONFIG.steps
    after = evaluate(target_model, adapters, held_out)
    loss_after = sum(float(v.detach()) for v in exit_losses(target_model, adapters, held_out[0]).values())
    assert loss_after < 0.9 * loss_before
    assert sum(after.match_pct) > sum(before.match_pct)
    assert all(torch.equal(v, target_model.state_dict()[k]) for k, v in base.items())  # frozen
    assert not any(p.requires_grad for p in target_model.parameters())


def test_a_resumed_run_is_the_same_run(target_model, tokenizer, tmp_path):
    batch = token_batches(tokenizer, corpus(), CONFIG)
    torch.manual_seed(1)
    straight = ExitAdapters(64, [2, 4], bottleneck=16)
    torch.manual_seed(1)
    resumed = ExitAdapters(64, [2, 4], bottleneck=16)
    train_exits(target_model, straight, batch, CONFIG, tmp_path / "straight")
    half = ExitTrainingConfig(**{**CONFIG.__dict__, "steps": 40})
    assert train_exits(target_model, resumed, batch, half, tmp_path / "resumed") == 40
    again = ExitAdapters(64, [2, 4], bottleneck=16)  # a fresh process would start from these
    assert train_exits(target_model, again, batch, CONFIG, tmp_path / "resumed") == CONFIG.steps
    for k, v in straight.state_dict().items():
        torch.testing.assert_close(again.state_dict()[k], v, atol=1e-6, rtol=0)


def test_train_exits_command(tmp_path):
    out = tmp_path / "exits"
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "train-exits", "--out", str(out), "--steps", "20",
           "--batch-size", "2", "--seq-len", "16"]
    result = warm_start.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "token match %" in result.stdout and "final" in result.stdout
    report = json.loads((out / "exit_report.json").read_text())
    assert report["layers"] == [1, 2, 3, 4, 5] and len(report["match_pct"]) == 5
    assert (out / "exit_report.png").read_bytes()[:4] == b"\x89PNG"
    assert ExitAdapters.load(out).layers == [1, 2, 3, 4, 5]
