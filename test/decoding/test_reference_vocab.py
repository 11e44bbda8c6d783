"""The reference decoders with a drafter of fewer vocabulary rows than the verifier (V_q < V_p, as
Qwen2-VL-2B to -7B): greedy output is the verifier's own; sampled output follows the verifier over all
V_p ids (chi-square on a vocabulary of 8 against a drafter of 6, the verifier's 2 extra ids carrying
about 40 % of the mass); the negative control (a verifier cut to the drafter's ids) fails. The
drafter cannot read an id it has no row for, so the extra ids end a decode (``narrow_vocab``)."""

from __future__ import annotations

import pytest

from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.sparse import DraftDistribution

from narrow_vocab import as_pair, narrow_copy, stopped_two_token_distribution
from small_vocab import SAMPLING, VOCAB, chi_square_pvalue, exact_two_token_distribution, small_target

V_Q = 6  # the small drafter's ids: 0..5 of the verifier's 8
N_RUNS = 400


class CutVerifier(EarlyExitVerifier):
    """Negative control: scores only the drafter's ids (what dropping the verifier's extra rows would do)."""

    def logits(self, *args, **kwargs):
        return super().logits(*args, **kwargs)[..., :V_Q]


def test_greedy_with_a_smaller_draft_vocabulary_is_the_verifiers_own(target_model, prompts, tokenizer):
    verifier = EarlyExitVerifier(target_model)
    v_p, v_q = verifier.stack.vocab_size, len(tokenizer)  # 640 rows; the tokenizer's 633 ids
    drafter = Drafter(narrow_copy(truncated_copy(target_model, 4), v_q))
    assert drafter.stack.vocab_size == v_q < v_p
    stops = (tokenizer.eos_token_id, *range(v_q, v_p))
    accepted = 0
    for prompt in prompts[:2]:
        config = DecodeConfig(max_new_tokens=16, gamma=3, stop_tokens=stops)
        spec = speculative(drafter, verifier, prompt, config)
        assert spec.tokens == autoregressive(verifier, prompt, config).tokens
        accepted += spec.stats.accepted
    assert accepted > 0


def test_a_larger_draft_vocabulary_is_refused(target_model, prompts):
    verifier = EarlyExitVerifier(target_model)
    wide = Drafter(narrow_copy(truncated_copy(target_model, 1), verifier.stack.vocab_size + 64))
    config = DecodeConfig(max_new_tokens=4, gamma=2, sampling=SAMPLING)
    with pytest.raises(ValueError, match="drafter's vocabulary .* is larger than the target's"):
        speculative(wide, verifier, prompts[0], config)


def sample_pairs(drafter, verifier, prompt, distribution=None) -> list[tuple[int, int]]:
    out = []
    for seed in range(N_RUNS):
        config = DecodeConfig(max_new_tokens=2, gamma=2, sampling=SAMPLING, seed=seed,
                              stop_tokens=tuple(range(V_Q, VOCAB)))
        out.append(as_pair(speculative(drafter, verifier, prompt, config, distribution).tokens))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("distribution", [None, DraftDistribution(3)], ids=["sd", "tkslt"])
def test_sampled_with_a_smaller_draft_vocabulary_follows_the_verifier(tokenizer, distribution):
    target, prompt = small_target(tokenizer)
    expected = stopped_two_token_distribution(exact_two_token_distribution(target, prompt), VOCAB,
                                              range(V_Q, VOCAB))
    assert expected.reshape(VOCAB, VOCAB)[V_Q:].sum() > 0.2  # the extra ids carry mass
    drafter = Drafter(narrow_copy(truncated_copy(target, 1), V_Q))
    samples = sample_pairs(drafter, EarlyExitVerifier(target), prompt, distribution)
    assert chi_square_pvalue(samples, expected) > 1e-3
    assert sum(a >= V_Q or b >= V_Q for a, b in samples) > N_RUNS // 10
    control = sample_pairs(drafter, CutVerifier(target), prompt, distribution)
    assert chi_square_pvalue(control, expected) < 1e-6
