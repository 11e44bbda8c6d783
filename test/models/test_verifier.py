"""Early-exit verifier: final exit = the model, untrained exit = logit lens, only adapters train."""

from __future__ import annotations

import pytest
import torch

from edge_spec_ros.models.adapters import ExitAdapters
from edge_spec_ros.models.verifier import EarlyExitVerifier

ATOL = 1e-4


def hf_outputs(model, prompt, extra):
    ids = torch.cat([prompt.input_ids, torch.tensor(extra, dtype=torch.long)])[None]
    types = torch.cat([prompt.mm_token_type_ids, torch.zeros(len(extra), dtype=torch.int32)])[None]
    with torch.inference_mode():
        return model(input_ids=ids, pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw,
                     mm_token_type_ids=types, output_hidden_states=True)


def test_every_exit_in_one_pass(target_model, prompts):
    verifier = EarlyExitVerifier(target_model)
    L = verifier.num_layers
    prompt = prompts[0]
    draft = [12, 13, 14, 15]
    kv = verifier.start(prompt)
    seq = prompt.input_ids.tolist() + draft
    exits = list(verifier.exits(kv, seq, len(prompt) - 1))
    assert [e.layer for e in exits] == list(range(1, L + 1))
    assert [e.is_final for e in exits] == [False] * (L - 1) + [True]
    assert all(e.logits.shape == (len(draft) + 1, target_model.config.text_config.vocab_size) for e in exits)

    ref = hf_outputs(target_model, prompt, draft)
    first = len(prompt) - 1
    # the final exit is the unmodified model
    torch.testing.assert_close(exits[-1].logits, ref.logits[0, first:].float(), atol=ATOL, rtol=0)
    # an untrained exit is the logit lens lm_head(norm(h_l)); hidden_states[l] is the output of layer l
    text = target_model.model.language_model
    for e in exits[:-1]:
        h = ref.hidden_states[e.layer][0, first:]
        with torch.inference_mode():
            lens = target_model.lm_head(text.norm(h)).float()
        torch.testing.assert_close(e.logits, lens, atol=ATOL, rtol=0)


def test_exit_subset_and_bad_layers(target_model, prompts):
    L = EarlyExitVerifier(target_model).num_layers
    verifier = EarlyExitVerifier(target_model, exit_layers=(2, 4))
    kv = verifier.start(prompts[1])
    seq = prompts[1].input_ids.tolist() + [21, 22]
    assert [e.layer for e in verifier.exits(kv, seq, len(prompts[1]) - 1)] == [2, 4, L]
    with pytest.raises(ValueError, match="final exit"):
        EarlyExitVerifier(target_model, ExitAdapters(64, [L]))


def test_adapters_are_identity_at_init_and_only_they_train(target_model, tmp_path):
    adapters = ExitAdapters(64, [1, 2, 3])
    h = torch.randn(5, 64)
    assert torch.equal(adapters[2](h), h)
    # each exit's loss reaches only its own adapter; the base model is frozen
    for p in target_model.parameters():
        p.requires_grad_(False)
    text = target_model.model.language_model
    loss = target_model.lm_head(text.norm(adapters[2](h))).logsumexp(-1).sum()
    loss.backward()
    assert adapters[2].down.weight.grad is None or adapters[2].down.weight.grad.abs().sum() == 0  # W_up = 0
    assert adapters[2].up.weight.grad.abs().sum() > 0
    assert adapters[1].up.weight.grad is None and adapters[3].up.weight.grad is None
    assert all(p.grad is None for p in target_model.parameters())
    # round trip through safetensors
    with torch.no_grad():
        adapters[2].up.weight.normal_()
    adapters.save(tmp_path)
    loaded = ExitAdapters.load(tmp_path)
    assert loaded.layers == [1, 2, 3]
    assert torch.equal(loaded[2](h), adapters[2](h))


def test_adapter_changes_its_exit_only(target_model, prompts):
    adapters = ExitAdapters(64, [1, 2, 3, 4, 5])
    with torch.no_grad():
        adapters[3].up.weight.normal_(std=0.5)
    plain = EarlyExitVerifier(target_model)
    tuned = EarlyExitVerifier(target_model, adapters)
    prompt = prompts[2]
    seq = prompt.input_ids.tolist() + [23, 24]
    first = len(prompt) - 1
    a = {e.layer: e.logits for e in plain.exits(plain.start(prompt), seq, first)}
    b = {e.layer: e.logits for e in tuned.exits(tuned.start(prompt), seq, first)}
    for layer in a:
        assert torch.equal(a[layer], b[layer]) == (layer != 3)
