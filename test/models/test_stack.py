"""The layer-by-layer stack reproduces HF's forward, and cache rollback equals recomputation."""

from __future__ import annotations

import pytest
import torch

from edge_spec_ros.models.kv_cache import common_prefix
from edge_spec_ros.models.stack import DecoderStack

ATOL = 1e-4


def hf_logits(model, prompt, extra: list[int]) -> torch.Tensor:
    """(n + len(extra), V) logits of the plain HF forward with the image."""
    ids = torch.cat([prompt.input_ids, torch.tensor(extra, dtype=torch.long)])[None]
    types = torch.cat([prompt.mm_token_type_ids, torch.zeros(len(extra), dtype=torch.int32)])[None]
    with torch.inference_mode():
        return model(input_ids=ids, pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw,
                     mm_token_type_ids=types).logits[0].float()


def test_final_logits_equal_hf_forward(target_model, prompts):
    stack = DecoderStack(target_model)
    for prompt in prompts[:2]:
        extra = [11, 42, 7, 300]
        kv = stack.prefill(prompt)
        seq = prompt.input_ids.tolist() + extra
        got = stack.final_logits(kv, seq, len(prompt) - 1)
        torch.testing.assert_close(got, hf_logits(target_model, prompt, extra)[len(prompt) - 1:], atol=ATOL, rtol=0)


def test_rollback_gives_the_same_logits_as_recomputing(target_model, prompts):
    """Extend by a rejected draft, roll back to the accepted prefix, extend differently: the logits
    equal a fresh prefill + forward of the final sequence."""
    stack = DecoderStack(target_model)
    prompt = prompts[0]
    base = prompt.input_ids.tolist()
    kv = stack.prefill(prompt)
    stack.final_logits(kv, base + [25, 26, 27, 28, 29], len(base) - 1)  # a γ = 4 round
    assert kv.length == len(base) + 5
    accepted = base + [25, 26, 100]  # δ = 2, then a correction token
    rolled = stack.final_logits(kv, accepted + [23, 24], len(accepted) - 1)
    assert kv.tokens == accepted + [23, 24]
    fresh_kv = stack.prefill(prompt)
    fresh = stack.final_logits(fresh_kv, accepted + [23, 24], len(base) - 1)[-3:]
    torch.testing.assert_close(rolled, fresh, atol=ATOL, rtol=0)
    torch.testing.assert_close(rolled, hf_logits(target_model, prompt, [25, 26, 100, 23, 24])[-3:], atol=ATOL, rtol=0)


def test_fork_is_independent(target_model, prompts):
    stack = DecoderStack(target_model)
    prompt = prompts[1]
    base = prompt.input_ids.tolist()
    kv = stack.prefill(prompt)
    stack.final_logits(kv, base + [21, 22, 23], len(base))
    fork = kv.fork(len(base) + 1)
    a = stack.final_logits(fork, base + [21, 29, 29], len(base) + 1)
    assert kv.tokens == base + [21, 22, 23]  # the original is untouched
    b = stack.final_logits(kv, base + [21, 29, 29], len(base) + 1)
    assert torch.equal(a, b)  # same state, same computation: bit-identical


def test_interrupted_pass_leaves_a_consistent_cache(target_model, prompts):
    stack = DecoderStack(target_model)
    prompt = prompts[0]
    base = prompt.input_ids.tolist()
    kv = stack.prefill(prompt)
    run = stack.run(kv, base + [21, 22], len(base) - 1)
    next(run)  # only the first layer ran
    run.close()
    assert kv.length == len(base) - 1
    assert all(layer.keys.shape[-2] == kv.length for layer in kv.layers)
    got = stack.final_logits(kv, base + [21, 22], len(base) - 1)
    torch.testing.assert_close(got, hf_logits(target_model, prompt, [21, 22])[len(base) - 1:], atol=ATOL, rtol=0)


def test_cannot_roll_back_into_the_image(target_model, prompts):
    stack = DecoderStack(target_model)
    prompt = prompts[0]
    kv = stack.prefill(prompt)
    with pytest.raises(ValueError, match="outside"):
        next(stack.run(kv, prompt.input_ids.tolist(), 3))
    with pytest.raises(ValueError, match="prefilled prompt"):
        kv.truncate(3)


def test_text_only_prompt(target_model, encoder):
    prompt = encoder.encode("stop")
    assert prompt.pixel_values is None
    stack = DecoderStack(target_model)
    kv = stack.prefill(prompt)
    got = stack.final_logits(kv, prompt.input_ids.tolist() + [28], len(prompt) - 1)
    torch.testing.assert_close(got, hf_logits(target_model, prompt, [28])[-2:], atol=ATOL, rtol=0)


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0


@pytest.mark.parametrize("chunk", [1, 5, 16])
def test_chunked_prefill_equals_one_prefill(target_model, prompts, chunk):
    """A prefill cut into slices (the server interleaves other sessions between them) caches what one
    prefill caches: the next round's logits agree, image prompts included, and the slices cover the
    prompt once."""
    stack = DecoderStack(target_model)
    for prompt in prompts[:2]:
        seq = prompt.input_ids.tolist() + [11, 42, 7]
        pending = stack.begin_prefill(prompt, chunk)
        steps = 1
        while not pending.step():
            steps += 1
            assert 0 <= pending.done < pending.total
        assert steps == -(-(len(prompt) - 1) // chunk) * stack.num_layers  # one layer of one slice a step
        assert pending.kv.tokens == prompt.input_ids.tolist()[:-1]
        chunked = stack.final_logits(pending.kv, seq, len(prompt) - 1)
        whole = stack.final_logits(stack.prefill(prompt), seq, len(prompt) - 1)
        torch.testing.assert_close(chunked, whole, atol=ATOL, rtol=0)
        assert torch.equal(chunked.argmax(-1), whole.argmax(-1))


def test_slices_bounded_in_attention_cells_cover_the_prompt_once():
    """s·(c + s) ≤ cells for every slice (but the one-position minimum), at most chunk positions, and the
    slices add up to the prompt: they shorten as the cache grows."""
    from edge_spec_ros.models.stack import slice_length

    for total, chunk, cells in ((16384, 256, 256 * 1024), (1000, 64, 5000), (50, 8, 3)):
        done, lengths = 0, []
        while done < total:
            s = slice_length(done, total - done, chunk, cells)
            assert 1 <= s <= chunk and (s == 1 or s * (done + s) <= cells), (done, s)
            lengths.append(s)
            done += s
        assert done == total and lengths[0] >= lengths[-1]
    assert slice_length(16000, 384, 256, 256 * 1024) == 16  # a layer of a slice at 16k: 16 positions
    assert slice_length(0, 700, 256, 0) == 256


def test_the_stack_mask_is_hfs_sdpa_mask():
    """The mask built once per forward equals HF's ``create_causal_mask`` for SDPA (None where HF gives
    None, else the same visibility as an additive 0/-inf mask)."""
    from transformers import DynamicCache
    from transformers.masking_utils import sdpa_mask

    from edge_spec_ros.models.stack import causal_mask

    for past, m in ((0, 7), (5, 1), (5, 3), (100, 16)):
        mine = causal_mask(past, m, torch.float32)
        cache = DynamicCache()
        if past:
            cache.update(torch.zeros(1, 1, past, 2), torch.zeros(1, 1, past, 2), 0)
        hf = sdpa_mask(batch_size=1, cache_position=torch.arange(past, past + m), kv_length=past + m, kv_offset=0,
                       q_length=m, q_offset=past, allow_is_causal_skip=True)
        if hf is None:
            assert mine is None, (past, m)
        else:
            assert torch.equal(mine == 0, hf.expand(1, 1, m, past + m)), (past, m)


def test_grouped_query_sdpa_equals_hfs_to_the_bit():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from edge_spec_ros.models.stack import causal_mask, sdpa_gqa_attention_forward

    class Attention(torch.nn.Module):
        num_key_value_groups = 2
        is_causal = True

    torch.manual_seed(0)
    for past, m in ((40, 9), (300, 16), (10, 1), (0, 12)):
        q = torch.randn(1, 4, m, 32)
        k, v = torch.randn(1, 2, past + m, 32), torch.randn(1, 2, past + m, 32)
        mask = causal_mask(past, m, torch.float32)
        ours, _ = sdpa_gqa_attention_forward(Attention(), q, k, v, mask, scaling=0.17)
        hfs, _ = sdpa_attention_forward(Attention(), q, k, v, mask, scaling=0.17)
        assert torch.equal(ours, hfs), (past, m)


def test_kv_layers_grow_in_place_and_roll_back():
    from edge_spec_ros.models.kv_cache import GROW_MIN, KVCache

    kv = KVCache(reserve=10)
    k = torch.arange(2 * 8 * 3, dtype=torch.float32).reshape(1, 2, 8, 3)
    keys, values = kv.update(k, -k, 0)
    assert torch.equal(keys, k) and torch.equal(values, -k) and kv.layers[0].capacity == 8 + GROW_MIN
    kv.update(k[:, :, :2] + 100, k[:, :, :2], 0)
    assert kv.layers[0].keys.shape[-2] == 10 and torch.equal(kv.layers[0].keys[:, :, 8:], k[:, :, :2] + 100)
    kv.layers[0].truncate(3)
    big = torch.ones(1, 2, GROW_MIN + 20, 3)
    keys, _ = kv.update(big, big, 0)  # past the capacity: reallocated, the cached positions kept
    assert keys.shape[-2] == 3 + GROW_MIN + 20 and kv.layers[0].capacity >= keys.shape[-2]
    assert torch.equal(keys[:, :, :3], k[:, :, :3]) and torch.equal(keys[:, :, 3:], big)


def test_prefill_in_cell_bounded_slices_equals_one_prefill(target_model, prompts):
    stack = DecoderStack(target_model)
    prompt = prompts[0]
    seq = prompt.input_ids.tolist() + [11, 42, 7]
    pending = stack.begin_prefill(prompt, 64, 300)
    steps = 1
    while not pending.step():
        steps += 1
    assert steps > -(-(len(prompt) - 1) // 64) * stack.num_layers  # the cells bound cut the slices shorter
    chunked = stack.final_logits(pending.kv, seq, len(prompt) - 1)
    whole = stack.final_logits(stack.prefill(prompt), seq, len(prompt) - 1)
    torch.testing.assert_close(chunked, whole, atol=ATOL, rtol=0)
    pending = stack.begin_prefill(prompt, 64, 300)
    while not pending.step(budget_s=1.0):  # several layers and slices a step: the same cache
        pass
    assert torch.equal(stack.final_logits(pending.kv, seq, len(prompt) - 1), chunked)
