"""DRAGON's aggregator-placement scheduler (Liu et al. 2025, §5, eqs. 6-8) and a pipeline simulator
for comparing placement policies over recorded acceptance sequences (§7.4, Fig. 8).

Legend (the paper's notation): l — the side aggregating now, r — the other side;
  c^s_dec — time for side s to decode one draft token; c^s_trans — one-way transmission from s;
  rtt = c^l_trans + c^r_trans; α^s_t — acceptance rate of side s's drafts (eq. 5 or measured);
  c^s_t — expected per-token latency if s aggregates from now on (eq. 7); Δc_t = c^l_t − c^r_t (eq. 8);
  j = c^r_dec − c^l_dec. Move the Aggregator to r iff Δc_t > 0 (eq. 6).
Pure functions of measured numbers (seconds, rates); no clocks, no I/O.

Departures, each for a reason:
  * Eq. 7 as printed reads "c^r_dec + c^l_trans + c^l_trans"; the derivation (Table 1) and eq. 8 use
    c^r_dec + rtt, which is what is implemented. Eq. 8's last case prints "(c^l_t − 1) rtt"; it is
    (α^l_t − 1) rtt, the value eq. 7 gives (a test checks eq. 8 against eq. 7 on a grid).
  * The profiler (§5.2) fits c_dec against context length with a frozen intercept and measures rtt
    with ping/iperf3; here c_dec and rtt are exponential moving averages of what the decoder measures
    (the bench has no ICMP and our contexts are short), and α is a moving average of observed S^s or
    of eq. 5's expectation, whichever the caller feeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from edge_spec_ros.dragon.aggregation import CLOUD, ROBOT, SideName

Policy = Literal["dragon", "robot", "cloud", "random"]
POLICIES: tuple[Policy, ...] = ("dragon", "robot", "cloud", "random")


def other(side: SideName) -> SideName:
    return CLOUD if side == ROBOT else ROBOT


# --------------------------------------------------------------------------- eqs. 7 and 8


def per_token_latency(c_dec_l: float, c_dec_r: float, rtt: float, alpha_r: float) -> float:
    """c^l_t = α^r max(c^l_dec, c^r_dec) + (1 − α^r) max(c^l_dec, c^r_dec + rtt) (eq. 7)."""
    return alpha_r * max(c_dec_l, c_dec_r) + (1.0 - alpha_r) * max(c_dec_l, c_dec_r + rtt)


def latency_difference(c_dec_l: float, c_dec_r: float, rtt: float, alpha_l: float, alpha_r: float) -> float:
    """Δc_t = c^l_t − c^r_t, the piecewise form of eq. 8 (j = c^r_dec − c^l_dec)."""
    j = c_dec_r - c_dec_l
    if c_dec_l <= c_dec_r - rtt:
        return (1.0 - alpha_r) * rtt
    if c_dec_l <= c_dec_r:
        return (1.0 - alpha_l) * j + (alpha_l - alpha_r) * rtt
    if c_dec_l <= c_dec_r + rtt:
        return (1.0 - alpha_r) * j + (alpha_l - alpha_r) * rtt
    return (alpha_l - 1.0) * rtt


@dataclass(frozen=True)
class Placement:
    """The scheduler's decision: who aggregates next, Δc_t from the current side's view, and c^s_t."""

    side: SideName
    switch: bool  # side differs from the current aggregator (the signal rides with x_t)
    delta: float  # Δc_t = c^current_t − c^other_t; > 0 moves the Aggregator
    latency: dict[str, float]  # c^s_t for s ∈ {robot, cloud}


def choose_aggregator(current: SideName, c_dec: dict[str, float], rtt: float, alpha: dict[str, float]) -> Placement:
    """Eq. 6 with eq. 8: l = current, r = the other side; move to r iff Δc_t > 0 (ties stay put).

    c_dec, alpha: per side, keyed "robot" / "cloud"; rtt: the current round-trip estimate (s).
    """
    l, r = current, other(current)
    delta = latency_difference(c_dec[l], c_dec[r], rtt, alpha[l], alpha[r])
    latency = {l: per_token_latency(c_dec[l], c_dec[r], rtt, alpha[r]),
               r: per_token_latency(c_dec[r], c_dec[l], rtt, alpha[l])}
    side = r if delta > 0.0 else l
    return Placement(side, side != current, delta, latency)


# --------------------------------------------------------------------------- profiler (§5.2, simplified)


@dataclass
class DragonProfiler:
    """Moving-average estimates of c^s_dec, rtt and α^s that choose_aggregator needs.

    weight: ζ, the weight of a new observation; alpha starts at ``alpha_prior`` on both sides.
    """

    c_dec: dict[str, float]
    rtt: float
    weight: float = 0.2
    alpha_prior: float = 0.5
    alpha: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 < self.weight <= 1.0:
            raise ValueError("weight must be in (0, 1]")
        for side in (ROBOT, CLOUD):
            self.alpha.setdefault(side, self.alpha_prior)

    def _ema(self, old: float, new: float) -> float:
        return (1.0 - self.weight) * old + self.weight * new

    def observe_decode(self, side: SideName, seconds: float) -> None:
        self.c_dec[side] = self._ema(self.c_dec[side], seconds)

    def observe_rtt(self, seconds: float) -> None:
        self.rtt = self._ema(self.rtt, seconds)

    def observe_acceptance(self, side: SideName, accepted: float) -> None:
        """A flag S^s (0/1) or eq. 5's expectation α^s_t."""
        self.alpha[side] = self._ema(self.alpha[side], float(accepted))

    def choose(self, current: SideName) -> Placement:
        return choose_aggregator(current, self.c_dec, self.rtt, self.alpha)


# --------------------------------------------------------------------------- pipeline simulator (§7.4)


def sinusoidal_rtt(base: float, extra: float, amplitude: float = 0.2, period: float = 20 * math.pi,
                   phase: float = 0.0) -> Callable[[float], float]:
    """rtt(τ) = base + extra·(1 + amplitude·sin(2πτ/period + phase)): §7.4's extra latency with a
    sinusoidal jitter of 1/5 of it and period 20π s (seconds in, seconds out)."""
    return lambda now: base + extra * (1.0 + amplitude * math.sin(2.0 * math.pi * now / period + phase))


@dataclass(frozen=True)
class SimulationResult:
    """Total time to deliver all tokens to the robot, per-token aggregation times and placements."""

    total_time: float
    aggregation_times: tuple[float, ...]  # g_t
    aggregator: tuple[SideName, ...]  # who aggregated position t
    switches: int


def simulate_pipeline(accept_robot: Sequence[bool], accept_cloud: Sequence[bool], c_dec_robot: float,
                      c_dec_cloud: float, rtt: Callable[[float], float], policy: Policy = "dragon",
                      first_aggregator: SideName = ROBOT, seed: int = 0, profiler_weight: float = 0.2,
                      ) -> SimulationResult:
    """Replay recorded acceptance decisions S^l_t, S^r_t (they do not depend on timing: exactness)
    through the Speculative Aggregation pipeline of §4.2 under a placement policy.

    Timing model (Table 1 and App. A.3): each side decodes drafts back to back (c^s_dec each) while its
    drafts are accepted; a rejected side restarts from x_t when the result reaches it. Each draft is
    broadcast (one-way delay rtt(τ)/2 when sent at τ); the Aggregator A_t aggregates position t at
    g_t = max(both drafts available at A_t, A_t knows x_{t−1}); the result reaches the other side
    rtt/2 later; a switch signal rides with x_{t−1}, so a new Aggregator starts once that arrives.
    The robot needs every token (output is produced on the device, §2.3): a cloud-side last
    aggregation adds one more one-way delay. Aggregation itself takes no time (§5.1).
    "dragon" decides with choose_aggregator on a DragonProfiler fed with the flags seen so far and
    the rtt measured at g_t; "random" picks uniformly (seeded).
    """
    n = len(accept_robot)
    if len(accept_cloud) != n or n == 0:
        raise ValueError("need two acceptance sequences of the same, non-zero length")
    c_dec = {ROBOT: c_dec_robot, CLOUD: c_dec_cloud}
    accepted = {ROBOT: accept_robot, CLOUD: accept_cloud}
    gen = np.random.default_rng(seed)
    profiler = DragonProfiler(dict(c_dec), rtt(0.0), weight=profiler_weight)

    def one_way(now: float) -> float:
        return 0.5 * rtt(now)

    finish = {s: c_dec[s] for s in (ROBOT, CLOUD)}  # f^s_t: draft t of side s decoded
    aggregator: SideName = first_aggregator
    knows_previous = 0.0  # when the aggregator of step t knows x_{t−1}
    times: list[float] = []
    where: list[SideName] = []
    switches = 0
    for t in range(n):
        avail = [finish[s] + (0.0 if s == aggregator else one_way(finish[s])) for s in (ROBOT, CLOUD)]
        g = max(knows_previous, *avail)
        times.append(g)
        where.append(aggregator)
        # result of step t reaches each side
        receive = {s: g + (0.0 if s == aggregator else one_way(g)) for s in (ROBOT, CLOUD)}
        for s in (ROBOT, CLOUD):
            finish[s] = (finish[s] if accepted[s][t] else receive[s]) + c_dec[s]
            profiler.observe_acceptance(s, accepted[s][t])
        profiler.rtt = rtt(g)  # the real-time estimate (ping at each step, §5.2)
        nxt = _next_aggregator(policy, profiler, aggregator, gen)
        if nxt != aggregator:
            switches += 1
            knows_previous = receive[nxt]  # x_t and the switch signal arrive together
        else:
            knows_previous = g
        aggregator = nxt
    last = where[-1]
    total = times[-1] + (0.0 if last == ROBOT else one_way(times[-1]))
    return SimulationResult(total, tuple(times), tuple(where), switches)


def _next_aggregator(policy: Policy, profiler: DragonProfiler, aggregator: SideName,
                     gen: np.random.Generator) -> SideName:
    """A_{t+1} under ``policy``: eq. 8 on the profiler's estimates ("dragon"), a fixed side, or a
    uniform (seeded) pick ("random")."""
    if policy == "dragon":
        return profiler.choose(aggregator).side
    if policy in (ROBOT, CLOUD):
        return policy
    if policy == "random":
        return ROBOT if gen.random() < 0.5 else CLOUD
    raise ValueError(f"unknown policy {policy!r}")


@dataclass(frozen=True)
class PolicyComparison:
    """Mean total time (s) per policy and extra latency, over the given acceptance sequences."""

    extra_latencies: tuple[float, ...]
    mean_total: dict[str, tuple[float, ...]]  # policy → one mean per extra latency


def compare_policies(sequences: Sequence[tuple[Sequence[bool], Sequence[bool]]], c_dec_robot: float,
                     c_dec_cloud: float, base_rtt: float, extra_latencies: Sequence[float],
                     policies: Sequence[Policy] = POLICIES, seed: int = 0) -> PolicyComparison:
    """Fig. 8: total time for each recorded (S^robot, S^cloud) sequence under each policy and extra
    latency (sinusoidal jitter of 1/5, a phase per sequence so the jitter is not aligned), averaged."""
    means: dict[str, list[float]] = {p: [] for p in policies}
    for extra in extra_latencies:
        totals: dict[str, list[float]] = {p: [] for p in policies}
        for i, (acc_r, acc_c) in enumerate(sequences):
            link = sinusoidal_rtt(base_rtt, extra, phase=2.0 * math.pi * i / max(1, len(sequences)))
            for p in policies:
                totals[p].append(simulate_pipeline(acc_r, acc_c, c_dec_robot, c_dec_cloud, link, p,
                                                   seed=seed + i).total_time)
        for p in policies:
            means[p].append(float(np.mean(totals[p])))
    return PolicyComparison(tuple(extra_latencies), {p: tuple(v) for p, v in means.items()})
