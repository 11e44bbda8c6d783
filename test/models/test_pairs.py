"""models.pairs.load_pair: one loader for 'embedded', a directory (train-sim-pair output or checkpoint)
and a hub id; a source that cannot be loaded here is one clear error naming it."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from edge_spec_ros import warm_start
from edge_spec_ros.models.adapters import ExitAdapters
from edge_spec_ros.models.pairs import (
    EMBEDDED,
    SIM_PAIR_DIR,
    ModelSourceError,
    load_pair,
    resolve,
)
from edge_spec_ros.models.prompt import PromptConfig
from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.models.tiny import truncated_copy

HUB_ID = "no-such-org/no-such-qwen2-vl"  # never in the local cache; HF_HUB_OFFLINE=1 (conftest) keeps it off the hub


def final_logits(model_or_part, prompt):
    stack = model_or_part.stack
    seq = prompt.input_ids.tolist()
    return stack.final_logits(stack.prefill(prompt), seq, len(seq) - 1)


@pytest.fixture(scope="module")
def checkpoint(target_model, tokenizer, tmp_path_factory):
    """A Qwen2-VL checkpoint directory as save_pretrained writes it, with its tokenizer."""
    out = tmp_path_factory.mktemp("checkpoint")
    target_model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def pair_dir(target_model, tmp_path_factory):
    """A train-sim-pair output: verifier/, drafter/, exits/ and prompt.json."""
    out = tmp_path_factory.mktemp("pair")
    target_model.save_pretrained(out / "verifier")
    truncated_copy(target_model, 2).save_pretrained(out / "drafter")
    ExitAdapters(64, [2, 4], bottleneck=8).save(out / "exits")
    (out / "prompt.json").write_text(json.dumps({"max_pixels": 112 * 84}))
    return out


def test_embedded_loads_the_shipped_pair_and_only_the_parts_asked_for():
    pair = load_pair(EMBEDDED)
    assert pair.drafter is not None and pair.verifier is not None
    assert (pair.source, pair.location) == (EMBEDDED, str(SIM_PAIR_DIR))
    assert pair.verifier.exit_layers == (1, 2, 3, 4, 5)
    counts = pair.parameters()
    assert counts["verifier"] > counts["drafter"] > 0
    robot = load_pair(EMBEDDED, parts=("drafter",))
    assert robot.verifier is None
    assert robot.parameters() == counts  # the verifier it pairs with: counted from its config, no weights
    cloud = load_pair(EMBEDDED, parts=("verifier",), dtype="bfloat16", device="meta")  # a pair: float32, CPU
    assert cloud.drafter is None and cloud.verifier.stack.dtype == torch.float32
    assert robot.max_pixels == cloud.max_pixels == pair.max_pixels
    assert robot.tokenizer.get_vocab() == cloud.tokenizer.get_vocab()


def test_a_quantized_drafter_counts_its_weights_at_their_float_shapes():
    quantized = load_pair(EMBEDDED, parts=("drafter",), quantize_drafter="int8-dynamic")
    assert any(type(p).__name__ == "Int8Tensor" for p in quantized.drafter.stack.model.parameters())  # torchao's
    assert quantized.parameters() == load_pair(EMBEDDED, parts=("drafter",)).parameters()


def test_a_train_sim_pair_directory(pair_dir, target_model, prompts):
    pair = load_pair(pair_dir)
    assert resolve(pair_dir).kind == "pair" and pair.location == str(pair_dir)
    assert pair.max_pixels == 112 * 84  # the budget it was trained at travels with it
    assert pair.verifier.exit_layers == (2, 4) and pair.drafter.stack.num_layers == 2
    torch.testing.assert_close(final_logits(pair.verifier, prompts[0]), final_logits(
        load_pair(pair_dir, parts=("verifier",)).verifier, prompts[0]))
    replaced = ExitAdapters(64, [3], bottleneck=4)
    replaced.save(pair_dir.parent / "other_exits")
    verifier = load_pair(pair_dir, parts=("verifier",), adapters=pair_dir.parent / "other_exits").verifier
    assert verifier.exit_layers == (3,)


def test_a_checkpoint_directory(checkpoint, target_model, prompts, tokenizer):
    pair = load_pair(str(checkpoint))
    assert resolve(checkpoint).kind == "checkpoint"
    assert pair.max_pixels == PromptConfig.max_pixels
    assert pair.tokenizer.get_vocab() == tokenizer.get_vocab()
    stack = DecoderStack(target_model)
    seq = prompts[0].input_ids.tolist()
    expected = stack.final_logits(stack.prefill(prompts[0]), seq, len(seq) - 1)
    torch.testing.assert_close(final_logits(pair.verifier, prompts[0]), expected)
    torch.testing.assert_close(final_logits(pair.drafter, prompts[0]), expected)  # the drafter: the checkpoint itself
    assert pair.parameters()["verifier"] == sum(p.numel() for p in target_model.parameters())


def test_a_self_drafter_and_a_drafter_from_another_source(checkpoint, pair_dir, tmp_path):
    adapters = ExitAdapters(64, [2, 4], bottleneck=8)
    adapters.save(tmp_path / "exits")
    pair = load_pair(checkpoint, parts=("drafter",), draft_layers=4, adapters=tmp_path / "exits")
    assert pair.drafter.stack.num_layers == 4
    with pytest.raises(ValueError, match="no exit at layer 3"):
        load_pair(checkpoint, parts=("drafter",), draft_layers=3, adapters=tmp_path / "exits")
    assert load_pair(pair_dir, parts=("drafter",), draft_layers=4).drafter.stack.num_layers == 4  # of verifier/
    other = load_pair(checkpoint, drafter=pair_dir)
    assert other.drafter.stack.num_layers == 2 and other.verifier.num_layers == 6


def test_a_hub_id_that_is_not_here_is_one_error_naming_it():
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    with pytest.raises(ModelSourceError) as info:
        load_pair(HUB_ID, parts=("drafter",))
    message = str(info.value)
    assert HUB_ID in message and "HF_HUB_OFFLINE" in message and "\n" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_the_command_line_reports_a_source_it_cannot_load_in_one_line():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    run = warm_start.run([sys.executable, "-m", "edge_spec_ros.cli", "demo", "--verifier", HUB_ID],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(f"error: model source '{HUB_ID}'")


@pytest.mark.parametrize("source, match", [
    ("./no/such/pair", "no such directory"),
    ("a/b/c", "not a hub id"),
])
def test_neither_a_directory_nor_a_hub_id(source, match):
    with pytest.raises(ModelSourceError, match=match):
        resolve(source)


def test_a_directory_with_neither_layout_says_how_to_make_a_pair(tmp_path):
    with pytest.raises(ModelSourceError, match="train-sim-pair"):
        load_pair(tmp_path)
    (tmp_path / "verifier").mkdir()
    with pytest.raises(ModelSourceError, match="lacks"):
        load_pair(tmp_path)


def test_unknown_parts_are_refused():
    with pytest.raises(ValueError, match="parts"):
        load_pair(EMBEDDED, parts=("robot",))
