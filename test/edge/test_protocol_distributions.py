"""Every exact mode's sampled output follows the target distribution (vocabulary of 8, two tokens), run
through the robot's real decoders against an in-process verifier session, with the first block sent
right behind the Open (edge/first_block.py) and without it.

Each decision is compared, seed by seed, with the in-process reference decoder of
``decoding.reference`` (``speculative`` with the mode's q over the decision's own blocks,
``autoregressive`` for AR), whose output test/decoding/test_exactness.py shows to follow the target
(chi-square, with negative controls) for this very pair, prompt and configuration. The same draw for
every seed is the same distribution; and a mode whose distribution is δ away from the target's in
total variation differs from the reference on a seed with probability at least δ (two random
variables, however coupled, differ with at least their distributions' TV distance), so ``N_SEEDS``
= 300 seeds miss a δ = 0.05 error with probability 0.95^300 < 2e-7. The lossy mode (PicoSpec's top-K
downlink) is the negative control and must differ, both ways (it does on 39 of the 300 seeds). Where no one reference
decoder draws the same (adaptive γ, whose AS² policy may hand chunks to the cloud), the chi-square test
of the decision's two tokens stays."""

from __future__ import annotations

import pytest

from edge_spec_ros.decoding.reference import autoregressive, speculative
from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier

from first_block_link import OpenOnlyLink
from small_vocab import chi_square_pvalue, exact_two_token_distribution, small_target, two_tokens

N_SEEDS = 300  # decisions compared draw for draw with the reference, per mode (see the module)
N_RUNS = 1000  # decisions of the chi-square test (adaptive γ): its lossy control needs them to fall below 1e-6
EXACT = [("sd", {}), ("fsd", {}), ("dssd", {}), ("tkslt", {"tkslt_k": 3}), ("lowpay", {"lowpay_k": 2}),
         ("pico", {}), ("pico-fsd", {})]
LOSSY = ("dssd-topk-lossy", {"lossy_p_k": 1})


def run_mode(target, prompt, encoder, mode: str, seeds: range, link=LocalVerifierLink, **edge):
    """Each seed's decision in ``mode``: ``link`` LocalVerifierLink carries the first block with the Open;
    OpenOnlyLink (no ``open_with``) takes the fallback, the Open, ``Opened``, then the first draft."""
    decoder = EdgeDecoder(link(EarlyExitVerifier(target), encoder), Drafter(truncated_copy(target, 1)),
                          EdgeConfig(threads=1, **edge))
    for seed in seeds:
        decoder.config = EdgeConfig(decode=two_tokens(seed), threads=1, **edge)
        yield seed, decoder.decode(mode, prompt, b"")


class Reference:
    """``decoding.reference``'s decisions of the small pair, kept per (q, seed, blocks)."""

    def __init__(self, target, prompt) -> None:
        self.prompt = prompt
        self.verifier = EarlyExitVerifier(target)
        self.drafter = Drafter(truncated_copy(target, 1))
        self._kept: dict[tuple, list[int]] = {}

    def tokens(self, mode: str, edge: dict, seed: int, blocks: list[int]) -> list[int]:
        distribution = EdgeConfig(**edge).draft_distribution("sd" if mode == LOSSY[0] else mode)
        key = (mode == "ar", distribution, seed, tuple(blocks))
        if key not in self._kept:
            config = two_tokens(seed)
            self._kept[key] = autoregressive(self.verifier, self.prompt, config).tokens if mode == "ar" else \
                speculative(self.drafter, self.verifier, self.prompt, config, distribution, gammas=blocks).tokens
        return self._kept[key]


@pytest.fixture(scope="module")
def encoder(tokenizer):
    return PromptEncoder(tokenizer)


@pytest.fixture(scope="module")
def small_pair(tokenizer):
    return small_target(tokenizer)


@pytest.fixture(scope="module")
def reference(small_pair):
    return Reference(*small_pair)


def differing_seeds(small_pair, encoder, reference, mode: str, edge: dict, link) -> list[int]:
    target, prompt = small_pair
    return [seed for seed, result in run_mode(target, prompt, encoder, mode, range(N_SEEDS), link, **edge)
            if list(result.tokens) != reference.tokens(mode, edge, seed, result.stats.block_gammas)]


@pytest.mark.parametrize("mode,edge", EXACT + [("ar", {})])
def test_exact_modes_draw_what_the_reference_draws(small_pair, encoder, reference, mode, edge):
    """Without the first block (a link that predates it): the Open, ``Opened``, then the first draft."""
    assert differing_seeds(small_pair, encoder, reference, mode, edge, OpenOnlyLink) == []


@pytest.mark.parametrize("mode,edge", EXACT)
def test_exact_modes_with_the_first_block_draw_what_the_reference_draws(small_pair, encoder, reference, mode, edge):
    """γ = 2 tokens of 2: the whole decision is the first block, drafted while the Open travels."""
    assert differing_seeds(small_pair, encoder, reference, mode, edge, LocalVerifierLink) == []


@pytest.mark.parametrize("link", [OpenOnlyLink, LocalVerifierLink])
def test_the_lossy_top_k_downlink_draws_otherwise(small_pair, encoder, reference, link):
    """Negative control, both ways: resampling from a top-1 pruned p_δ must change some draws."""
    assert len(differing_seeds(small_pair, encoder, reference, *LOSSY, link)) > 0


ADAPTIVE = {"adaptive_gamma": True, "alpha_prior": 0.9, "b_prior": 0.01, "c_prior": 0.01}


def first_two(small_pair, encoder, mode: str, **edge) -> list[tuple[int, int]]:
    target, prompt = small_pair
    return [tuple(result.tokens[:2]) for _, result in run_mode(target, prompt, encoder, mode, range(N_RUNS),
                                                               OpenOnlyLink, **edge)]


def test_adaptive_gamma_follows_the_target(small_pair, encoder):
    """Adaptive γ (AS²: a decision's tokens may come from the cloud's own sampling): chi-square."""
    target, prompt = small_pair
    assert chi_square_pvalue(first_two(small_pair, encoder, "sd", **ADAPTIVE),
                             exact_two_token_distribution(target, prompt)) > 1e-3


def test_lossy_top_k_downlink_fails_the_chi_square_test(small_pair, encoder):
    """The chi-square test's negative control: resampling from a top-1 pruned p_δ must fail it."""
    target, prompt = small_pair
    assert chi_square_pvalue(first_two(small_pair, encoder, LOSSY[0], **LOSSY[1]),
                             exact_two_token_distribution(target, prompt)) < 1e-6
