"""The exactness contract for the reference decoders.

Greedy: speculative output equals the target's own greedy output token for token.
Sampled: speculative output is distributed as the target's (chi-square on a small vocabulary, with a
negative control that must fail: a drafter that sends a q other than the one it sampled from).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.tiny import DRAFTER_SPEC, build_tiny_qwen2vl, truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.sparse import DraftDistribution
from small_vocab import N_RUNS, chi_square_pvalue, exact_two_token_distribution, small_target, two_tokens


@pytest.fixture(scope="module")
def verifier(target_model):
    return EarlyExitVerifier(target_model)


@pytest.fixture(scope="module")
def drafters(target_model, tokenizer):
    return {
        "self-draft (4 of 6 layers)": Drafter(truncated_copy(target_model, 4)),
        "independent model": Drafter(build_tiny_qwen2vl(DRAFTER_SPEC, tokenizer, seed=1)),
        "int8 self-draft (2 of 6 layers)": Drafter(truncated_copy(target_model, 2), quantize="int8-dynamic"),
    }


@pytest.fixture(scope="module")
def target_greedy(verifier, prompts, tokenizer) -> list[list[int]]:
    """The target's own greedy output for each prompt, once (autoregressive decoding has no γ)."""
    config = DecodeConfig(max_new_tokens=24, stop_tokens=(tokenizer.eos_token_id,))
    return [autoregressive(verifier, prompt, config).tokens for prompt in prompts]


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_speculative_equals_target_greedy(verifier, drafters, prompts, target_greedy, tokenizer, gamma):
    accepted = 0
    for (name, drafter), (prompt, target) in itertools.product(drafters.items(), zip(prompts, target_greedy)):
        config = DecodeConfig(max_new_tokens=24, gamma=gamma, stop_tokens=(tokenizer.eos_token_id,))
        spec = speculative(drafter, verifier, prompt, config)
        assert spec.tokens == target, f"{name}, γ={gamma}"
        assert spec.stats.tokens == len(spec.tokens) and spec.stats.drafted == gamma * spec.stats.rounds
        accepted += spec.stats.accepted
    assert accepted > 0  # the accept branches were exercised, not only rejections


def test_a_schedule_of_block_lengths_is_followed_and_greedy_stays_exact(verifier, drafters, prompts, target_greedy,
                                                                        tokenizer):
    """``gammas``: each round drafts its own γ (then ``config.gamma``), recorded in ``block_gammas``;
    greedy output is the target's whatever the blocks."""
    drafter = drafters["self-draft (4 of 6 layers)"]
    config = DecodeConfig(max_new_tokens=24, gamma=3, stop_tokens=(tokenizer.eos_token_id,))
    spec = speculative(drafter, verifier, prompts[0], config, gammas=(1, 5, 2))
    assert spec.tokens == target_greedy[0]
    assert spec.stats.block_gammas[:3] == [1, 5, 2] and set(spec.stats.block_gammas[3:]) <= {3}
    fixed = speculative(drafter, verifier, prompts[0], config).stats
    assert fixed.block_gammas == [3] * fixed.rounds


def test_budget_and_stop_tokens(verifier, drafters, prompts):
    drafter = drafters["self-draft (4 of 6 layers)"]
    free = autoregressive(verifier, prompts[0], DecodeConfig(max_new_tokens=10, gamma=4))
    assert len(free.tokens) == 10
    stop = free.tokens[3]
    config = DecodeConfig(max_new_tokens=10, gamma=4, stop_tokens=(stop,))
    for result in (autoregressive(verifier, prompts[0], config), speculative(drafter, verifier, prompts[0], config)):
        assert result.tokens == free.tokens[: free.tokens.index(stop) + 1]


# --- sampled output follows the target distribution ------------------------------------------------

class WrongQDrafter(Drafter):
    """Negative control: samples from its q but reports a uniform distribution instead."""

    def draft(self, *args, **kwargs):
        d = super().draft(*args, **kwargs)
        return dataclasses.replace(d, q=torch.full_like(d.q, 1.0 / d.q.shape[-1]))


@pytest.fixture(scope="module")
def small_pair(tokenizer):
    return small_target(tokenizer)


def sample_pairs(decode, n: int) -> list[tuple[int, int]]:
    out = []
    for seed in range(n):
        tokens = decode(two_tokens(seed)).tokens
        out.append((tokens[0], tokens[1]))
    return out


def test_sampled_speculative_follows_the_target_distribution(small_pair):
    target, prompt = small_pair
    expected = exact_two_token_distribution(target, prompt)
    verifier = EarlyExitVerifier(target)
    drafter = Drafter(truncated_copy(target, 1))
    spec = sample_pairs(lambda c: speculative(drafter, verifier, prompt, c), N_RUNS)
    assert chi_square_pvalue(spec, expected) > 1e-3
    # the draft really differs from the target, otherwise this test could not tell right from wrong
    wrong = WrongQDrafter(truncated_copy(target, 1))
    control = sample_pairs(lambda c: speculative(wrong, verifier, prompt, c), N_RUNS)
    assert chi_square_pvalue(control, expected) < 1e-6


def test_sampled_autoregressive_follows_the_target_distribution(small_pair):
    target, prompt = small_pair
    expected = exact_two_token_distribution(target, prompt)
    verifier = EarlyExitVerifier(target)
    ar = sample_pairs(lambda c: autoregressive(verifier, prompt, c), N_RUNS)
    assert chi_square_pvalue(ar, expected) > 1e-3


def test_sampled_top_k_draft_follows_the_target_distribution(small_pair):
    """TK-SLT / low-payload drafting: the drafter samples from its top K (K=3 of 8) and sends exactly
    that q; output still follows the target. The negative control sends another q and must fail."""
    target, prompt = small_pair
    expected = exact_two_token_distribution(target, prompt)
    verifier = EarlyExitVerifier(target)
    top3 = DraftDistribution(3)
    drafter = Drafter(truncated_copy(target, 1))
    spec = sample_pairs(lambda c: speculative(drafter, verifier, prompt, c, top3), N_RUNS)
    assert chi_square_pvalue(spec, expected) > 1e-3
    wrong = WrongQDrafter(truncated_copy(target, 1))
    control = sample_pairs(lambda c: speculative(wrong, verifier, prompt, c, top3), N_RUNS)
    assert chi_square_pvalue(control, expected) < 1e-6
