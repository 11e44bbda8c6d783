"""DRAGON's placement scheduler (dragon/scheduler.py, §5 eqs. 6-8) and its pipeline simulator
(§7.4, Fig. 8): hand-made numbers where the answer is obvious both ways, eq. 8 against eq. 7, the
pipeline's steady states against App. A.3, and the policy comparison on recorded acceptance sequences."""

import itertools
import math

import numpy as np
import pytest
import torch

from edge_spec_ros.dragon.aggregation import CLOUD, ROBOT, local_aggregate
from edge_spec_ros.dragon.scheduler import (
    DragonProfiler,
    choose_aggregator,
    compare_policies,
    latency_difference,
    per_token_latency,
    simulate_pipeline,
    sinusoidal_rtt,
)
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig

from reference import speculative_aggregation

MS = 1e-3


# --------------------------------------------------------------------------- eqs. 7-8


def test_eq8_is_the_difference_of_eq7_on_a_grid():
    """The piecewise Δc_t (eq. 8) equals c^l_t − c^r_t from eq. 7 in all four regions."""
    values = (0.0, 0.3, 0.7, 1.0)
    for c_l, c_r, rtt, a_l, a_r in itertools.product((5, 20, 60, 150, 400), (5, 20, 60, 150, 400),
                                                    (0, 30, 100, 300), values, values):
        direct = per_token_latency(c_l, c_r, rtt, a_r) - per_token_latency(c_r, c_l, rtt, a_l)
        assert latency_difference(c_l, c_r, rtt, a_l, a_r) == pytest.approx(direct, abs=1e-9)


@pytest.mark.parametrize("current", [ROBOT, CLOUD])
def test_the_bottleneck_side_aggregates(current):
    """One side's decoding is far slower than the other's plus a round trip: that side aggregates,
    whatever the acceptance rates and wherever the Aggregator is now (§5.1)."""
    for a_robot, a_cloud in ((0.1, 0.9), (0.9, 0.1), (0.5, 0.5)):
        alpha = {ROBOT: a_robot, CLOUD: a_cloud}
        slow_robot = choose_aggregator(current, {ROBOT: 400 * MS, CLOUD: 20 * MS}, 100 * MS, alpha)
        slow_cloud = choose_aggregator(current, {ROBOT: 20 * MS, CLOUD: 400 * MS}, 100 * MS, alpha)
        assert slow_robot.side == ROBOT and slow_cloud.side == CLOUD
        assert slow_robot.switch == (current != ROBOT)


@pytest.mark.parametrize("current", [ROBOT, CLOUD])
def test_equal_decoders_aggregate_where_drafts_are_rejected(current):
    """Equal decode times and a long round trip: the side whose drafts are usually accepted drafts
    remotely, the other aggregates (Δc = (α^l − α^r) rtt); both ways."""
    c_dec = {ROBOT: 50 * MS, CLOUD: 50 * MS}
    assert choose_aggregator(current, c_dec, 300 * MS, {ROBOT: 0.9, CLOUD: 0.3}).side == CLOUD
    assert choose_aggregator(current, c_dec, 300 * MS, {ROBOT: 0.3, CLOUD: 0.9}).side == ROBOT
    tie = choose_aggregator(current, c_dec, 300 * MS, {ROBOT: 0.6, CLOUD: 0.6})
    assert tie.side == current and tie.delta == 0.0 and not tie.switch


def test_placement_reports_both_latencies():
    p = choose_aggregator(ROBOT, {ROBOT: 60 * MS, CLOUD: 25 * MS}, 200 * MS, {ROBOT: 0.6, CLOUD: 0.85})
    assert p.delta == pytest.approx(p.latency[ROBOT] - p.latency[CLOUD])
    assert p.latency[ROBOT] == pytest.approx(0.85 * 60 * MS + 0.15 * 225 * MS)


def test_profiler_moving_averages():
    prof = DragonProfiler({ROBOT: 0.1, CLOUD: 0.1}, rtt=0.2, weight=0.5)
    assert prof.alpha == {ROBOT: 0.5, CLOUD: 0.5}
    prof.observe_acceptance(ROBOT, True)
    prof.observe_decode(CLOUD, 0.3)
    prof.observe_rtt(0.4)
    assert prof.alpha[ROBOT] == 0.75 and prof.c_dec[CLOUD] == pytest.approx(0.2) and prof.rtt == pytest.approx(0.3)
    with pytest.raises(ValueError):
        DragonProfiler({ROBOT: 0.1, CLOUD: 0.1}, rtt=0.2, weight=0.0)


# --------------------------------------------------------------------------- pipeline simulator


def _steady(acc_l, acc_r, c_l, c_r, rtt, n=200):
    res = simulate_pipeline([acc_l] * n, [acc_r] * n, c_l, c_r, lambda now: rtt, policy="robot")
    g = res.aggregation_times
    return (g[-1] - g[n // 2]) / (n - 1 - n // 2)


def test_pipeline_steady_states_match_appendix_a3():
    """Aggregator on the robot (l), constant link: per-token latency of each repeated case (App. A.3)."""
    c_l, c_r, rtt = 1.0, 1.5, 3.0
    assert _steady(False, True, c_l, c_r, rtt) == pytest.approx(max(c_l, c_r))  # i) reject l, accept r
    assert _steady(True, False, 2.0, 2.0, 2.5) == pytest.approx(max(2.0, 2.5 + 2.0))  # ii) accept l, reject r
    assert _steady(True, True, c_l, c_r, rtt) == pytest.approx(max(c_l, c_r))  # iii) accept both
    assert _steady(False, False, 2.0, 1.0, 3.3) == pytest.approx(max(2.0, 3.3 + 1.0))  # iv) reject both
    for acc_r in (True, False):  # eq. 7 is the α^r-mixture of these two
        expected = per_token_latency(c_l, c_r, rtt, 1.0 if acc_r else 0.0)
        assert _steady(False, acc_r, c_l, c_r, rtt) == pytest.approx(expected)


def test_pipeline_switching_pays_the_signal_and_cloud_delivery():
    """Aggregating in the cloud delivers the last token one one-way delay later; the always-switching
    random policy is deterministic in its seed."""
    acc = [True] * 10
    robot = simulate_pipeline(acc, acc, 0.05, 0.05, lambda now: 0.2, policy="robot")
    cloud = simulate_pipeline(acc, acc, 0.05, 0.05, lambda now: 0.2, policy="cloud")
    assert cloud.total_time == pytest.approx(robot.total_time + 0.1)
    assert cloud.aggregator[1:] == (CLOUD,) * 9 and cloud.switches == 1
    a = simulate_pipeline(acc, acc, 0.05, 0.05, lambda now: 0.2, policy="random", seed=4)
    assert a == simulate_pipeline(acc, acc, 0.05, 0.05, lambda now: 0.2, policy="random", seed=4)
    with pytest.raises(ValueError):
        simulate_pipeline(acc, acc[:5], 0.05, 0.05, lambda now: 0.2)


def test_sinusoidal_rtt():
    link = sinusoidal_rtt(0.02, 0.3)
    assert link(0.0) == pytest.approx(0.32)
    assert link(5 * math.pi) == pytest.approx(0.02 + 0.3 * 1.2)  # quarter of the 20π s period
    assert sinusoidal_rtt(0.02, 0.0)(123.0) == pytest.approx(0.02)


def _recorded_sequences(n_seq: int, n_tokens: int, noise: float):
    """Acceptance decisions recorded from the in-process Speculative Aggregation decoder on hand-built
    side tables (V = 6), one sequence per seed: S^robot_t, S^cloud_t."""
    v = 6
    gen = torch.Generator().manual_seed(0)
    table_l = torch.randn(v, 2, v, generator=gen, dtype=torch.float64) * 2.5
    table_r = table_l + noise * torch.randn(v, 2, v, generator=gen, dtype=torch.float64)
    scores_l = torch.tensor([0.5, 0.0], dtype=torch.float64)
    scores_r = torch.tensor([0.0, -0.5], dtype=torch.float64)
    robot = lambda ctx: local_aggregate(torch.softmax(table_l[ctx[-1]], -1), scores_l)  # noqa: E731
    cloud = lambda ctx: local_aggregate(torch.softmax(table_r[ctx[-1]], -1), scores_r)  # noqa: E731
    out = []
    for seed in range(n_seq):
        res = speculative_aggregation(robot, cloud, [seed % v], n_tokens, PositionalRNG(seed), SamplingConfig(1.0))
        out.append((res.accept_robot, res.accept_cloud))
    return out


def test_policy_comparison_on_recorded_acceptance_sequences():
    """Fig. 8 in small: 20 recorded sequences of 100 tokens, robot decoding 60 ms, cloud 25 ms, base
    rtt 20 ms, extra latency 0-400 ms with 1/5 sinusoidal jitter. The scheduler is never worse than
    random, within 3 % of the better static side everywhere, and beats both static sides by >5 % on
    sides with equal decoders at high latency, where switching pays."""
    sequences = _recorded_sequences(20, 100, noise=1.5)
    rates = np.mean([[np.mean(a), np.mean(b)] for a, b in sequences], axis=0)
    assert 0.2 < rates[0] < 0.95 and 0.2 < rates[1] < 0.95  # both sides get rejections
    extras = (0.0, 0.1, 0.2, 0.4)
    cmp = compare_policies(sequences, 60 * MS, 25 * MS, 20 * MS, extras)
    m = cmp.mean_total
    for i in range(len(extras)):
        assert m["dragon"][i] <= m["random"][i] + 1e-9
        assert m["dragon"][i] <= 1.03 * min(m["robot"][i], m["cloud"][i])
    equal = compare_policies(sequences, 30 * MS, 30 * MS, 20 * MS, (0.4,)).mean_total
    assert equal["dragon"][0] < 0.95 * min(equal["robot"][0], equal["cloud"][0])
