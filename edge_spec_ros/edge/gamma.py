"""γ policies of the robot's decoder: how many tokens to draft next round, or none at all.

``FixedGamma`` always drafts γ (SD, FSD, DSSD, PicoSpec as published). ``AdaptiveGamma`` is TK-SLT's
online ODLD + AS² (Zheng & Yang, Algorithms 1-2; ``spec.draft_length``): γ* per round from measured
α, b = T_V/T_LLM and c = T_SLM/T_LLM, and a hand-over to cloud-only decoding when S*_inf ≤ 1.

The robot's decoder keeps one ``AdaptiveGamma`` per mode for its whole life (``edge.long_lived``), so
its estimates carry over from one decision to the next instead of restarting from the priors. AS²
alone would then never leave cloud-only decoding once it chose it (a standalone round measures no α:
the controller's caveat), so after ``PROBE_AFTER`` decisions handed to the cloud in a row, the next
decision speculates its first round anyway (a probe) and the controller sees fresh evidence. Every γ schedule is exact: the
verifier accepts or resamples each draft whatever its length.

What a round tells the controller (``RoundTiming``): accepted δ of γ drafted; T_SLM per token as
measured by whichever source produced that round's draft — a fresh draft on the critical path, a
pre-draft worker (FSD), the block drafted ahead during the previous verification (PicoSpec) — so a
round served from a cache reports its own draft time, never a previous round's; T_V per token from
the round trip less the server's T_LLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from edge_spec_ros.spec.draft_length import DraftLengthController

PROBE_AFTER = 4  # decisions handed to the cloud in a row before the next one probes a speculative round
MIN_T_VERIFY_S = 1e-6  # a verdict reporting no server time still divides b and c


@dataclass(frozen=True)
class RoundTiming:
    """One draft–verify round as the controller sees it (TK-SLT eq. 5)."""

    accepted: int  # δ
    drafted: int  # γ of the block verified
    t_token_s: float  # T_SLM: measured draft time per token of the source that produced the block
    round_trip_s: float  # from the block leaving to its final verdict
    t_verify_s: float  # T_LLM: the server's compute time for the block

    @property
    def t_transmit_token_s(self) -> float:
        """T_V: the round trip less T_LLM, per draft token."""
        return max(0.0, self.round_trip_s - self.t_verify_s) / self.drafted


class GammaPolicy(Protocol):
    def begin(self, gamma: int) -> None:
        """A decision starts; ``gamma`` is its configured γ."""

    def gamma(self) -> int | None:
        """γ for the next round; None: speculation does not pay, hand the decision to the cloud."""

    def observe(self, timing: RoundTiming) -> None:
        """A round's verdict arrived."""


class FixedGamma:
    """γ as configured, every round."""

    def __init__(self) -> None:
        self._gamma = 1

    def begin(self, gamma: int) -> None:
        self._gamma = gamma

    def gamma(self) -> int | None:
        return self._gamma

    def observe(self, timing: RoundTiming) -> None:
        pass


class AdaptiveGamma:
    """ODLD picks γ* per round, AS² may hand over to the cloud (TK-SLT Algorithms 1-2), with a probe
    round after ``probe_after`` hand-overs in a row. Not thread-safe: one decision at a time."""

    def __init__(self, controller: DraftLengthController, probe_after: int = PROBE_AFTER) -> None:
        self.controller = controller
        self.probe_after = probe_after
        self.handed_over = 0  # decisions in a row handed to the cloud
        self._probe = False

    def begin(self, gamma: int) -> None:
        self._probe = self.handed_over >= self.probe_after

    def gamma(self) -> int | None:
        choice = self.controller.choice()
        if choice.use_speculation or self._probe:
            self._probe = False
            self.handed_over = 0
            return choice.gamma
        self.handed_over += 1
        return None

    def observe(self, timing: RoundTiming) -> None:
        self.controller.observe(timing.accepted, timing.drafted, timing.t_token_s, timing.t_transmit_token_s,
                                max(timing.t_verify_s, MIN_T_VERIFY_S))
