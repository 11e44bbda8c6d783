"""Unit tests for edge_spec_ros.spec.verify: greedy and sampled verification of a γ-token draft."""

from functools import lru_cache

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig, Stream, sample
from edge_spec_ros.spec.verify import (
    Verdict,
    accepted_prefix,
    residual,
    verify,
    verify_greedy,
    verify_sampled,
)


class ScriptedRNG:
    """Stand-in for PositionalRNG: returns chosen uniforms per (stream, position) and records calls."""

    def __init__(self, values=None, default=0.5):
        self.values = dict(values or {})
        self.default = default
        self.calls = []

    def uniform(self, stream, position):
        self.calls.append((Stream(stream), position))
        return self.values.get((Stream(stream), position), self.default)


ALMOST_ONE = float(np.nextafter(1.0, 0.0))


# --------------------------------------------------------------------------- Verdict


def test_verdict_holds_delta_plus_one_tokens():
    """A consistent verdict exposes the target's own token as next_token."""
    v = Verdict(2, (4, 1, 3))
    assert v.accepted == 2 and v.next_token == 3


@pytest.mark.parametrize("accepted, tokens", [(2, (4, 1)), (0, ()), (0, (1, 2)), (1, (1, 2, 3))])
def test_verdict_invariant_violation_raises(accepted, tokens):
    """len(tokens) must equal accepted + 1."""
    with pytest.raises(ValueError):
        Verdict(accepted, tokens)


# --------------------------------------------------------------------------- greedy

# γ = 3, V = 6; row-wise argmax is [2, 5, 0, 3]
GREEDY_LOGITS = torch.tensor(
    [
        [0.0, 0.1, 3.0, 0.2, -1.0, 0.5],
        [0.0, 0.1, 0.2, 0.3, 0.4, 0.9],
        [2.5, 0.1, 0.2, 0.3, 0.4, 0.5],
        [0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
    ]
)


def test_greedy_all_accepted_plus_bonus():
    """Draft equal to every argmax: δ = γ and the bonus is argmax of row γ."""
    v = verify_greedy([2, 5, 0], GREEDY_LOGITS)
    assert v == Verdict(3, (2, 5, 0, 3))


@pytest.mark.parametrize(
    "draft, expected",
    [
        ([1, 5, 0], Verdict(0, (2,))),  # rejected at the first position (later matches do not count)
        ([2, 4, 0], Verdict(1, (2, 5))),  # rejected in the middle
        ([2, 5, 1], Verdict(2, (2, 5, 0))),  # rejected at the last position
    ],
)
def test_greedy_rejection_positions(draft, expected):
    """At the first mismatch the target's argmax replaces the draft token and verification stops."""
    assert verify_greedy(draft, GREEDY_LOGITS) == expected


def test_verify_dispatches_greedy_without_q():
    """verify with T = 0 needs no q and ignores the rng."""
    cfg = SamplingConfig(0.0)
    for seed in (0, 1):
        assert verify([2, 4, 0], GREEDY_LOGITS, None, cfg, PositionalRNG(seed), 10) == Verdict(1, (2, 5))


def test_verify_sampled_without_q_raises():
    """verify with T > 0 and q=None raises."""
    with pytest.raises(ValueError):
        verify([2, 5, 0], GREEDY_LOGITS, None, SamplingConfig(1.0), PositionalRNG(0), 0)


# --------------------------------------------------------------------------- accepted_prefix


def test_accepted_prefix_uses_product_rule_and_accept_stream():
    """Accept iff u·q < p, drawing u from Stream.ACCEPT at position + i, stopping at the first reject."""
    p = torch.tensor([0.2, 0.3, 0.9])
    q = torch.tensor([0.4, 0.6, 0.1])
    # ratios 0.5, 0.5: u = 0.49 accepts, u = 0.51 rejects
    rng = ScriptedRNG({(Stream.ACCEPT, 10): 0.49, (Stream.ACCEPT, 11): 0.51, (Stream.ACCEPT, 12): 0.0})
    assert accepted_prefix(p, q, rng, 10) == 1
    assert rng.calls == [(Stream.ACCEPT, 10), (Stream.ACCEPT, 11)]
    rng = ScriptedRNG({(Stream.ACCEPT, 10): 0.49, (Stream.ACCEPT, 11): 0.49})
    assert accepted_prefix(p, q, rng, 10) == 3


# --------------------------------------------------------------------------- sampled: acceptance branches


def test_sampled_accept_when_p_geq_q_even_for_largest_u():
    """p(x) ≥ q(x) at every drafted token (incl. p == q): always accepted, even with u -> 1."""
    # γ = 2, V = 4; draft = [1, 3]; p(1)=0.4 ≥ q(1)=0.4 (equal), p(3)=0.7 > q(3)=0.2
    p = torch.tensor([[0.1, 0.4, 0.3, 0.2], [0.1, 0.1, 0.1, 0.7], [0.0, 0.0, 1.0, 0.0]])
    q = torch.tensor([[0.2, 0.4, 0.2, 0.2], [0.3, 0.3, 0.2, 0.2]])
    v = verify_sampled([1, 3], p, q, ScriptedRNG(default=ALMOST_ONE), 0)
    assert v == Verdict(2, (1, 3, 2))
    for seed in range(20):  # and with real uniforms
        assert verify_sampled([1, 3], p, q, PositionalRNG(seed), 5 * seed).accepted == 2


def test_sampled_rejects_deterministically_when_p_is_zero():
    """p(x) = 0 < q(x): rejected for every u, including u = 0."""
    p = torch.tensor([[0.5, 0.0, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.1, 0.7, 0.1, 0.1]])
    for u in (0.0, 1e-12, 0.5):
        v = verify_sampled([1], p, q, ScriptedRNG({(Stream.ACCEPT, 3): u}), 3)
        assert v.accepted == 0
        assert v.next_token in (0, 2)


def test_sampled_partial_acceptance_by_ratio():
    """p < q: accepted iff u < p/q (here 0.25), so u just below/above the ratio flips the outcome."""
    p = torch.tensor([[0.1, 0.5, 0.2, 0.2], [0.0, 0.0, 0.0, 1.0]])
    q = torch.tensor([[0.4, 0.2, 0.2, 0.2]])  # draft token 0: ratio 0.25
    below = verify_sampled([0], p, q, ScriptedRNG({(Stream.ACCEPT, 0): 0.24}), 0)
    above = verify_sampled([0], p, q, ScriptedRNG({(Stream.ACCEPT, 0): 0.26}), 0)
    assert below == Verdict(1, (0, 3))
    assert above.accepted == 0


def test_sampled_q_zero_accepts_iff_p_positive():
    """q(x) = 0 (a token the draft could not have drawn): accepted iff p(x) > 0, whatever u is."""
    p = torch.tensor([[0.3, 0.3, 0.4, 0.0], [0.0, 1.0, 0.0, 0.0]])
    q = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    for u in (0.0, 0.5, ALMOST_ONE):
        rng = ScriptedRNG({(Stream.ACCEPT, 0): u})
        assert verify_sampled([2], p, q, rng, 0) == Verdict(1, (2, 1))  # q=0, p>0: accept
        assert verify_sampled([3], p, q, rng, 0).accepted == 0  # q=0, p=0: reject


@pytest.mark.parametrize("reject_at", [0, 1, 2])
def test_sampled_rejection_position_and_residual_stream(reject_at):
    """Rejection at the first/middle/last of γ=3 keeps the prefix and draws y from Stream.RESIDUAL at position+δ."""
    v_size = 5
    p = torch.full((4, v_size), 0.2)
    q = torch.full((3, v_size), 0.2)
    # at the rejected row the draft token 4 has p=0, and the residual is concentrated on token 1
    p[reject_at] = torch.tensor([0.2, 0.6, 0.1, 0.1, 0.0])
    q[reject_at] = torch.tensor([0.2, 0.2, 0.1, 0.1, 0.4])
    draft = [0, 2, 3]
    draft[reject_at] = 4
    rng = ScriptedRNG(default=0.3)
    v = verify_sampled(draft, p, q, rng, 100)
    assert v == Verdict(reject_at, (*draft[:reject_at], 1))
    accept_calls = [(Stream.ACCEPT, 100 + i) for i in range(reject_at + 1)]
    assert rng.calls == accept_calls + [(Stream.RESIDUAL, 100 + reject_at)]


def test_sampled_bonus_drawn_from_last_row_with_target_stream():
    """All γ accepted: the bonus comes from p_{γ+1} using Stream.TARGET at position+γ."""
    p = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25], [0.0, 0.5, 0.0, 0.5]])
    q = p[:2].clone()
    for u_target, expected in [(0.1, 1), (0.49, 1), (0.51, 3), (ALMOST_ONE, 3)]:
        rng = ScriptedRNG({(Stream.TARGET, 9): u_target}, default=0.0)
        v = verify_sampled([0, 2], p, q, rng, 7)
        assert v == Verdict(2, (0, 2, expected))
        assert rng.calls[-1] == (Stream.TARGET, 9)


# --------------------------------------------------------------------------- residual


# residual = max(0, p - q) = [0, 0.3, 0.2, 0, 0]: only tokens 1 and 2, in ratio 3:2
RES_P = torch.tensor([0.05, 0.40, 0.35, 0.20, 0.0])
RES_Q = torch.tensor([0.45, 0.10, 0.15, 0.20, 0.10])


def test_residual_is_clamped_difference():
    """residual(p, q) = max(0, p − q), unnormalised, float64."""
    r = residual(RES_P, RES_Q)
    assert r.dtype == torch.float64
    assert torch.allclose(r, torch.tensor([0.0, 0.3, 0.2, 0.0, 0.0], dtype=torch.float64), atol=1e-7)


def test_residual_resample_only_where_p_exceeds_q():
    """After a rejection the resampled token is one with p > q, split 3:2 over a uniform grid of u."""
    p = torch.stack([RES_P, torch.full((5,), 0.2)])
    q = RES_Q.unsqueeze(0)
    n = 1000
    tokens = []
    for u in (np.arange(n) + 0.5) / n:
        rng = ScriptedRNG({(Stream.ACCEPT, 0): 0.9, (Stream.RESIDUAL, 0): float(u)})
        v = verify_sampled([0], p, q, rng, 0)  # p/q = 1/9 < 0.9: rejected
        assert v.accepted == 0
        tokens.append(v.next_token)
    counts = np.bincount(tokens, minlength=5)
    assert set(np.flatnonzero(counts)) == {1, 2}
    assert abs(counts[1] / n - 0.6) < 0.005


def test_residual_falls_back_to_p_when_p_equals_q():
    """p == q leaves no residual mass; residual returns p itself, and a forced rejection resamples from p."""
    p_row = torch.tensor([0.5, 0.5, 0.0, 0.0])
    assert torch.equal(residual(p_row, p_row.clone()), p_row.double())
    # reject the impossible draft token 2 (p = q = 0): the resample must come from p = {0, 1}
    p = torch.stack([p_row, torch.tensor([0.25, 0.25, 0.25, 0.25])])
    q = p_row.clone().unsqueeze(0)
    seen = set()
    for u in (0.0, 0.25, 0.49, 0.5, 0.75, ALMOST_ONE):
        v = verify_sampled([2], p, q, ScriptedRNG({(Stream.RESIDUAL, 0): u}), 0)
        assert v.accepted == 0
        seen.add(v.next_token)
    assert seen == {0, 1}


def test_residual_fallback_when_p_below_q_everywhere_by_rounding():
    """If p ≤ q everywhere (rounding), the fallback is p, not an all-zero (unsampleable) residual."""
    q_row = torch.tensor([0.3, 0.3, 0.4, 0.0], dtype=torch.float64)
    p_row = q_row * (1 - 1e-12)
    r = residual(p_row, q_row)
    assert torch.equal(r, p_row)
    assert sample(r, 0.99) == 2


# --------------------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    "p_rows, q_rows",
    [(2, 2), (4, 2), (3, 1), (3, 3), (2, 1)],
)
def test_sampled_shape_mismatch_raises(p_rows, q_rows):
    """γ = 2 needs exactly γ+1 rows of p and γ rows of q."""
    p = torch.full((p_rows, 4), 0.25)
    q = torch.full((q_rows, 4), 0.25)
    with pytest.raises(ValueError):
        verify_sampled([0, 1], p, q, PositionalRNG(0), 0)


def test_verify_sampled_mode_matches_verify_sampled_on_softmax():
    """verify with T > 0 equals verify_sampled on softmax(logits / T) with the same rng and position."""
    cfg = SamplingConfig(0.7)
    q = torch.softmax(torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.0, 0.0]] * 3), -1)
    draft = [0, 0, 0]
    results = set()
    for pos in range(0, 200, 4):
        rng = PositionalRNG(1)
        v = verify(draft, GREEDY_LOGITS, q, cfg, rng, pos)
        assert v == verify_sampled(draft, torch.softmax(GREEDY_LOGITS / 0.7, -1), q, rng, pos)
        results.add(v)
    assert len(results) >= 3  # the check ran over genuinely different verdicts


# --------------------------------------------------------------------------- statistics

# γ = 2, V = 5; token 4 has p_1 = 0 (always rejected when drafted), p_1 ≠ q_1 elsewhere
STAT_P = torch.tensor(
    [
        [0.35, 0.30, 0.20, 0.15, 0.00],
        [0.10, 0.20, 0.30, 0.25, 0.15],
        [0.20, 0.20, 0.20, 0.20, 0.20],
    ]
)
STAT_Q = torch.tensor(
    [
        [0.05, 0.10, 0.15, 0.30, 0.40],
        [0.40, 0.05, 0.05, 0.10, 0.40],
    ]
)
N_TRIALS = 4000
# the wrong q is detected with far fewer trials than the tests of the right one use: p = 1.9e-18 over
# these 1500 (2.4e-37 over 4000), so the first-token test over 4000 would detect it too
N_CONTROL_TRIALS = 1500
GAMMA = 2


@lru_cache(maxsize=None)
def _run_trials(wrong_q: bool, n: int = N_TRIALS):
    """Draft from the true q at fresh positions, verify against STAT_P; return the emitted verdicts."""
    rng = PositionalRNG(seed=31337)
    q_passed = torch.full_like(STAT_Q, 1.0 / STAT_Q.shape[1]) if wrong_q else STAT_Q
    verdicts = []
    for k in range(n):
        pos = k * (GAMMA + 1)  # disjoint positions per trial: independent uniforms
        draft = [sample(STAT_Q[i], rng.uniform(Stream.DRAFT, pos + i)) for i in range(GAMMA)]
        verdicts.append(verify_sampled(draft, STAT_P, q_passed, rng, pos))
    return verdicts


def _chisq_pvalue(tokens, probs):
    counts = np.bincount(tokens, minlength=len(probs))
    support = probs > 0
    assert counts[~support].sum() == 0, "a token with p = 0 was emitted"
    expected = probs[support] * (counts.sum() / probs[support].sum())
    return chisquare(counts[support], expected)[1]


def test_statistical_first_token_follows_target():
    """Speculative sampling with the correct q: the first emitted token is distributed as p_1."""
    verdicts = _run_trials(wrong_q=False)
    first = [v.tokens[0] for v in verdicts]
    assert _chisq_pvalue(first, STAT_P[0].double().numpy()) > 1e-3
    # every acceptance branch was exercised in the run
    assert {v.accepted for v in verdicts} == {0, 1, 2}


def test_statistical_second_token_follows_target_given_first_accepted():
    """Given x_1 accepted, the next emitted token (accepted x_2 or its correction) is distributed as p_2."""
    second = [v.tokens[1] for v in _run_trials(wrong_q=False) if v.accepted >= 1]
    assert len(second) > 1000
    assert _chisq_pvalue(second, STAT_P[1].double().numpy()) > 1e-3


def test_statistical_negative_control_wrong_q_is_detected():
    """Verifying with a wrong (uniform) q while drafting from the true q biases the output: chi-square rejects."""
    first = [v.tokens[0] for v in _run_trials(wrong_q=True, n=N_CONTROL_TRIALS)]
    assert _chisq_pvalue(first, STAT_P[0].double().numpy()) < 1e-6


def test_greedy_rejects_wrong_number_of_target_rows():
    """verify_greedy needs exactly γ+1 rows of target logits."""
    logits = torch.zeros(3, 5)
    with pytest.raises(ValueError, match="γ\\+1"):
        verify_greedy([1, 2, 3], logits)
    with pytest.raises(ValueError, match="γ\\+1"):
        verify_greedy([1], logits)
