"""Unit tests for edge_spec_ros.spec.draft_length: eq. (11), ODLD (Alg. 1), AS² (Alg. 2), online controller."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from edge_spec_ros.spec.draft_length import (
    ALPHA_MAX,
    ALPHA_MIN,
    DraftLength,
    DraftLengthController,
    SpeculationChoice,
    adaptive_selection,
    optimal_draft_length,
    speedup_ratio,
)

TABLE_ALPHAS = (0.4, 0.6, 0.8)
TABLE_LS = (0.01, 0.1, 0.2, 0.4, 0.6)
TABLE_GAMMA = ((4, 2, 1, 1, 1), (7, 3, 2, 1, 1), (14, 6, 4, 2, 1))  # Table I
TABLE_STARRED = {(0.4, 0.6), (0.6, 0.6)}  # the 1* entries of Table I: standalone LLM
# S*(γ=1) = (1 + α)/(1 + L) = 1 exactly when α = L: no gain, so Algorithm 2 (S* > 1) picks standalone.
# Table I marks (0.6, 0.6) but not (0.4, 0.4): in float64 eq. (11) gives 0.9999999999999998 for the
# former and 1.0 for the latter, so the table's marks follow the rounding, not the exact tie.
EXACT_TIES = {(0.4, 0.4), (0.6, 0.6)}
SPLITS = ((0.5, 0.5), (0.3, 0.7), (1.0, 0.0))  # fractions (b/L, c/L): only L = b + c matters
GRID = (np.arange(40) + 0.5) / 40  # 0.0125 … 0.9875


def brute_force(alpha: float, L: float, max_gamma: int) -> tuple[float, int]:
    """max and argmax over γ ∈ 1..max_gamma of Σ_{i≤γ} α^i / (1 + γL), independent of eq. (11)."""
    gammas = np.arange(1, max_gamma + 1)
    speedups = np.cumsum(alpha ** np.arange(max_gamma + 1))[1:] / (1.0 + gammas * L)
    return float(speedups.max()), int(gammas[speedups.argmax()])


def stationarity_residual(alpha: float, L: float, gamma: float) -> float:
    """Relative residual of eq. (24), −α^{γ+1} ln α (1 + Lγ) − L(1 − α^{γ+1}), at a real γ."""
    log_alpha = math.log(alpha)
    left = -math.exp((gamma + 1) * log_alpha) * log_alpha * (1 + L * gamma)
    right = -L * math.expm1((gamma + 1) * log_alpha)
    return abs(left - right) / max(abs(left), abs(right))


# --------------------------------------------------------------------------- speedup_ratio (eq. 11)


def test_speedup_ratio_matches_eq_11():
    """speedup_ratio equals (1 − α^{γ+1}) / ((1 + γL)(1 − α)) at ordinary points."""
    for alpha, gamma, L in ((0.4, 4, 0.01), (0.8, 14, 0.01), (0.6, 3, 0.1), (0.25, 1, 0.7), (0.9, 7, 0.3)):
        expected = (1 - alpha ** (gamma + 1)) / ((1 + gamma * L) * (1 - alpha))
        assert speedup_ratio(alpha, gamma, L) == pytest.approx(expected, rel=1e-13)


def test_expected_tokens_equal_geometric_sum():
    """(1 − α^{γ+1})/(1 − α) = Σ_{i=0}^{γ} α^i (eq. 12): S_inf·(1 + γL) is the sum term by term."""
    for alpha in (0.01, 0.3, 0.5, 0.77, 0.95, 0.999):
        for gamma in (0, 1, 2, 5, 17, 60):
            for L in (0.0, 0.05, 0.5):
                direct = math.fsum(alpha**i for i in range(gamma + 1))
                assert speedup_ratio(alpha, gamma, L) * (1 + gamma * L) == pytest.approx(direct, rel=1e-12)


def test_speedup_ratio_limits_at_alpha_one_and_zero():
    """α = 1 gives (γ+1)/(1+γL), continuously as α → 1; α = 0 gives 1/(1+γL); γ = 0 gives 1."""
    for gamma, L in ((1, 0.2), (5, 0.1), (40, 0.6)):
        limit = (gamma + 1) / (1 + gamma * L)
        assert speedup_ratio(1.0, gamma, L) == pytest.approx(limit, rel=1e-15)
        assert speedup_ratio(1 - 1e-12, gamma, L) == pytest.approx(limit, rel=1e-9)
        assert speedup_ratio(0.0, gamma, L) == pytest.approx(1 / (1 + gamma * L), rel=1e-15)
        assert speedup_ratio(0.5, 0, L) == 1.0


@pytest.mark.parametrize(
    "alpha, gamma, L",
    [(-0.1, 2, 0.1), (1.1, 2, 0.1), (math.nan, 2, 0.1), (0.5, -1, 0.1), (0.5, 2.5, 0.1), (0.5, True, 0.1),
     (0.5, 2, -0.1), (0.5, 2, math.inf), (0.5, 2, math.nan)],
)
def test_speedup_ratio_rejects_invalid_inputs(alpha, gamma, L):
    """α outside [0, 1] or nan, γ not an integer ≥ 0, or L negative / non-finite raise ValueError."""
    with pytest.raises(ValueError):
        speedup_ratio(alpha, gamma, L)


# --------------------------------------------------------------------------- ODLD (Algorithm 1)


@pytest.mark.parametrize("split", SPLITS)
def test_odld_reproduces_table_1(split):
    """γ* for α ∈ {0.4, 0.6, 0.8} × L ∈ {0.01, …, 0.6} equals Table I, for any split of L into b + c."""
    got = tuple(
        tuple(optimal_draft_length(alpha, split[0] * L, split[1] * L).gamma for L in TABLE_LS)
        for alpha in TABLE_ALPHAS
    )
    assert got == TABLE_GAMMA


@pytest.mark.parametrize("split", SPLITS)
def test_as2_on_table_1_follows_algorithm_2(split):
    """The 1* entries of Table I (and the exact tie α = L = 0.4) pick standalone; the other 12 speculate."""
    for alpha in TABLE_ALPHAS:
        for L in TABLE_LS:
            choice = adaptive_selection(alpha, split[0] * L, split[1] * L)
            standalone = (alpha, L) in TABLE_STARRED | EXACT_TIES
            assert choice.use_speculation is (not standalone), (alpha, L, choice)
            if standalone:
                assert choice.speedup <= 1 + 1e-12 and choice.effective_gamma == 0
            else:
                assert choice.speedup > 1.05 and choice.effective_gamma == choice.gamma
    assert adaptive_selection(0.4, 0.3, 0.3).speedup == pytest.approx(0.875)  # strictly below 1
    for alpha, L in EXACT_TIES:
        assert adaptive_selection(alpha, L / 2, L / 2).speedup == pytest.approx(1.0, abs=1e-15)


def test_odld_equals_brute_force_on_grid():
    """On a 40 × 40 grid of α, L ∈ (0, 1), ODLD's S* is the max of S_inf over γ ∈ 1..200 (ties allowed)."""
    for alpha in GRID:
        for L in GRID:
            best = optimal_draft_length(float(alpha), float(L) / 2, float(L) / 2, max_gamma=200)
            top, argmax = brute_force(float(alpha), float(L), 200)
            assert 1 <= best.gamma <= 200
            assert best.speedup >= top - 1e-12, (alpha, L, best, argmax)
            assert best.speedup == pytest.approx(speedup_ratio(float(alpha), best.gamma, float(L)), rel=1e-15)


def test_odld_equals_brute_force_in_extreme_regimes():
    """ODLD stays optimal where the Lambert argument underflows (tiny L) or nears −1/e (α → 1, L → 1)."""
    cases = ((0.3, 1e-3), (0.05, 1e-4), (0.9, 1e-4), (0.999, 1e-5), (0.9999, 0.9), (0.5, 0.999), (0.97, 0.999))
    for alpha, L in cases:
        best = optimal_draft_length(alpha, L, 0.0, max_gamma=6000)
        top, argmax = brute_force(alpha, L, 6000)
        assert best.gamma < 6000 and best.speedup >= top * (1 - 1e-11), (alpha, L, best, argmax)


def test_gamma0_is_the_stationary_point_of_eq_24():
    """γ0 of eq. (21) zeroes the derivative numerator (24) in the ordinary, underflow and branch regimes."""
    t_underflow = [-650.0, -698.9, -699.1, -750.0, -5000.0]  # t = (1/L − 1) ln α around the switch at −699
    cases = [(0.4, 0.01), (0.8, 0.2), (0.95, 0.3)] + [(0.5, 1 / (1 + t / math.log(0.5))) for t in t_underflow]
    cases += [(1 - 1e-7, 0.5), (1 - 1e-9, 0.5), (1 - 1e-13, 0.5)]  # t ≈ −1e-7, −1e-9, −1e-13: branch point
    for alpha, L in cases:
        gamma0 = optimal_draft_length(alpha, L, 0.0).gamma0
        assert gamma0 > 1 and stationarity_residual(alpha, L, gamma0) < 1e-9, (alpha, L, gamma0)


def test_odld_takes_the_ceiling_on_a_tie():
    """When S_inf(⌊γ0⌋) = S_inf(⌈γ0⌉), ODLD returns ⌈γ0⌉ (Algorithm 1's ≤)."""
    # S(1) = S(2) ⟺ (1 + α)(1 + 2L) = (1 + α + α²)(1 + L) ⟺ L = α²/(1 + α − α²); α = 0.5: L = 0.2,
    # where both equal 1.25 (also in float64).
    assert speedup_ratio(0.5, 1, 0.2) == speedup_ratio(0.5, 2, 0.2) == 1.25
    best = optimal_draft_length(0.5, 0.1, 0.1)
    assert 1 < best.gamma0 < 2 and best.gamma == 2


def test_odld_clamps_to_max_gamma():
    """A γ0 beyond max_gamma gives γ* = max_gamma, the best in range since S_inf is unimodal."""
    free = optimal_draft_length(0.99, 0.0005, 0.0005, max_gamma=1000)
    assert free.gamma > 64
    for cap in (1, 10, 64):
        clamped = optimal_draft_length(0.99, 0.0005, 0.0005, max_gamma=cap)
        assert clamped.gamma == cap
        assert clamped.speedup == pytest.approx(brute_force(0.99, 0.001, cap)[0], rel=1e-12)


def test_odld_edge_cases_outside_the_papers_domain():
    """α = 1 or L = 0 → max_gamma; α = 0 or L ≥ 1 → 1 (each agreeing with brute force)."""
    assert optimal_draft_length(1.0, 0.1, 0.2, max_gamma=32) == DraftLength(32, pytest.approx(33 / 10.6), math.inf)
    assert optimal_draft_length(0.7, 0.0, 0.0, max_gamma=32).gamma == 32
    assert optimal_draft_length(0.7, 0.0, 0.0, max_gamma=32).gamma0 == math.inf
    zero = optimal_draft_length(0.0, 0.1, 0.2)
    assert (zero.gamma, zero.gamma0) == (1, -1.0) and zero.speedup == pytest.approx(1 / 1.3)
    for alpha in (0.2, 0.9, 0.999, 1.0):
        for L in (1.0, 1.5, 4.0):
            best = optimal_draft_length(alpha, L / 2, L / 2)
            assert best.gamma == 1 and best.speedup >= brute_force(alpha, L, 200)[0] - 1e-12
            assert not adaptive_selection(alpha, L / 2, L / 2).use_speculation


def test_odld_depends_on_b_and_c_only_through_their_sum():
    """b = 0 or c = 0 alone is fine: any split of L = b + c gives the same γ*, γ0 and S*."""
    for alpha, L in ((0.45, 0.07), (0.83, 0.3), (0.97, 0.02)):
        reference = optimal_draft_length(alpha, L, 0.0)
        for frac in (0.0, 0.25, 0.5):
            other = optimal_draft_length(alpha, frac * L, (1 - frac) * L)
            assert other.gamma == reference.gamma
            assert other.gamma0 == pytest.approx(reference.gamma0, rel=1e-12)


@pytest.mark.parametrize(
    "alpha, b, c, max_gamma",
    [(-0.01, 0.1, 0.1, 64), (1.01, 0.1, 0.1, 64), (math.nan, 0.1, 0.1, 64), (0.5, -0.1, 0.1, 64),
     (0.5, 0.1, -1e-9, 64), (0.5, math.inf, 0.1, 64), (0.5, 0.1, math.nan, 64), (0.5, 0.1, 0.1, 0),
     (0.5, 0.1, 0.1, 8.0)],
)
def test_odld_and_as2_reject_invalid_inputs(alpha, b, c, max_gamma):
    """Invalid α, b, c or max_gamma raise ValueError in both ODLD and AS²."""
    with pytest.raises(ValueError):
        optimal_draft_length(alpha, b, c, max_gamma)
    with pytest.raises(ValueError):
        adaptive_selection(alpha, b, c, max_gamma)


def test_results_are_frozen():
    """DraftLength and SpeculationChoice are immutable values."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        optimal_draft_length(0.6, 0.05, 0.05).gamma = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        adaptive_selection(0.6, 0.05, 0.05).use_speculation = False


# --------------------------------------------------------------------------- AS² (Algorithm 2)


def test_as2_standalone_when_speedup_at_most_one():
    """Small α with large L picks standalone; large α with small L speculates with ODLD's γ*."""
    for alpha, b, c in ((0.1, 0.2, 0.3), (0.3, 0.2, 0.2), (0.05, 0.06, 0.0)):
        choice = adaptive_selection(alpha, b, c)
        assert not choice.use_speculation and choice.speedup <= 1 and choice.effective_speedup == 1.0
    for alpha, b, c in ((0.8, 0.02, 0.03), (0.5, 0.1, 0.1), (0.3, 0.0, 0.1)):
        choice = adaptive_selection(alpha, b, c)
        best = optimal_draft_length(alpha, b, c)
        assert choice == SpeculationChoice(True, best.gamma, best.speedup) and choice.speedup > 1


def test_as2_treats_exact_ties_as_no_gain():
    """Where α = L, S* = 1 exactly; AS² picks standalone even where rounding gives 1 + 2⁻⁵²."""
    for alpha in np.linspace(0.05, 0.95, 19):
        for frac in (0.5, 0.3, 1.0):
            choice = adaptive_selection(float(alpha), frac * float(alpha), (1 - frac) * float(alpha))
            assert choice.gamma == 1 and choice.speedup == pytest.approx(1.0, abs=1e-15)
            assert not choice.use_speculation, (alpha, frac, choice)


def test_as2_flips_to_standalone_as_L_grows():
    """At α = 0.5 speculation pays while L < α and stops once L > α (S*(γ=1) = 1.5/(1 + L))."""
    Ls = np.linspace(0.01, 0.99, 99)
    flags = [adaptive_selection(0.5, float(L) * 0.3, float(L) * 0.7).use_speculation for L in Ls]
    assert flags == [bool(L < 0.5 - 1e-9) for L in Ls]
    assert adaptive_selection(0.5, 0.2, 0.25).use_speculation
    assert not adaptive_selection(0.5, 0.25, 0.3).use_speculation


# --------------------------------------------------------------------------- DraftLengthController


def test_controller_uses_the_prior_before_data():
    """Before any observation the estimates are the prior and choice() is AS² on it."""
    ctrl = DraftLengthController(0.8, 0.02, 0.05, max_gamma=32)
    assert (ctrl.alpha, ctrl.b, ctrl.c, ctrl.observations) == (0.8, 0.02, 0.05, 0)
    assert ctrl.L == pytest.approx(0.07)
    assert ctrl.choice() == adaptive_selection(0.8, 0.02, 0.05, 32)


def test_controller_converges_to_measured_values():
    """Repeated identical rounds drive α to accepted/trials and b, c to the measured time ratios."""
    ctrl = DraftLengthController(0.3, 0.5, 0.5, smoothing=0.2)
    for _ in range(200):
        ctrl.observe(accepted=3, drafted=5, t_draft_token_s=0.004, t_transmit_token_s=0.002, t_verify_s=0.04)
    # 3 accepted, then a rejection: 4 acceptance trials per round.
    assert ctrl.alpha == pytest.approx(0.75, rel=1e-9)
    assert ctrl.b == pytest.approx(0.05, rel=1e-9) and ctrl.c == pytest.approx(0.1, rel=1e-9)
    assert ctrl.observations == 200
    assert ctrl.choice() == adaptive_selection(ctrl.alpha, ctrl.b, ctrl.c)


def test_controller_early_rounds_are_a_running_mean_then_the_ema():
    """The first round replaces the times' prior; α's prior weighs as one round among the first ones;
    the (n+1)-th round weighs max(λ, 1/(n+1)) (α: max(λ, 1/(n+2))), so from 1/λ rounds on the EMA's λ."""
    ctrl = DraftLengthController(0.5, 0.1, 0.2, smoothing=0.25)
    ctrl.observe(2, 4, t_draft_token_s=0.01, t_transmit_token_s=0.03, t_verify_s=0.1)
    assert ctrl.b == pytest.approx(0.3) and ctrl.c == pytest.approx(0.1) and ctrl.t_llm_s == pytest.approx(0.1)
    # α as a ratio of the two means: prior 0.5 of one trial, round 2 of 3 trials, alike
    assert ctrl.alpha == pytest.approx((0.5 + 2) / (1 + 3))
    ctrl.observe(4, 4, t_draft_token_s=0.04, t_transmit_token_s=0.01, t_verify_s=0.1)
    assert ctrl.c == pytest.approx((0.1 + 0.4) / 2) and ctrl.b == pytest.approx((0.3 + 0.1) / 2)
    assert ctrl.alpha == pytest.approx((0.5 + 2 + 4) / (1 + 3 + 4))
    for _ in range(2):
        ctrl.observe(4, 4, t_draft_token_s=0.04, t_transmit_token_s=0.01, t_verify_s=0.1)
    c = ctrl.c
    ctrl.observe(4, 4, t_draft_token_s=0.0, t_transmit_token_s=0.01, t_verify_s=0.1)  # the 5th: λ = 0.25 from the 4th
    assert ctrl.c == pytest.approx(0.75 * c)


def test_a_short_first_decision_moves_alpha_and_c_most_of_the_way_from_the_prior():
    """Two all-accepted rounds of a short decision (γ = 2; T_p/T_q = 0.116, go2-paper's) leave α̂ and c
    near what they measured, not near the prior (the EMA from the prior alone: α̂ 0.76, c 0.074)."""
    ctrl = DraftLengthController(0.5, 0.05, 0.05)
    for _ in range(2):
        ctrl.observe(2, 2, t_draft_token_s=0.072, t_transmit_token_s=0.12, t_verify_s=0.62)
    assert ctrl.alpha == pytest.approx((0.5 + 2 + 2) / (1 + 2 + 2)) and ctrl.c == pytest.approx(0.072 / 0.62)


def test_controller_estimates_the_per_token_acceptance_probability():
    """Rounds sampled with i.i.d. acceptance α = 0.7 give α̂ ≈ 0.7, not the biased accepted/drafted ≈ 0.39."""
    rng = np.random.default_rng(12345)
    alpha, gamma = 0.7, 5
    ctrl = DraftLengthController(0.2, 0.05, 0.05, smoothing=0.01)
    ratios = []
    for _ in range(3000):
        accepts = rng.random(gamma) < alpha
        accepted = gamma if accepts.all() else int(np.argmin(accepts))
        ratios.append(accepted / gamma)
        ctrl.observe(accepted, gamma, 0.001, 0.001, 0.02)
    assert ctrl.alpha == pytest.approx(alpha, abs=0.05)
    assert np.mean(ratios) == pytest.approx(sum(alpha**i for i in range(1, gamma + 1)) / gamma, abs=0.02)


def test_controller_clamps_alpha_into_the_open_interval():
    """All-accepted rounds clamp α̂ to ALPHA_MAX, all-rejected rounds to ALPHA_MIN, keeping γ* finite."""
    up = DraftLengthController(0.5, 0.01, 0.01)
    down = DraftLengthController(0.5, 0.01, 0.01)
    for _ in range(100):
        up.observe(4, 4, 0.0001, 0.0001, 0.01)
        down.observe(0, 4, 0.0001, 0.0001, 0.01)
    assert up.alpha == ALPHA_MAX and down.alpha == ALPHA_MIN
    assert up.choice() == adaptive_selection(ALPHA_MAX, up.b, up.c)
    assert not down.choice().use_speculation


def test_controller_switches_to_standalone_when_uplink_slows():
    """A prior favouring speculation flips to standalone once measured uplink time makes L > α."""
    ctrl = DraftLengthController(0.6, 0.05, 0.05)
    assert ctrl.choice().use_speculation
    for _ in range(60):
        ctrl.observe(1, 3, t_draft_token_s=0.002, t_transmit_token_s=0.05, t_verify_s=0.05)
    assert ctrl.b == pytest.approx(1.0, rel=1e-4)
    choice = ctrl.choice()
    assert not choice.use_speculation and choice == adaptive_selection(ctrl.alpha, ctrl.b, ctrl.c)


@pytest.mark.parametrize(
    "args",
    [(5, 4, 0.01, 0.01, 0.1), (-1, 4, 0.01, 0.01, 0.1), (0, 0, 0.01, 0.01, 0.1), (1.5, 4, 0.01, 0.01, 0.1),
     (1, 4, -0.01, 0.01, 0.1), (1, 4, 0.01, math.nan, 0.1), (1, 4, 0.01, 0.01, 0.0), (1, 4, 0.01, 0.01, math.inf)],
)
def test_controller_observe_rejects_invalid_rounds(args):
    """Inconsistent counts or bad timings raise ValueError and leave the estimates unchanged."""
    ctrl = DraftLengthController(0.6, 0.05, 0.1)
    with pytest.raises(ValueError):
        ctrl.observe(*args)
    assert (ctrl.alpha, ctrl.b, ctrl.c, ctrl.observations) == (0.6, 0.05, 0.1, 0)


@pytest.mark.parametrize(
    "alpha0, b0, c0, kwargs",
    [(1.2, 0.1, 0.1, {}), (0.5, -0.1, 0.1, {}), (0.5, 0.1, math.inf, {}), (0.5, 0.1, 0.1, {"smoothing": 0.0}),
     (0.5, 0.1, 0.1, {"smoothing": 1.5}), (0.5, 0.1, 0.1, {"max_gamma": 0})],
)
def test_controller_rejects_invalid_configuration(alpha0, b0, c0, kwargs):
    """An invalid prior, smoothing outside (0, 1] or max_gamma < 1 raise ValueError."""
    with pytest.raises(ValueError):
        DraftLengthController(alpha0, b0, c0, **kwargs)
