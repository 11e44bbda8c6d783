"""Drafter: q is exactly the distribution sampled from; drafts depend only on the prefix."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig, Stream, sample

T = SamplingConfig(temperature=0.9)


@pytest.fixture(scope="module")
def drafter(target_model):
    return Drafter(truncated_copy(target_model, 3))


def test_q_is_the_softmax_the_tokens_were_drawn_from(drafter, prompts):
    prompt = prompts[0]
    rng = PositionalRNG(7)
    prefix = prompt.input_ids.tolist()
    draft = drafter.draft(drafter.start(prompt), prefix, 4, T, rng)
    assert draft.position == len(prefix) and draft.gamma == 4 and draft.q.shape[0] == 4
    stack = DecoderStack(drafter.stack.model)
    kv = stack.prefill(prompt)
    seq = list(prefix)
    for i, token in enumerate(draft.tokens):
        logits = stack.final_logits(kv, seq, len(seq) - 1)[-1]
        torch.testing.assert_close(draft.q[i], torch.softmax(logits / T.temperature, -1), atol=1e-6, rtol=0)
        assert token == sample(draft.q[i], rng.uniform(Stream.DRAFT, len(seq)))
        seq.append(token)


def test_greedy_draft_is_argmax_and_carries_no_q(drafter, prompts):
    prompt = prompts[1]
    draft = drafter.draft(drafter.start(prompt), prompt.input_ids.tolist(), 3, SamplingConfig(), PositionalRNG())
    assert draft.q is None
    stack = DecoderStack(drafter.stack.model)
    kv = stack.prefill(prompt)
    seq = prompt.input_ids.tolist()
    for token in draft.tokens:
        assert token == int(stack.final_logits(kv, seq, len(seq) - 1)[-1].argmax())
        seq.append(token)


def test_a_drafted_stop_token_ends_the_draft(drafter, prompts):
    """Nothing after a stop token is ever emitted, so the draft ends there: the same tokens up to it,
    sampled or greedy, and no draft step after it."""
    prompt = prompts[1]
    prefix = prompt.input_ids.tolist()
    for sampling in (SamplingConfig(), T):
        full = drafter.draft(drafter.start(prompt), prefix, 5, sampling, PositionalRNG(2))
        stop = full.tokens[2]
        cut = drafter.draft(drafter.start(prompt), prefix, 5, sampling, PositionalRNG(2), stop=(stop,))
        ends = full.tokens.index(stop) + 1
        assert cut.tokens == full.tokens[:ends] and cut.gamma == ends < full.gamma
        if sampling is T:
            assert torch.equal(cut.q, full.q[:ends])
        other = drafter.draft(drafter.start(prompt), prefix, 5, sampling, PositionalRNG(2), stop=(-1,))
        assert other.tokens == full.tokens  # a stop token never drafted changes nothing


def test_a_fork_drafts_bit_identically(drafter, prompts):
    """What FSD relies on: a pre-draft worker on a fork of the cache drafts exactly what the drafter
    itself would draft from the same prefix."""
    prompt = prompts[2]
    rng = PositionalRNG(3)
    prefix = prompt.input_ids.tolist()
    kv = drafter.start(prompt)
    first = drafter.draft(kv, prefix, 4, T, rng)
    new_prefix = prefix + list(first.tokens[:2]) + [40]  # δ = 2 plus a correction
    fork = kv.fork()
    a = drafter.draft(fork, new_prefix, 4, T, rng)
    b = drafter.draft(kv, new_prefix, 4, T, rng)
    assert a.tokens == b.tokens and torch.equal(a.q, b.q)


def test_rolled_back_cache_drafts_like_a_fresh_one(drafter, prompts):
    prompt = prompts[3]
    rng = PositionalRNG(5)
    prefix = prompt.input_ids.tolist()
    kv = drafter.start(prompt)
    drafter.draft(kv, prefix + [30, 31], 4, T, rng)
    reused = drafter.draft(kv, prefix + [30, 44], 4, T, rng)
    fresh = drafter.draft(drafter.start(prompt), prefix + [30, 44], 4, T, rng)
    assert reused.tokens == fresh.tokens
    torch.testing.assert_close(reused.q, fresh.q, atol=1e-5, rtol=0)


def test_catch_up_extends_the_cache_to_all_but_the_last_token_and_drafts_the_same(drafter, prompts):
    """After tokens the drafter did not draft (AS²'s cloud-only chunks) ``catch_up`` fills its cache up to
    the last one; a cache one token behind, or level, is left to the draft step."""
    prompt = prompts[1]
    rng = PositionalRNG(2)
    seq = prompt.input_ids.tolist() + [30, 31, 32, 33]
    kv = drafter.start(prompt)
    assert drafter.catch_up(kv, seq) and kv.tokens == seq[:-1]
    assert not drafter.catch_up(kv, seq) and not drafter.catch_up(kv, seq + [34])
    caught = drafter.draft(kv, seq, 4, T, rng)
    fresh = drafter.draft(drafter.start(prompt), seq, 4, T, rng)
    assert caught.tokens == fresh.tokens
    torch.testing.assert_close(caught.q, fresh.q, atol=1e-5, rtol=0)


def test_int8_quantized_drafter(target_model, prompts):
    quantized = Drafter(truncated_copy(target_model, 3), quantize="int8-dynamic")
    weights = {type(m.weight.data).__name__ for m in quantized.stack.model.modules() if isinstance(m, nn.Linear)}
    assert weights == {"Int8Tensor"}
    prompt = prompts[0]
    draft = quantized.draft(quantized.start(prompt), prompt.input_ids.tolist(), 4, T, PositionalRNG())
    assert draft.gamma == 4
    torch.testing.assert_close(draft.q.sum(-1), torch.ones(4), atol=1e-5, rtol=0)


def test_gamma_must_be_positive(drafter, prompts):
    with pytest.raises(ValueError, match="γ"):
        drafter.draft(drafter.start(prompts[0]), prompts[0].input_ids.tolist(), 0, T, PositionalRNG())


def test_self_drafter_is_the_verifiers_exit(target_model, prompts, tmp_path):
    """First k layers + Adapter_k + norm + LM head = the verifier's exit k, on image prompts too;
    ``DrafterConfig(layers=k, adapters=DIR)`` builds it from a checkpoint directory."""
    from edge_spec_ros.models.adapters import ExitAdapters
    from edge_spec_ros.models.drafter import DrafterConfig, self_draft_model
    from edge_spec_ros.models.verifier import EarlyExitVerifier

    torch.manual_seed(3)
    adapters = ExitAdapters(64, [2, 4], bottleneck=8)
    for p in adapters.parameters():
        nn.init.normal_(p, std=0.2)  # an adapter that is not the identity
    verifier = EarlyExitVerifier(target_model, adapters)
    prompt = prompts[0]
    seq = prompt.input_ids.tolist()
    exit4 = next(e for e in verifier.exits(verifier.start(prompt), seq, len(seq) - 1) if e.layer == 4)
    drafter = Drafter(self_draft_model(target_model, 4, adapters[4]))
    assert drafter.stack.num_layers == 4
    torch.testing.assert_close(drafter.stack.final_logits(drafter.start(prompt), seq, len(seq) - 1), exit4.logits,
                               atol=1e-5, rtol=1e-5)

    target_model.save_pretrained(tmp_path / "model")
    adapters.save(tmp_path / "exits")
    loaded = Drafter.from_config(DrafterConfig(model=str(tmp_path / "model"), layers=4, adapters=str(tmp_path / "exits")))
    torch.testing.assert_close(loaded.stack.final_logits(loaded.start(prompt), seq, len(seq) - 1), exit4.logits,
                               atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="no exit at layer 3"):
        Drafter.from_config(DrafterConfig(model=str(tmp_path / "model"), layers=3, adapters=str(tmp_path / "exits")))
    with pytest.raises(ValueError, match="keeps 1..5"):
        self_draft_model(target_model, 6)


def test_a_drafter_with_fewer_rows_drafts_after_an_id_only_the_verifier_has(target_model, prompts):
    """The verifier may commit an id past the drafter's rows (Qwen2-VL-7B's 152,064 against the 2B's
    151,936): the drafter embeds it as its last row and drafts on; the context keeps the real id."""
    from narrow_vocab import narrow_copy

    rows = target_model.config.text_config.vocab_size - 8
    drafter = Drafter(narrow_copy(target_model, rows))
    kv = drafter.start(prompts[0])
    prefix = prompts[0].input_ids.tolist() + [rows + 3]  # an id only the verifier has
    draft = drafter.draft(kv, prefix, 3, SamplingConfig(1.0), PositionalRNG(0))
    assert len(draft.tokens) == 3 and all(t < rows for t in draft.tokens) and draft.q.shape == (3, rows)
    assert kv.tokens[len(prefix) - 1] == rows + 3
