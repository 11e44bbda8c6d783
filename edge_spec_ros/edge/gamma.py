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

Measured against cloud-only decoding (departure from TK-SLT, whose AS² compares modelled costs only).
The cost model assumes a verification costs T_LLM whatever γ, and a cloud-only token a·T_LLM with
a = 1 until the cloud has decoded alone. Where a verification of γ* + 1 positions costs several
cloud-only tokens (a CPU verifier, a small model; measured: 11 ms against 3 ms on the shipped pair
on loopback) the model favours speculation that loses (0.86× of cloud-only decoding). So the decoder
also reports what each regime costs at the robot: a round its wall time from the previous emission to
its own, per emitted token (``RoundTiming.wall_s``: drafting, the link and the verifier included; the
drafter's catching up with cloud-only tokens and its prefill are not, they are the cost of resuming
speculation, ``observe_resume``, which a probe pays once: counted in the wall, they made a probe look
dearer per token than speculating is, and on loopback AS² stayed with the cloud while fixed γ was
faster); a cloud-only chunk (``CloudWall``) a fixed cost, its first tokens' arrival (the
link's round trip, paid once per chunk), and a cost per further token (streamed). Speculation's cost
per token is the ratio of the rounds' moving-average wall time to their moving-average tokens, not a
moving average of each round's ratio: a round rejected at its first token emits one token for a whole
round's time, and averaged as a ratio that one round (34 ms a token against 5) had AS² hand
``loopback``'s FSD to the cloud for a whole run. A decision's last round, cut by a stop token or the
budget, is not counted (``edge.modes``). Handing r tokens to the cloud then costs (first + (r −
1)·per-token)/r per token, r the tokens the decision is expected to have left (``DecisionLength``): on
a slow link a short chunk is dear and a whole decision cheap. Once both regimes are measured, the
cheaper one decides; the model still picks γ*. While speculating, a short cloud-only chunk
(``CLOUD_PROBE_TOKENS``) measures the cloud once after ``FIRST_CLOUD_PROBE_ROUNDS`` rounds (unless it is
measured already: ``CloudCost``, the cloud's wall times, shared by a decoder's modes and measured by its
cloud-only decisions too), then after
a spacing of speculative tokens that keeps its excess within ``probe_budget``; probe rounds measure
speculation in the same way, so a regime measured worse is measured again now and then, both ways.
Without wall times (a caller that gives none), or with ``measured=False``, the model alone decides, as
in the paper.

What a round tells the controller (``RoundTiming``): accepted δ of γ drafted; T_SLM per token as
measured by whichever source produced that round's draft — a fresh draft on the critical path, a
pre-draft worker (FSD), the block drafted ahead during the previous verification (PicoSpec) — so a
round served from a cache reports its own draft time, never a previous round's; T_V per token from
the round trip less the server's T_LLM.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from edge_spec_ros.spec.draft_length import DraftLengthController, SpeculationChoice, round_cost
from edge_spec_ros.spec.pipeline import pipelined_gamma

PROBE_BUDGET = 0.02  # share of the cloud-only decoding's time that probe rounds may cost
MIN_T_VERIFY_S = 1e-6  # a verdict reporting no server time still divides b and c
CLOUD_PROBE_TOKENS = 4  # a cloud-only chunk that measures the cloud's wall time per token while speculating
FIRST_CLOUD_PROBE_ROUNDS = 2  # speculative rounds before the first cloud probe (the cloud not measured yet)
WALL_SMOOTHING = 0.2  # weight of the newest measurement in each regime's wall time per token
# speculative rounds whose wall times measure speculation's cost; one round's is noise (on loopback a round
# of γ = 10 that kept 4 cost 11 ms a token where the decision's rounds averaged 5)
WALL_ROUNDS = 4
OVERHEAD_ROUNDS = 16  # rounds whose median overhead (round trip less T_LLM: 2T_c) prices a pipelined γ
HORIZON_TOKENS = 32  # tokens a hand-over to the cloud is priced over when the caller does not say


@dataclass(frozen=True)
class RoundTiming:
    """One draft–verify round as the controller sees it (TK-SLT eq. 5)."""

    accepted: int  # δ
    drafted: int  # γ of the block verified
    t_token_s: float  # T_SLM: measured draft time per token of the source that produced the block
    round_trip_s: float  # from the block leaving to its final verdict
    t_verify_s: float  # T_LLM: the server's compute time for the block
    bytes_sent: int | None = None  # the block's bytes on the uplink (None: not counted)
    wall_s: float | None = None  # from the previous emission to this round's (None: not measured)
    emitted: int = 0  # tokens this round emitted (accepted + the verifier's own)
    link_measured: bool = True  # False: the round trip says nothing of the link (a first block that rode with
    # the Open waited for the prefill: edge.first_block), so only α and T_SLM, T_LLM are learnt from it

    @property
    def t_transmit_token_s(self) -> float:
        """T_V: the round trip less T_LLM, per draft token."""
        return max(0.0, self.round_trip_s - self.t_verify_s) / self.drafted


@dataclass(frozen=True)
class CloudWall:
    """A cloud-only chunk's wall time at the robot, in two parts: a fixed cost per chunk (the Generate's
    way up and the first tokens' way down: the link's round trip) and a cost per further token (the
    cloud's decoding, streamed)."""

    first_s: float  # from the Generate leaving to its first tokens' arrival
    first_count: int  # tokens in that first arrival
    rest_s: float  # from then to the chunk's last token
    rest_count: int  # the tokens after the first arrival


def _ema(old: float, new: float) -> float:
    return new if old == 0.0 else (1.0 - WALL_SMOOTHING) * old + WALL_SMOOTHING * new


@dataclass
class CloudCost:
    """The cloud-only regime's wall times at the robot (EMAs of its ``CloudWall`` measurements): a chunk's
    fixed cost, its first tokens' arrival, and its cost per further token. The cloud's and the link's,
    not a mode's: the adaptive policies of all modes of one decoder share one (``edge.long_lived``), and
    cloud-only decisions (AR) measure it too, so a mode finds the cloud measured once any decision has
    measured it instead of spending a cloud probe of its own."""

    first_s: float = 0.0  # a chunk's fixed cost (EMA; 0: not measured)
    token_s: float = 0.0  # its cost per further token (EMA; 0: not measured)

    def observe(self, wall: CloudWall) -> None:
        if wall.first_count > 0 and wall.first_s > 0:
            self.first_s = _ema(self.first_s, wall.first_s)
            if wall.rest_count > 0 and wall.rest_s > 0:
                self.token_s = _ema(self.token_s, wall.rest_s / wall.rest_count)

    def measured(self) -> bool:
        return self.first_s > 0.0 and self.token_s > 0.0

    def per_token(self, tokens: int) -> float:
        """Wall time per token of handing ``tokens`` tokens to the cloud (its fixed cost shared)."""
        tokens = max(1, tokens)
        return (self.first_s + (tokens - 1) * self.token_s) / tokens


@dataclass
class DecisionLength:
    """How many tokens a decision emits before its stop token (running mean over the first decisions,
    then an EMA), over the decoder's decisions of every mode. A hand-over prices the cloud over the
    tokens a decision is expected to have left, not over its budget: with the budget (48 tokens)
    ``wifi``'s decisions of 25-34 tokens looked long enough for the cloud's round trip to pay, and
    PicoSpec handed two of them to the cloud, 0.55 s against 0.49. A decision that ran to its budget
    says only that decisions run at least that long, and the budget caps ``left`` anyway: not counted."""

    mean: float = 0.0  # tokens (0: no decision yet)
    decisions: int = 0

    def observe(self, tokens: int, budget: int) -> None:
        if tokens >= budget:
            return
        self.decisions += 1
        self.mean += max(WALL_SMOOTHING, 1.0 / self.decisions) * (tokens - self.mean)

    def left(self, budget: int, remaining: int) -> int:
        """Tokens a decision with ``budget`` that has ``remaining`` of it left is expected to emit still."""
        if self.decisions == 0:
            return remaining
        return max(1, min(remaining, round(self.mean) - (budget - remaining)))


class GammaPolicy(Protocol):
    def begin(self, gamma: int, budget: int | None = None) -> None:
        """A decision starts; ``gamma`` is its configured γ, ``budget`` its token budget."""

    def gamma(self, remaining: int | None = None) -> int | None:
        """γ for the next round; None: speculation does not pay, the cloud decodes ``cloud_chunk()`` tokens.
        ``remaining``: tokens the decision may still emit (None: unknown)."""

    def ahead(self) -> int:
        """γ of a block drafted while the round before it is verified (PicoSpec's), by the estimates as
        they are: no hand-over, no probe (the decision is speculating: its next block is on the link)."""

    def observe(self, timing: RoundTiming) -> None:
        """A round's verdict arrived."""

    def cloud_chunk(self) -> int | None:
        """After ``gamma()`` said None: how many tokens the cloud decodes before γ is asked again
        (None: the rest of the decision)."""

    def observe_cloud(self, tokens: int, compute_s: float, wall: CloudWall | None = None) -> None:
        """The cloud decoded ``tokens`` tokens alone in ``compute_s`` seconds of its compute; ``wall``:
        how long they took at the robot (None: not measured)."""

    def observe_resume(self, seconds: float) -> None:
        """Speculation resumed after cloud-only chunks: the drafter caught up with their tokens (and
        prefilled the prompt, if the decision began in the cloud) in ``seconds``."""


class FixedGamma:
    """γ as configured, every round."""

    def __init__(self) -> None:
        self._gamma = 1

    def begin(self, gamma: int, budget: int | None = None) -> None:
        self._gamma = gamma

    def gamma(self, remaining: int | None = None) -> int | None:
        return self._gamma

    def ahead(self) -> int:
        return self._gamma

    def observe(self, timing: RoundTiming) -> None:
        pass

    def cloud_chunk(self) -> int | None:
        return None

    def observe_cloud(self, tokens: int, compute_s: float, wall: CloudWall | None = None) -> None:
        pass

    def observe_resume(self, seconds: float) -> None:
        pass


class AdaptiveGamma:
    """ODLD picks γ* per round, AS² may hand over to the cloud (TK-SLT Algorithms 1-2, with the link's
    propagation apart), a probe round comes after ``probe_spacing`` cloud-only tokens, and once both
    regimes' wall times are measured the cheaper one decides, each re-measured now and then (module
    docstring). Not thread-safe: one decision at a time."""

    def __init__(self, controller: DraftLengthController, probe_budget: float = PROBE_BUDGET,
                 measured: bool = True, pipelined: bool = False, depth: int = 1,
                 cloud: CloudCost | None = None, lengths: DecisionLength | None = None) -> None:
        if not 0.0 < probe_budget < 1.0:
            raise ValueError(f"probe budget must be in (0, 1), got {probe_budget}")
        self.controller = controller
        self.pipelined = pipelined  # PicoSpec's modes: γ by the pipeline's model (``pipeline_gamma``)
        self.depth = depth  # and the blocks they draft ahead (``edge.pipeline.Pipeline.depth``)
        self.overheads: deque[float] = deque(maxlen=OVERHEAD_ROUNDS)  # round trip less T_LLM of recent rounds
        self.probe_budget = probe_budget
        self.use_walls = measured  # False: the model alone decides (TK-SLT's AS² as published)
        self.since_probe = 0  # cloud-only tokens since the last speculative round
        self.since_cloud = 0  # tokens emitted by speculative rounds since the last cloud-only chunk
        self.spec_rounds = 0  # speculative rounds with a wall time
        self.probes = 0  # speculative rounds AS² alone would not have run
        self.cloud_probes = 0  # cloud-only chunks run to measure the cloud while speculation was chosen
        self.hand_overs = 0  # times γ() handed the decision to the cloud
        self.spec_s = 0.0  # wall time per emitted token, speculating (0: not measured): the ratio of
        self._spec_wall_s = 0.0  # the rounds' wall times (EMA)
        self._spec_tokens = 0.0  # to their emitted tokens (EMA)
        self.cloud = CloudCost() if cloud is None else cloud  # cloud-only chunks' wall times, maybe shared
        self.lengths = DecisionLength() if lengths is None else lengths  # decisions' tokens, maybe shared
        self.budget: int | None = None  # the decision's token budget
        self.resume_s = 0.0  # resuming speculation after cloud-only chunks: the drafter's catch-up (EMA)
        self._probing_cloud = False
        self._handed_at_open = False  # ``opening`` said None: the decision's first ``gamma`` says it again

    def begin(self, gamma: int, budget: int | None = None) -> None:
        self.budget = budget

    def measured(self) -> bool:
        """Both regimes' wall times are known: they decide instead of the model."""
        return self.use_walls and self.spec_rounds >= WALL_ROUNDS and self.cloud.measured()

    def cloud_s(self, tokens: int = HORIZON_TOKENS) -> float:
        """Measured wall time per token of handing ``tokens`` tokens to the cloud (``CloudCost.per_token``)."""
        return self.cloud.per_token(tokens)

    def speculates(self, remaining: int | None = None, choice: SpeculationChoice | None = None) -> bool:
        """Whether speculation is the cheaper regime for ``remaining`` tokens of the budget (None:
        ``HORIZON_TOKENS``): by the measured wall times, over the tokens the decision is expected to
        have left (``DecisionLength``), once both are known, else by the model's ``choice`` (AS²; None: the
        controller's current one) — but with the cloud measured and speculation not (``WALL_ROUNDS``
        rounds), speculation, whose rounds measure it. A hand-over on the model's word lasts the model's
        probe spacing, and on ``loopback`` the estimates left by a four-token warm-up decision (α 0.88
        from its two rounds, c 0.84 from its first draft steps) handed whole decisions of every mode to
        the cloud, 1.3-1.5x slower than the paper's fixed γ."""
        if self.use_walls and self.spec_rounds < WALL_ROUNDS and self.cloud.measured():
            return True  # speculation's rounds measure it: the model's hand-over would go unchecked
        if not self.measured():
            return (choice or self.controller.choice()).use_speculation
        if remaining is None:
            return self.spec_s <= self.cloud_s(HORIZON_TOKENS)
        left = remaining if self.budget is None else self.lengths.left(self.budget, remaining)
        return self.spec_s <= self.cloud_s(left)

    def opening(self, remaining: int | None = None) -> int | None:
        """``gamma`` asked as a decision opens, before its first block is drafted: an int, a round rides
        with the Open (speculation, or AS²'s probe round); None, AS² hands the decision to the cloud, and
        its first ``gamma`` answers None again without counting twice. A cloud probe due now waits for a
        later round: it would only delay the decision's speculation, its first block and all."""
        self._handed_at_open = False  # a decision opened again after a lost link asks afresh
        answer = self._answer(remaining, cloud_probe=False)
        self._handed_at_open = answer is None
        return answer

    def gamma(self, remaining: int | None = None) -> int | None:
        if self._handed_at_open:
            self._handed_at_open = False
            return None
        return self._answer(remaining, cloud_probe=True)

    def _answer(self, remaining: int | None, cloud_probe: bool) -> int | None:
        choice = self.controller.choice()
        if self.speculates(remaining, choice):
            if cloud_probe and self._cloud_probe_due():
                self._probing_cloud = True
                self.cloud_probes += 1
                return None
            self.since_probe = 0
            return self.pipeline_gamma(choice.gamma)
        if self.since_probe >= self._spacing():
            self.since_probe = 0
            self.probes += 1
            return self.pipeline_gamma(choice.gamma)
        self.hand_overs += 1
        return None

    def ahead(self) -> int:
        return self.pipeline_gamma(self.controller.choice().gamma)

    def pipeline_gamma(self, serial: int) -> int:
        """γ of the next round: ODLD's ``serial`` γ*, or in a pipelined mode (once a round has measured
        T_q) ``spec.pipeline.pipelined_gamma`` over α, T_p = c·T_q, T_q and T_RTT = the median overhead of
        the recent rounds (round trip less T_LLM), which falls back on ``serial`` where no block drafted
        ahead fits a verification. Not ODLD's link estimates: a pipelined block's round
        trip counts from when it left, which for a chained block is before the previous verdict, and its
        payload is a few bytes, so the per-byte regression there is noise; the median is the link."""
        c = self.controller
        t_q = c.t_llm_s
        if not self.pipelined or t_q <= 0.0 or not self.overheads:
            return serial
        return pipelined_gamma(c.alpha, c.c * t_q, t_q, statistics.median(self.overheads), c.max_gamma,
                               depth=self.depth, serial=serial)

    def cloud_chunk(self) -> int | None:
        if self._probing_cloud:
            return CLOUD_PROBE_TOKENS
        return max(1, self._spacing() - self.since_probe)

    def observe(self, timing: RoundTiming) -> None:
        t_verify = max(timing.t_verify_s, MIN_T_VERIFY_S)
        if timing.link_measured:
            self.overheads.append(max(0.0, timing.round_trip_s - timing.t_verify_s))
            self.controller.observe(timing.accepted, timing.drafted, timing.t_token_s, timing.t_transmit_token_s,
                                    t_verify, timing.bytes_sent)
        else:  # the link's estimates stay as they are: T_V at the current b, no bytes for the regression
            self.controller.observe(timing.accepted, timing.drafted, timing.t_token_s, self.controller.b * t_verify,
                                    t_verify)
        if timing.wall_s is not None and timing.emitted > 0:
            weight = max(WALL_SMOOTHING, 1.0 / (self.spec_rounds + 1))  # a running mean over the first rounds
            self._spec_wall_s += weight * (timing.wall_s - self._spec_wall_s)
            self._spec_tokens += weight * (timing.emitted - self._spec_tokens)
            self.spec_s = self._spec_wall_s / self._spec_tokens
            self.spec_rounds += 1
            self.since_cloud += timing.emitted

    def observe_cloud(self, tokens: int, compute_s: float, wall: CloudWall | None = None) -> None:
        if self._probing_cloud:
            self._probing_cloud = False
        else:
            self.since_probe += tokens
        self.since_cloud = 0
        if tokens > 0 and compute_s > 0:
            self.controller.observe_cloud(tokens, compute_s)
        if wall is not None:
            self.cloud.observe(wall)

    def observe_resume(self, seconds: float) -> None:
        self.resume_s = _ema(self.resume_s, seconds)

    def _spacing(self) -> int:
        """Cloud-only tokens between two speculative probe rounds: by measured wall times when known (a
        probe round's E[tokens] at the speculative cost against the cloud's per-token cost, plus the
        drafter's catch-up to start it and the cloud's fixed cost paid again after it, within the
        budget of the cloud's time), else the model's ``probe_spacing``."""
        if not self.measured():
            return self.controller.probe_spacing(self.probe_budget)
        c = self.controller
        _, tokens = round_cost(c.alpha, c.choice().gamma, 0.0, 0.0)
        excess = tokens * max(0.0, self.spec_s - self.cloud.token_s) + self.resume_s \
            + max(0.0, self.cloud.first_s - self.cloud.token_s)
        return max(1, math.ceil(excess / (self.probe_budget * self.cloud.token_s)))

    def _cloud_probe_due(self) -> bool:
        """While speculating: whether a short cloud-only chunk should measure the cloud now. Only with
        wall times: first after ``FIRST_CLOUD_PROBE_ROUNDS`` rounds, then after a spacing of speculative
        tokens that keeps the probes' excess over speculating within the budget."""
        if not self.use_walls or self.spec_s <= 0.0:
            return False
        if not self.cloud.measured():  # once, early
            return self.cloud_probes == 0 and self.spec_rounds >= FIRST_CLOUD_PROBE_ROUNDS
        if not self.measured():  # speculation is still being measured
            return False
        excess = max(0.0, CLOUD_PROBE_TOKENS * (self.cloud_s(CLOUD_PROBE_TOKENS) - self.spec_s))
        spacing = max(CLOUD_PROBE_TOKENS, math.ceil(excess / (self.probe_budget * self.spec_s)))
        return self.since_cloud >= spacing
