"""γ policies of the robot's decoder: how many tokens to draft next round, or none at all.

``FixedGamma`` always drafts γ (SD, FSD, DSSD, PicoSpec as published). ``AdaptiveGamma`` is TK-SLT's
online ODLD + AS² (Zheng & Yang, Algorithms 1-2; ``spec.draft_length``): γ* per round from measured
α, b = T_V/T_LLM and c = T_SLM/T_LLM, and a hand-over to cloud-only decoding when S*_inf ≤ 1.

The robot's decoder keeps one ``AdaptiveGamma`` per mode for its whole life (``edge.long_lived``), so
its estimates carry over from one decision to the next instead of restarting from the priors.

Coming back from the cloud (probing). A decision that AS² hands to the cloud is decoded cloud-only in
chunks (``cloud_chunk``), not to its end: AS² alone would never leave cloud-only decoding (a
standalone round measures no α, no link: the controller's caveat). The rule: after
``DraftLengthController.probe_spacing(probe_budget)`` cloud-only tokens, the next round speculates
anyway (a probe, γ*), whatever AS² says, and its measurements update α, T_SLM, the link's
propagation and per-byte cost; if AS² then favours speculation the decision goes on speculating,
otherwise it goes back to the cloud for another spacing. The spacing is the probe's expected excess
cost over the cloud-only tokens it replaces, divided by ``probe_budget`` (2 %) of a cloud-only token:
probing costs at most about that share of the cloud-only time, so probes are frequent near
break-even and rare where speculation is hopeless. Cloud-only chunks report the cloud's time per
token (``observe_cloud``), the cost a round must beat. Every γ schedule is exact: the verifier
accepts or resamples each draft whatever its length, and cloud-only decoding is the target itself.

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

PROBE_BUDGET = 0.02  # share of the cloud-only decoding's time that probe rounds may cost
MIN_T_VERIFY_S = 1e-6  # a verdict reporting no server time still divides b and c


@dataclass(frozen=True)
class RoundTiming:
    """One draft–verify round as the controller sees it (TK-SLT eq. 5)."""

    accepted: int  # δ
    drafted: int  # γ of the block verified
    t_token_s: float  # T_SLM: measured draft time per token of the source that produced the block
    round_trip_s: float  # from the block leaving to its final verdict
    t_verify_s: float  # T_LLM: the server's compute time for the block
    bytes_sent: int | None = None  # the block's bytes on the uplink (None: not counted)

    @property
    def t_transmit_token_s(self) -> float:
        """T_V: the round trip less T_LLM, per draft token."""
        return max(0.0, self.round_trip_s - self.t_verify_s) / self.drafted


class GammaPolicy(Protocol):
    def begin(self, gamma: int) -> None:
        """A decision starts; ``gamma`` is its configured γ."""

    def gamma(self) -> int | None:
        """γ for the next round; None: speculation does not pay, the cloud decodes ``cloud_chunk()`` tokens."""

    def observe(self, timing: RoundTiming) -> None:
        """A round's verdict arrived."""

    def cloud_chunk(self) -> int | None:
        """After ``gamma()`` said None: how many tokens the cloud decodes before γ is asked again
        (None: the rest of the decision)."""

    def observe_cloud(self, tokens: int, compute_s: float) -> None:
        """The cloud decoded ``tokens`` tokens alone in ``compute_s`` seconds of its compute."""


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

    def cloud_chunk(self) -> int | None:
        return None

    def observe_cloud(self, tokens: int, compute_s: float) -> None:
        pass


class AdaptiveGamma:
    """ODLD picks γ* per round, AS² may hand over to the cloud (TK-SLT Algorithms 1-2, with the link's
    propagation apart), and a probe round comes after ``probe_spacing`` cloud-only tokens (module
    docstring). Not thread-safe: one decision at a time."""

    def __init__(self, controller: DraftLengthController, probe_budget: float = PROBE_BUDGET) -> None:
        if not 0.0 < probe_budget < 1.0:
            raise ValueError(f"probe budget must be in (0, 1), got {probe_budget}")
        self.controller = controller
        self.probe_budget = probe_budget
        self.since_probe = 0  # cloud-only tokens since the last speculative round
        self.probes = 0  # speculative rounds AS² alone would not have run
        self.hand_overs = 0  # times γ() handed the decision to the cloud

    def begin(self, gamma: int) -> None:
        pass

    def gamma(self) -> int | None:
        choice = self.controller.choice()
        if choice.use_speculation:
            self.since_probe = 0
            return choice.gamma
        if self.since_probe >= self.controller.probe_spacing(self.probe_budget):
            self.since_probe = 0
            self.probes += 1
            return choice.gamma
        self.hand_overs += 1
        return None

    def cloud_chunk(self) -> int | None:
        return max(1, self.controller.probe_spacing(self.probe_budget) - self.since_probe)

    def observe(self, timing: RoundTiming) -> None:
        self.controller.observe(timing.accepted, timing.drafted, timing.t_token_s, timing.t_transmit_token_s,
                                max(timing.t_verify_s, MIN_T_VERIFY_S), timing.bytes_sent)

    def observe_cloud(self, tokens: int, compute_s: float) -> None:
        self.since_probe += tokens
        if tokens > 0 and compute_s > 0:
            self.controller.observe_cloud(tokens, compute_s)
