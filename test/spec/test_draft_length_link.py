"""The link-aware extension of AS²: propagation delay apart from transmission (LinkRegression), the
delay-aware speedup and the probe spacing of the online controller."""

from __future__ import annotations

import math

import pytest

from edge_spec_ros.spec.draft_length import (
    DraftLengthController,
    LinkRegression,
    adaptive_selection,
    adaptive_selection_with_delay,
    optimal_draft_length,
    round_cost,
    speedup_ratio,
)


def test_regression_recovers_propagation_and_per_byte_cost():
    link = LinkRegression(smoothing=0.3)
    for i in range(40):
        x = 1_000 + 500 * (i % 5)  # bytes vary with γ
        link.observe(x, 0.060 + 2e-6 * x)
    fit = link.fit()
    assert fit.propagation_s == pytest.approx(0.060, rel=1e-9)
    assert fit.per_byte_s == pytest.approx(2e-6, rel=1e-9)
    assert fit.rounds == 40


def test_regression_keeps_precision_at_megabyte_rounds():
    link = LinkRegression(smoothing=0.2)
    for i in range(30):
        x = 2_400_000 + 600_000 * (i % 4)
        link.observe(x, 0.240 + 8e-8 * x)
    fit = link.fit()
    assert fit.propagation_s == pytest.approx(0.240, rel=1e-6)
    assert fit.per_byte_s == pytest.approx(8e-8, rel=1e-6)


def test_constant_bytes_count_as_propagation_until_they_vary():
    link = LinkRegression()
    for _ in range(5):
        link.observe(400, 0.12)
    assert (link.fit().propagation_s, link.fit().per_byte_s) == (pytest.approx(0.12), 0.0)


def test_regression_stays_physical():
    falling = LinkRegression(smoothing=0.5)  # more bytes, less time: noise, not a negative cost
    for x, y in ((100, 0.3), (1000, 0.2), (100, 0.3), (1000, 0.2)):
        falling.observe(x, y)
    assert falling.fit().per_byte_s == 0.0 and falling.fit().propagation_s > 0
    steep = LinkRegression(smoothing=0.5)  # the line crosses zero bytes below zero: through the origin
    for x, y in ((1000, 0.01), (2000, 0.1), (1000, 0.01), (2000, 0.1)):
        steep.observe(x, y)
    fit = steep.fit()
    assert fit.propagation_s == 0.0 and fit.per_byte_s > 0
    with pytest.raises(ValueError):
        steep.observe(-1, 0.1)
    with pytest.raises(ValueError):
        steep.observe(10, math.nan)


def test_delay_aware_selection_reduces_to_algorithm_2_without_delay():
    for alpha in (0.3, 0.6, 0.9):
        for b, c in ((0.01, 0.02), (0.2, 0.1), (0.5, 0.5)):
            assert adaptive_selection_with_delay(alpha, b, c, 0.0, 1.0) == adaptive_selection(alpha, b, c)


def test_delay_aware_speedup_is_the_round_model_by_brute_force():
    alpha, b, c, d, a = 0.8, 0.02, 0.05, 1.5, 1.2
    choice = adaptive_selection_with_delay(alpha, b, c, d, a, max_gamma=40)
    brute = {g: a * speedup_ratio(alpha, g, 0.0) / (1 + g * (b + c) + d) for g in range(1, 41)}
    best = max(brute, key=brute.get)
    assert choice.gamma == best and choice.speedup == pytest.approx(brute[best])
    # a fixed delay per round makes longer drafts pay: γ* grows with d
    assert choice.gamma > optimal_draft_length(alpha, b, c).gamma


def test_propagation_alone_can_make_speculation_lose():
    assert adaptive_selection_with_delay(0.8, 0.01, 0.01, 0.0).use_speculation
    assert not adaptive_selection_with_delay(0.8, 0.01, 0.01, 20.0).use_speculation  # RTT ≫ T_LLM
    assert round_cost(0.5, 2, 0.1, 1.0) == (pytest.approx(2.2), pytest.approx(1.75))
    with pytest.raises(ValueError):
        adaptive_selection_with_delay(0.5, 0.1, 0.1, -1.0)
    with pytest.raises(ValueError):
        adaptive_selection_with_delay(0.5, 0.1, 0.1, 0.0, a=0.0)


def feed(ctl: DraftLengthController, rounds: int, *, accepted: int, gamma: int, t_verify: float,
         propagation: float, per_byte: float, bytes_per_token: int, t_draft: float = 0.001) -> None:
    """``rounds`` hand-built rounds whose link time is propagation + per_byte × bytes, γ alternating."""
    for i in range(rounds):
        g = gamma + (i % 2)
        x = bytes_per_token * g
        ctl.observe(min(accepted, g), g, t_draft, (propagation + per_byte * x) / g, t_verify, x)


def test_controller_splits_the_link_time_and_uses_the_delay():
    ctl = DraftLengthController(0.5, 0.05, 0.05, smoothing=0.3)
    feed(ctl, 30, accepted=3, gamma=4, t_verify=0.01, propagation=0.05, per_byte=1e-6, bytes_per_token=1000)
    fit = ctl.link.fit()
    assert fit.propagation_s == pytest.approx(0.05, rel=1e-6) and fit.per_byte_s == pytest.approx(1e-6, rel=1e-6)
    b, c, d, a = ctl.cost_ratios()
    assert d == pytest.approx(5.0, rel=1e-6)  # 50 ms of propagation over T_LLM = 10 ms
    assert b == pytest.approx(1e-6 * 1000 / 0.01, rel=0.05)  # bytes per token average over γ = 4, 5
    assert c == pytest.approx(0.1, rel=1e-4) and a == 1.0  # the EMA has all but forgotten its prior 0.05
    assert ctl.choice() == adaptive_selection_with_delay(ctl.alpha, b, c, d, a, ctl.max_gamma)


def test_controller_measures_the_cloud_token():
    ctl = DraftLengthController(0.5, 0.05, 0.05)
    feed(ctl, 1, accepted=2, gamma=4, t_verify=0.02, propagation=0.0, per_byte=0.0, bytes_per_token=10)
    ctl.observe_cloud(10, 0.1)  # 10 ms per cloud token, half a verification
    assert ctl.cost_ratios()[3] == pytest.approx(0.5)
    slow = DraftLengthController(0.5, 0.05, 0.05)
    feed(slow, 1, accepted=2, gamma=4, t_verify=0.02, propagation=0.0, per_byte=0.0, bytes_per_token=10)
    slow.observe_cloud(1, 0.5)  # one slow cloud token (a busy verifier) does not make speculation look better
    assert slow.cost_ratios()[3] == 1.0
    assert ctl.cloud_tokens == 10
    with pytest.raises(ValueError):
        ctl.observe_cloud(0, 0.1)
    with pytest.raises(ValueError):
        ctl.observe(1, 4, 0.01, 0.01, 0.1, -5)


def test_probe_spacing_bounds_the_probes_share_of_cloud_time():
    ctl = DraftLengthController(0.5, 0.05, 0.05)
    feed(ctl, 10, accepted=0, gamma=4, t_verify=0.01, propagation=0.2, per_byte=0.0, bytes_per_token=100)
    choice = ctl.choice()
    assert not choice.use_speculation
    b, c, d, a = ctl.cost_ratios()
    cost, tokens = round_cost(ctl.alpha, choice.gamma, b + c, d)
    spacing = ctl.probe_spacing(0.02)
    # the probe's excess over the cloud tokens it replaces is at most 2 % of the cloud time between probes
    assert (cost - a * tokens) <= 0.02 * a * spacing + 1e-12
    assert (cost - a * tokens) > 0.02 * a * (spacing - 1)
    # nearer break-even, probes come more often
    near = DraftLengthController(0.5, 0.05, 0.05)
    feed(near, 10, accepted=2, gamma=4, t_verify=0.01, propagation=0.02, per_byte=0.0, bytes_per_token=100)
    assert near.probe_spacing(0.02) < spacing
    with pytest.raises(ValueError):
        ctl.probe_spacing(0.0)
