"""Unit tests for edge_spec_ros.spec.sampling: PositionalRNG, inverse-CDF sample, probs, choose."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from edge_spec_ros.spec.sampling import (
    PositionalRNG,
    SamplingConfig,
    Stream,
    choose,
    probs_from_logits,
    sample,
)


# --------------------------------------------------------------------------- SamplingConfig


@pytest.mark.parametrize("bad", [-1e-9, -1.0, float("nan"), float("inf")])
def test_sampling_config_rejects_invalid_temperature(bad):
    """Negative, NaN and infinite temperatures are refused."""
    with pytest.raises(ValueError):
        SamplingConfig(temperature=bad)


def test_sampling_config_greedy_flag():
    """T = 0 (the default) is greedy; any T > 0 is not."""
    assert SamplingConfig().greedy
    assert SamplingConfig(0.0).greedy
    assert not SamplingConfig(1e-6).greedy
    assert not SamplingConfig(0.7).greedy


# --------------------------------------------------------------------------- PositionalRNG


def test_positional_rng_is_reproducible_and_order_independent():
    """u(seed, stream, position) depends only on its indices, not on instances or call order."""
    a = PositionalRNG(seed=7)
    first = a.uniform(Stream.ACCEPT, 42)
    for pos in range(10):  # interleave unrelated draws: no hidden running state
        a.uniform(Stream.DRAFT, pos)
    assert a.uniform(Stream.ACCEPT, 42) == first
    assert PositionalRNG(seed=7).uniform(Stream.ACCEPT, 42) == first


def test_positional_rng_differs_across_streams_positions_and_seeds():
    """Changing any one of seed, stream or position changes the draw (no collisions on a grid)."""
    values = {}
    for seed in (0, 1, 2, 12345):
        rng = PositionalRNG(seed)
        for stream in Stream:
            for pos in (0, 1, 2, 3, 100, 10_000):
                values[(seed, stream, pos)] = rng.uniform(stream, pos)
    assert len(set(values.values())) == len(values)
    # and the pairwise differences that matter most, stated explicitly
    rng = PositionalRNG(3)
    assert rng.uniform(Stream.DRAFT, 5) != rng.uniform(Stream.ACCEPT, 5)
    assert rng.uniform(Stream.DRAFT, 5) != rng.uniform(Stream.DRAFT, 6)
    assert rng.uniform(Stream.DRAFT, 5) != PositionalRNG(4).uniform(Stream.DRAFT, 5)


def test_positional_rng_values_in_unit_interval():
    """Every draw lies in [0, 1) and the draws roughly cover it (mean ~ 1/2)."""
    rng = PositionalRNG(11)
    us = np.array([rng.uniform(s, pos) for s in Stream for pos in range(500)])
    assert np.all(us >= 0.0) and np.all(us < 1.0)
    assert abs(us.mean() - 0.5) < 0.03
    assert us.min() < 0.01 and us.max() > 0.99


# --------------------------------------------------------------------------- sample


DYADIC = torch.tensor([0.125, 0.25, 0.125, 0.5], dtype=torch.float64)  # cdf 0.125, 0.375, 0.5, 1.0 exactly


@pytest.mark.parametrize(
    "u, expected",
    [
        (0.0, 0),
        (0.1, 0),
        (0.125, 1),  # a CDF boundary belongs to the next token: intervals are [cdf[i-1], cdf[i])
        (0.3, 1),
        (0.375, 2),
        (0.49, 2),
        (0.5, 3),
        (float(np.nextafter(1.0, 0.0)), 3),
    ],
)
def test_sample_inverse_cdf_picks_expected_index(u, expected):
    """Inverse CDF on an exactly representable distribution, including u = 0 and u -> 1."""
    assert sample(DYADIC, u) == expected


@pytest.mark.parametrize("u", [0.0, 0.1, 0.125, 0.3, 0.375, 0.49, 0.5, 0.999])
def test_sample_accepts_unnormalised_mass(u):
    """Scaling the mass does not change the token for a given u (sample normalises by the total)."""
    assert sample(DYADIC * 8.0, u) == sample(DYADIC, u)
    assert sample((DYADIC * 3.0).float(), u) == sample(DYADIC, u)


def test_sample_skips_leading_and_middle_zeros():
    """Zero-probability tokens at the start or in the middle are never returned."""
    lead = torch.tensor([0.0, 0.0, 0.5, 0.5])
    assert sample(lead, 0.0) == 2
    mid = torch.tensor([0.5, 0.0, 0.0, 0.5])
    assert sample(mid, 0.5) == 3
    assert sample(mid, 0.4999) == 0


def test_sample_never_returns_trailing_zero_token():
    """With trailing zeros, u near 1 (and the u·total == total edge, u = 1) give the last positive token."""
    probs = torch.tensor([0.25, 0.75, 0.0, 0.0, 0.0])
    assert sample(probs, float(np.nextafter(1.0, 0.0))) == 1
    assert sample(probs, 0.999999) == 1
    assert sample(probs, 1.0) == 1  # guarded edge: searchsorted would return V
    for u in np.linspace(0.0, 1.0, 1001, endpoint=False):
        assert probs[sample(probs, float(u))] > 0


@pytest.mark.parametrize("probs", [torch.zeros(5), torch.zeros(1)])
def test_sample_raises_on_zero_mass(probs):
    """A distribution with no mass cannot be sampled."""
    with pytest.raises(ValueError):
        sample(probs, 0.5)


def test_sample_follows_distribution_chi_square():
    """Over many positions with fresh uniforms, samples follow probs (chi-square goodness of fit)."""
    probs = torch.tensor([0.05, 0.15, 0.30, 0.10, 0.40, 0.0, 0.0])
    rng = PositionalRNG(seed=2024)
    n = 6000
    counts = np.bincount([sample(probs, rng.uniform(Stream.TARGET, pos)) for pos in range(n)], minlength=7)
    assert counts[5] == 0 and counts[6] == 0
    support = probs.double().numpy()[:5]
    expected = support / support.sum() * n
    _, pvalue = chisquare(counts[:5], expected)
    assert pvalue > 1e-3
    # negative control: the same counts do not fit a visibly different distribution
    wrong = np.array([0.2, 0.2, 0.2, 0.2, 0.2]) * n
    assert chisquare(counts[:5], wrong)[1] < 1e-6


# --------------------------------------------------------------------------- probs_from_logits / choose


def test_probs_from_logits_greedy_is_one_hot_argmax():
    """T = 0 gives the one-hot argmax per row, float32, for batched input."""
    logits = torch.tensor([[0.1, 2.0, -1.0, 0.0], [3.0, 2.0, 1.0, 0.0]], dtype=torch.float64)
    probs = probs_from_logits(logits, SamplingConfig(0.0))
    assert probs.dtype == torch.float32
    assert torch.equal(probs, torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))


def test_probs_from_logits_tempered_softmax():
    """T > 0 gives softmax(z / T) over the last axis, as float32."""
    logits = torch.tensor([[0.0, math.log(3.0), 0.0, 0.0]], dtype=torch.float16)
    probs = probs_from_logits(logits, SamplingConfig(1.0))
    assert probs.dtype == torch.float32
    assert torch.allclose(probs, torch.tensor([[1 / 6, 3 / 6, 1 / 6, 1 / 6]]), atol=1e-3)
    # T = 2 halves the logits: weights 1, sqrt(3), 1, 1
    z = torch.tensor([0.0, math.log(3.0), 0.0, 0.0])
    w = torch.tensor([1.0, math.sqrt(3.0), 1.0, 1.0])
    assert torch.allclose(probs_from_logits(z, SamplingConfig(2.0)), w / w.sum(), atol=1e-6)


def test_choose_greedy_returns_argmax_and_ignores_rng():
    """Greedy choose returns argmax and its one-hot distribution regardless of seed or position."""
    logits = torch.tensor([0.3, -1.0, 4.0, 3.9, 0.0])
    for seed, pos in [(0, 0), (1, 17), (99, 3)]:
        token, probs = choose(logits, SamplingConfig(0.0), PositionalRNG(seed), Stream.TARGET, pos)
        assert token == 2
        assert torch.equal(probs, torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0]))


def test_choose_sampled_uses_the_given_stream_and_position():
    """Sampled choose == sample(softmax(z/T), u(stream, position)) and returns that exact distribution."""
    logits = torch.tensor([1.0, 0.0, 2.0, -1.0, 0.5, 0.5])
    cfg = SamplingConfig(0.8)
    rng = PositionalRNG(5)
    expected_probs = torch.softmax(logits / 0.8, dim=-1)
    tokens = []
    for pos in range(50):
        token, probs = choose(logits, cfg, rng, Stream.DRAFT, pos)
        assert torch.allclose(probs, expected_probs)
        assert token == sample(expected_probs, rng.uniform(Stream.DRAFT, pos))
        tokens.append(token)
    assert len(set(tokens)) > 1  # really sampling, not argmax


def test_rng_rejects_out_of_range_seed_and_position():
    """Seeds are 64-bit and positions 32-bit, so every triple maps to distinct entropy words."""
    with pytest.raises(ValueError):
        PositionalRNG(-1)
    with pytest.raises(ValueError):
        PositionalRNG(2**64)
    with pytest.raises(ValueError):
        PositionalRNG(1).uniform(Stream.DRAFT, 2**32)
    assert PositionalRNG(2**40).uniform(Stream.DRAFT, 0) != PositionalRNG(0).uniform(Stream.DRAFT, 0)
