"""Every exact mode's sampled output follows the target distribution (vocabulary of 8, two tokens,
chi-square), run through the robot's real decoders against an in-process verifier session, with the
first block sent right behind the Open (edge/first_block.py) and without it. The lossy mode (PicoSpec's
top-K downlink) is the negative control and must fail, both ways."""

from __future__ import annotations

import pytest

from edge_spec_ros.decoding.reference import DecodeConfig
from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier

from first_block_link import OpenOnlyLink
from small_vocab import SAMPLING, chi_square_pvalue, exact_two_token_distribution, small_target

N_RUNS = 1000


def run_mode(target, prompt, encoder, mode: str, n: int, link=LocalVerifierLink, **edge) -> list[tuple[int, int]]:
    """``link``: LocalVerifierLink carries the first block with the Open; OpenOnlyLink (no ``open_with``)
    takes the fallback, the Open, ``Opened``, then the first draft."""
    verifier = EarlyExitVerifier(target)
    decoder = EdgeDecoder(link(verifier, encoder), Drafter(truncated_copy(target, 1)),
                          EdgeConfig(threads=1, **edge))
    out = []
    for seed in range(n):
        decoder.config = EdgeConfig(decode=DecodeConfig(max_new_tokens=2, gamma=2, sampling=SAMPLING, seed=seed),
                                    threads=1, **edge)
        tokens = decoder.decode(mode, prompt, b"").tokens
        out.append((tokens[0], tokens[1]))
    return out


@pytest.fixture(scope="module")
def encoder(tokenizer):
    return PromptEncoder(tokenizer)


@pytest.fixture(scope="module")
def small_pair(tokenizer):
    return small_target(tokenizer)


@pytest.mark.parametrize("mode,edge", [
    ("sd", {}), ("fsd", {}), ("dssd", {}), ("tkslt", {"tkslt_k": 3}), ("lowpay", {"lowpay_k": 2}),
    ("pico", {}), ("pico-fsd", {}), ("ar", {}), ("sd", {"adaptive_gamma": True, "alpha_prior": 0.9, "b_prior": 0.01, "c_prior": 0.01}),
])
def test_exact_modes_follow_the_target(small_pair, encoder, mode, edge):
    target, prompt = small_pair
    samples = run_mode(target, prompt, encoder, mode, N_RUNS, link=OpenOnlyLink, **edge)
    assert chi_square_pvalue(samples, exact_two_token_distribution(target, prompt)) > 1e-3


def test_lossy_top_k_downlink_is_detectably_wrong(small_pair, encoder):
    """Negative control: resampling from a top-1 pruned p_δ (PicoSpec's lossy downlink) must fail."""
    target, prompt = small_pair
    samples = run_mode(target, prompt, encoder, "dssd-topk-lossy", N_RUNS, link=OpenOnlyLink, lossy_p_k=1)
    assert chi_square_pvalue(samples, exact_two_token_distribution(target, prompt)) < 1e-6


@pytest.mark.parametrize("mode,edge", [
    ("sd", {}), ("fsd", {}), ("dssd", {}), ("tkslt", {"tkslt_k": 3}), ("lowpay", {"lowpay_k": 2}),
    ("pico", {}), ("pico-fsd", {}),
])
def test_exact_modes_with_the_first_block_follow_the_target(small_pair, encoder, mode, edge):
    """γ = 2 tokens of 2: the whole decision is the first block, drafted while the Open travels."""
    target, prompt = small_pair
    samples = run_mode(target, prompt, encoder, mode, N_RUNS, **edge)
    assert chi_square_pvalue(samples, exact_two_token_distribution(target, prompt)) > 1e-3


def test_lossy_top_k_downlink_with_the_first_block_is_detectably_wrong(small_pair, encoder):
    """Negative control of the first block's path: it must not hide a wrong distribution."""
    target, prompt = small_pair
    samples = run_mode(target, prompt, encoder, "dssd-topk-lossy", N_RUNS, lossy_p_k=1)
    assert chi_square_pvalue(samples, exact_two_token_distribution(target, prompt)) < 1e-6
