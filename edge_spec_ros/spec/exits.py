"""Early-exit verification (FSD paper, Section 2 eq. 4 and Section 3 eq. 5).

Legend: l — exit layer (1..L, L = final); z^(l) — logits of exit l; S^(l) = max softmax(z^(l)) — the
exit's confidence (eq. 4); δ^(l) — draft tokens accepted by exit l; x^(l)_{t:t+δ^(l)+1} — its output.

Every exit verifies the same draft with the same random draws as the final exit, so an exit whose
distributions agree with the final one returns the same verdict (a pre-draft cache hit). Only the
final exit decides what is emitted.

Which exits to compute (``ExitPlanner``): an exit costs a head (adapter, norm, the LM head over the
vocabulary) on the verifier's critical path, and it earns only when the robot's pre-drafter uses
its output — when it is the earliest computed exit whose verdict equals the final one (a later exit
with the same tokens is a duplicate the pre-drafter drops). The planner learns per exit l its rate
r_l of matching the final verdict, its measured head cost h_l, and the robot's saving on a hit D
(the gap between a verdict and the next block after rounds with a right exit against those
without); a hit at exit l saves min(D, (1 − l/L)·T_q), the head start its pre-draft gets. Exits
nest (a later exit is right at least as often), so a chosen chain l_1 < l_2 < … earns
Σ_k (r_{l_k} − r_{l_{k−1}})⁺ · saving(l_k) − Σ_k h_{l_k} per round, maximised exactly by dynamic
programming over the chain's last exit; the empty chain (no exit: plain SD) is always a candidate.
Once rounds with every exit have been seen (a decision's first rounds), the choice is made on them
jointly instead (``best_set``: no nesting assumed, the last ``HISTORY`` such rounds).
The model leaves out what the robot pays for exits beyond their heads (its pre-draft threads take
cores the verifier may share, every early result is encoded and sent), so the planner also checks
the chain end to end: it compares the cycle between consecutive blocks (verification, link, the
robot's drafting or its hit) in rounds with the chain against rounds with no exit, uses the faster
arm, and tries the other one at most every ``EXPLORE_EVERY``-th round and only as often as
``EXPLORE_BUDGET`` of the cycles since it was last tried covers what a try is measured to lose (its
cycle less the faster arm's), so that an arm far slower is tried rarely and one nearly as fast every
``EXPLORE_EVERY``-th round. Exits never change the verdicts, so the two arms commit the same tokens
per round and their cycles compare directly.
The planner's first ``warmup_rounds`` (optionally every ``probe_every``-th) compute every exit, and
so does the first round of a decision while such probes are cheap, so rates of exits switched off
stay measured (these rounds are the joint observations): a decision's first round probes when the
verification time since the last probe, times ``PROBE_BUDGET``, covers what a probe costs: the heads
of every exit, or, once probe rounds' cycles are measured, what such a cycle takes beyond the faster
arm's if that is more (the robot's side of every exit: its pre-draft threads on the cores the
verifier shares), and otherwise plans like the others. Where heads cost little beside the
verification (an emulated T_q, a GPU) every first round probes, and two decisions given the same
first draft stream the same early results; where nine heads over a 49k vocabulary cost twice a plain
verification (SmolLM2-135M on a CPU), a probe comes every few decisions. A robot that pipelines its
blocks (PicoSpec) has its next block after a fully accepted one, so in its rounds an exit earns only
after a rejection (``observe(..., covered=True)`` for the others); the verifier keeps a planner of
its own for such sessions (models/verifier.planner_for). Only the final exit's verdict is ever
emitted as tokens: the plan changes which guesses reach the robot, never the output.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.spec.verify import Verdict, verify


def exit_confidence(logits: torch.Tensor) -> torch.Tensor:
    """S = max softmax(z) over the last axis (eq. 4): (..., V) → (...)."""
    return torch.softmax(logits.float(), dim=-1).amax(-1)


@dataclass(frozen=True)
class ExitVerdict:
    """One exit's verification result, as streamed to the robot."""

    layer: int
    verdict: Verdict
    confidence: float  # S^(l) at the position of the token the exit generated itself
    is_final: bool


def verify_exit(layer: int, logits: torch.Tensor, draft: Sequence[int], q: torch.Tensor | None,
                sampling: SamplingConfig, rng: PositionalRNG, position: int, is_final: bool) -> ExitVerdict:
    """Eq. 5 for one exit: logits (γ+1, V) of exit ``layer`` over the draft block.

    The paper ranks an exit's output by "the confidence score of the generated token": S^(l) at the
    position of the token the exit generated itself, row δ^(l) of its logits.
    """
    verdict = verify(draft, logits, q, sampling, rng, position)
    confidence = float(exit_confidence(logits[verdict.accepted]))
    return ExitVerdict(layer, verdict, confidence, is_final)


# --------------------------------------------------------------------------- which exits to compute

WARMUP_ROUNDS = 1  # rounds with every exit before the learned plan is used (each exit must be seen once)
PROBE_EVERY = 0  # every so many rounds, every exit again (0: only each decision's first round does)
PLAN_SMOOTHING = 0.1  # EMA weight of the newest round in r_l, h_l and the gaps
HISTORY = 64  # rounds with every exit computed that the joint choice looks back on
EXPLORE_EVERY = 16  # at most every so many planned rounds, the arm (chain / no exit) that looks slower is tried
EXPLORE_BUDGET = 0.02  # and only as often as this share of the cycles since its last try covers what a try loses
MIN_ARM_ROUNDS = 3  # cycles measured in each arm before the faster one is preferred
OUTLIER_FACTOR = 3.0  # a cycle above this many times its arm's mean counts as that much (a lost packet)
PRIOR_ROUNDS = 2  # rounds without a hit the joint choice adds to its history: one probe is not proof
PROBE_BUDGET = 0.01  # a decision's every-exit first round: at most this share of the verification time


@dataclass(frozen=True)
class ExitStats:
    """What the planner knows of one exit: its layer, r_l, h_l (s) and the rounds it was computed in."""

    layer: int
    right_rate: float
    head_s: float
    rounds: int


class ExitPlanner:
    """Learns which early exits earn their compute (module docstring) and plans each round's exits.

    ``plan(probe)`` gives the exits to compute; ``observe`` takes a round's outcome (each computed exit's
    tokens, the final tokens, each exit's head time, T_q), ``observe_gap`` the time from a verdict to
    the next block. Thread-safe: one planner serves every session of a verifier."""

    def __init__(self, layers: Sequence[int], num_layers: int, *, warmup_rounds: int = WARMUP_ROUNDS,
                 probe_every: int = PROBE_EVERY, smoothing: float = PLAN_SMOOTHING) -> None:
        if any(not 1 <= l < num_layers for l in layers):
            raise ValueError(f"exit layers {list(layers)} must lie in 1..{num_layers - 1}")
        if warmup_rounds < 0 or probe_every < 0 or not 0.0 < smoothing <= 1.0:
            raise ValueError("need warmup_rounds ≥ 0, probe_every ≥ 0 and smoothing in (0, 1]")
        self.layers = tuple(sorted(set(layers)))
        self.num_layers = num_layers
        self.warmup_rounds, self.probe_every, self.smoothing = warmup_rounds, probe_every, smoothing
        self._lock = threading.Lock()
        self._right = {l: 0.0 for l in self.layers}
        self._head = {l: 0.0 for l in self.layers}
        self._seen = {l: 0 for l in self.layers}
        self._gap = {True: 0.0, False: 0.0}  # verdict → next block, after rounds with / without a right exit
        self._gaps = {True: 0, False: 0}
        self._t_q, self._t_q_rounds = 0.0, 0  # EMA of the verification time T_q (s)
        self._base, self._base_rounds = 0.0, 0  # EMA of T_q less the round's exit heads (s)
        self._since_probe = 0  # rounds planned since the last one that computed every exit
        # EMA of the block-to-block cycle with the chain / with no exit / with every exit (a probe)
        self._cycle: dict[bool | None, float] = {True: 0.0, False: 0.0, None: 0.0}
        self._cycles: dict[bool | None, int] = {True: 0, False: 0, None: 0}
        self._since_explore = 0  # planned rounds since the slower arm was last tried
        self._history: list[frozenset[int]] = []  # per round with every exit: the exits that were right
        self.rounds = 0  # rounds planned
        self.computed = {l: 0 for l in self.layers}  # rounds each exit was planned in

    # --- estimates ---------------------------------------------------------------------------
    def stats(self) -> list[ExitStats]:
        with self._lock:
            return [ExitStats(l, self._right[l], self._head[l], self._seen[l]) for l in self.layers]

    @property
    def hit_saving_s(self) -> float:
        """D: the robot's measured saving on a hit (inf until both kinds of gap were seen)."""
        with self._lock:
            return self._saving()

    def _saving(self) -> float:
        if not (self._gaps[True] and self._gaps[False]):
            return math.inf
        return max(0.0, self._gap[False] - self._gap[True])

    # --- planning -----------------------------------------------------------------------------
    def plan(self, probe: bool = False) -> frozenset[int]:
        """The exits to compute in the next round; ``probe``: a decision's first round, which computes
        every exit when the probe fits ``PROBE_BUDGET`` (``probe_due``)."""
        with self._lock:
            t_q_s = self._t_q
            self.rounds += 1
            n = self.rounds
            if (probe and self._probe_due()) or n <= self.warmup_rounds \
                    or (self.probe_every and n % self.probe_every == 0) or any(v == 0 for v in self._seen.values()):
                chosen = frozenset(self.layers)
            else:
                def saving(l: int) -> float:
                    return min(self._saving(), (1.0 - l / self.num_layers) * max(t_q_s, 0.0))

                chosen = frozenset(best_set(self._history, self._head, saving) if self._history else best_chain(
                    [(l, self._right[l], self._head[l]) for l in self.layers], saving))
                if chosen and not self._chain_arm():
                    chosen = frozenset()
            for l in chosen:
                self.computed[l] += 1
            self._since_probe = 0 if chosen == frozenset(self.layers) else self._since_probe + 1
            return chosen

    @property
    def probe_due(self) -> bool:
        """Whether a decision's first round would compute every exit now (``_probe_due``)."""
        with self._lock:
            return self._probe_due()

    def _probe_due(self) -> bool:
        """A probe costs the heads of every exit, Σ h_l, or what a probe round's cycle is measured to
        take beyond the faster arm's if that is more; it is due once PROBE_BUDGET of the verification time
        since the last round with every exit (rounds × T_q without heads) covers that cost."""
        if self._base_rounds == 0:
            return True
        cost = sum(self._head.values())
        arms = [self._cycle[arm] for arm in (True, False) if self._cycles[arm]]
        if self._cycles[None] and arms:
            cost = max(cost, self._cycle[None] - min(arms))
        return cost <= PROBE_BUDGET * self._since_probe * self._base

    def observe(self, outputs: Mapping[int, tuple[int, ...]], final: tuple[int, ...],
                head_s: Mapping[int, float], t_q_s: float, covered: bool = False) -> bool:
        """A round's outcome: each computed exit's tokens, the final tokens, each computed exit's cost
        on the critical path (s) and the round's verification time T_q (s). ``covered``: the robot had
        its next block without any exit (PicoSpec's pipelined block after a fully accepted one), so no
        exit counts as right in this round: an exit earns only in the rounds where its pre-draft can be
        used. Returns whether some computed exit was right and of use (a possible hit)."""
        w = self.smoothing
        with self._lock:
            if math.isfinite(t_q_s) and t_q_s >= 0.0:
                self._t_q = t_q_s if self._t_q_rounds == 0 else self._t_q + w * (t_q_s - self._t_q)
                self._t_q_rounds += 1
                base = max(0.0, t_q_s - sum(max(0.0, float(head_s.get(l, 0.0))) for l in outputs if l in self._right))
                self._base = base if self._base_rounds == 0 else self._base + w * (base - self._base)
                self._base_rounds += 1
            for l, tokens in outputs.items():
                if l not in self._right:
                    continue
                right = float(not covered and tuple(tokens) == tuple(final))
                cost = max(0.0, float(head_s.get(l, 0.0)))
                if self._seen[l] == 0:
                    self._right[l], self._head[l] = right, cost
                else:
                    self._right[l] += w * (right - self._right[l])
                    self._head[l] += w * (cost - self._head[l])
                self._seen[l] += 1
            if set(outputs) >= set(self.layers):  # every exit computed: a joint observation
                self._history.append(frozenset() if covered else
                                     frozenset(l for l, t in outputs.items() if tuple(t) == tuple(final)))
                del self._history[:-HISTORY]
        return not covered and any(tuple(t) == tuple(final) for t in outputs.values())

    def _chain_arm(self) -> bool:
        """Whether this planned round computes its chain (True) or no exit (False): each arm until it
        has MIN_ARM_ROUNDS cycles, then the faster, and the slower once at least EXPLORE_EVERY rounds
        have passed since its last try and EXPLORE_BUDGET of their cycles covers what it loses."""
        for arm in (True, False):
            if self._cycles[arm] < MIN_ARM_ROUNDS:
                return arm
        faster = self._cycle[True] <= self._cycle[False]
        self._since_explore += 1
        loss = abs(self._cycle[True] - self._cycle[False])
        if self._since_explore >= EXPLORE_EVERY and \
                loss <= EXPLORE_BUDGET * self._since_explore * min(self._cycle[True], self._cycle[False]):
            self._since_explore = 0
            return not faster
        return faster

    def observe_cycle(self, cycle_s: float, with_chain: bool | None) -> None:
        """The time from a block's arrival to the next block's, after a round that computed a learned
        chain of exits (``with_chain`` True), no exit (False) or every exit (None: a decision's first
        round as a probe, which is neither arm)."""
        if not (math.isfinite(cycle_s) and cycle_s >= 0.0):
            return
        with self._lock:
            arm = with_chain if with_chain is None else bool(with_chain)
            if self._cycles[arm] == 0:
                self._cycle[arm] = cycle_s
            else:
                x = min(cycle_s, OUTLIER_FACTOR * self._cycle[arm])
                self._cycle[arm] += self.smoothing * (x - self._cycle[arm])
            self._cycles[arm] += 1

    def cycle_s(self, with_chain: bool | None) -> float | None:
        """The measured cycle of an arm (None before its first)."""
        with self._lock:
            return self._cycle[with_chain] if self._cycles[with_chain] else None

    def observe_gap(self, gap_s: float, after_right_exit: bool) -> None:
        """The time from a round's final verdict leaving to the next block arriving; ``after_right_exit``:
        that round had a computed exit equal to the final verdict."""
        if not (math.isfinite(gap_s) and gap_s >= 0.0):
            return
        with self._lock:
            key = bool(after_right_exit)
            old = self._gap[key]
            self._gap[key] = gap_s if self._gaps[key] == 0 else old + self.smoothing * (gap_s - old)
            self._gaps[key] += 1

    def summary(self) -> str:
        """One line: per exit, the share of rounds it was computed in and its rate of being right."""
        with self._lock:
            rounds = max(self.rounds, 1)
            return ", ".join(f"{l}: {self.computed[l] / rounds:.0%} computed, r {self._right[l]:.2f}"
                             for l in self.layers)


def best_set(history: Sequence[frozenset[int]], head_s: Mapping[int, float], saving,
             prior_rounds: int = PRIOR_ROUNDS) -> list[int]:
    """The exits maximising, over ``history`` (per round the exits that were right), the mean saving of
    the earliest right exit in the set minus the set's head costs; greedy forward selection (each step
    adds the exit that gains most, until none gains). No nesting assumed: an exit that is right where
    an earlier one is wrong is worth its rounds. The mean counts ``prior_rounds`` more rounds in which
    no exit was right, so that an exit right in the one probe seen so far does not look right always
    (a shrinkage towards "no hit" that fades as the history grows). [] when no exit gains."""
    layers = sorted(head_s)

    def value(chosen: list[int]) -> float:
        total = 0.0
        for right in history:
            first = next((l for l in chosen if l in right), None)
            total += saving(first) if first is not None else 0.0
        return total / (len(history) + prior_rounds) - sum(head_s[l] for l in chosen)

    chosen: list[int] = []
    best = 0.0
    while True:
        gains = [(value(sorted(chosen + [l])), l) for l in layers if l not in chosen]
        if not gains:
            return chosen
        v, l = max(gains)
        if v <= best:
            return chosen
        chosen, best = sorted(chosen + [l]), v


def best_chain(exits: Sequence[tuple[int, float, float]], saving) -> list[int]:
    """The chain of exits (layer, r, h) in layer order maximising Σ (r_k − r_prev)⁺·saving(l_k) − h_k
    (module docstring; r_prev: the largest r earlier in the chain), by dynamic programming over the
    chain's last exit; [] when no chain gains."""
    best: list[tuple[float, list[int], float]] = []  # per exit j: (value, best chain ending at j, its coverage)
    for layer, r, h in exits:
        gain = saving(layer)
        value, chain, covered = r * gain - h, [layer], r
        for prev_value, prev_chain, prev_r in best:
            v = prev_value + max(0.0, r - prev_r) * gain - h
            if v > value:
                value, chain, covered = v, prev_chain + [layer], max(r, prev_r)
        best.append((value, chain, covered))
    top = max(best, key=lambda e: e[0], default=None)
    return top[1] if top is not None and top[0] > 0.0 else []
