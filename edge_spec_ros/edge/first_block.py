"""The first block rides with the Open: a speculative decision starts drafting at once.

Without it a decision pays two round trips before its first token: the Open up, the prefill,
``Opened`` down (2T_c + upload + prefill), then only the first block is drafted (γT_p) and verified
(2T_c + T_q). The drafter holds the prompt from the start, so the robot drafts the first block of γ₀
tokens while the Open travels and is prefilled, and sends it as round 0's ``DraftBlock`` right behind
the Open. The verifier admits a session's requests in arrival order, so the block waits behind the
Open's prefill and is verified by the forward that continues it: the prefill caches every prompt
position but the last, and round 0's forward covers the last prompt position and the γ₀ draft
positions (logits at each, FSD's early exits too), streaming the verdict right after ``Opened``.

Why a separate message right behind the Open, not a field inside it: the Open leaves the moment the
decision starts and is never delayed by the drafting (γ₀T_p); the block follows as soon as it exists.
Inside the Open the prefill could not start before the block was drafted. And every verifier that
admits a draft block after its Open (protocol revision 1 on) verifies it: no capability is needed, a
server that predates this feature serves the same sequence of requests, and the tokens are the
same. Exactness is untouched: the block is a fresh draft of γ₀ from the prompt with the
position-indexed draws every other source uses (``edge.draft_sources``), and its verification is a
round's like any other.

The links that carry it: the ZeroMQ client (``edge.client.VerifierClient.open_with``), the bridge's
(``nodes.ros_link.RosVerifierLink.open_with``: the bridge holds a block that comes ahead of its OPEN on
the other topic) and the in-process one (``cloud.local_link``). Falls back to today's sequence (Open,
``Opened``, then the first draft): a link without ``open_with``, ``EdgeConfig.first_block`` off, and a γ
policy that hands the decision to the cloud from its start (AS²). A refused Open (a prompt too long
for the server's limits, a busy server) fails the decision with the Open's error, as before; the block
behind it is answered as belonging to no session, which the robot never reads.

γ₀ (``spec.pipeline.first_block_gamma``): the published fixed γ with a fixed-γ policy (the papers'
schedules, first round included); with the adaptive policy, from the times measured at the last
speculative decision (``OpenTimes``): at most what the Open's round trip hides (T_pre + γ₀T_p ≤ t_open,
T_pre the drafter's own prefill of the prompt), the rate of the first round maximised.

Legend: γ₀ — the first block's draft length; T_p, T_q, T_c — draft step, verification, one-way link
time; t_open — the Open's round trip to ``Opened``; T_pre — the drafter's prefill of the prompt; α —
acceptance rate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import astuple, dataclass

from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.edge.config import EdgeConfig
from edge_spec_ros.edge.draft_sources import SourcedDraft
from edge_spec_ros.edge.gamma import AdaptiveGamma, GammaPolicy
from edge_spec_ros.edge.round_link import RoundLink
from edge_spec_ros.spec.pipeline import OpenTimes, first_block_gamma

OPEN_TIMES_WEIGHT = 0.5  # weight of the newest decision in the measured OpenTimes


@dataclass(frozen=True)
class Opening:
    """An opened speculative decision: its session, its link for rounds and (sent with the Open) its
    first block, round 0's draft, whose ``sent_at`` is when both ``Opened`` and the block were there (the
    verifier starts on the block once it has prefilled and the block has come: its round trip counts
    from there)."""

    sid: bytes
    link: RoundLink
    first: SourcedDraft | None = None
    round_gamma: int | None = None  # with a first block: round 0's γ as answered at the opening (``FirstBlockPlan``)


@dataclass(frozen=True)
class FirstBlockPlan:
    """A first block to ride with the Open: its γ₀, and round 0's γ as the policy answered it at the
    opening (``AdaptiveGamma.opening``: asked once per decision, its answer is the first round's; what is
    drafted while the first block is verified takes it). None: the policy is asked at round 0 as at
    any round (a fixed-γ policy, which has no opening question)."""

    gamma0: int
    round_gamma: int | None = None


def first_gamma(config: EdgeConfig, policy: GammaPolicy, times: OpenTimes | None) -> FirstBlockPlan | None:
    """The decision's first block, or None when none should ride with the Open: the option is off, or
    the adaptive policy hands the decision to the cloud from its start (AS²: ``AdaptiveGamma.opening``,
    whose answer counts as the decision's first). Fixed γ: γ₀ = γ. Adaptive: γ₀ =
    ``first_block_gamma`` over the measured ``times`` and ODLD's current α, up to ``max_gamma``; ODLD's
    γ* until a decision has been measured."""
    if not config.first_block:
        return None
    if not isinstance(policy, AdaptiveGamma):
        return FirstBlockPlan(config.decode.gamma)
    answer = policy.opening(config.decode.max_new_tokens)
    if answer is None:
        return None
    if times is None:
        return FirstBlockPlan(policy.controller.choice().gamma, answer)
    return FirstBlockPlan(first_block_gamma(policy.controller.alpha, times, config.max_gamma), answer)


def observed_open_times(stats: DecodeStats, before: OpenTimes | None) -> OpenTimes | None:
    """The decision's start as ``stats`` measured it (the Open's round trip ``stats.prefill_s``, T_p,
    T_q, T_c), averaged with ``before`` (weight ``OPEN_TIMES_WEIGHT`` for the newest); ``before`` when
    the decision ran no speculative round. The Open's round trip is seen when ``Opened`` arrives, the
    first block drafted meanwhile on a thread of its own (``FirstBlockThread``). T_c: half the
    rounds' median overhead (round trip less the server's T_q), which for a block chained behind
    another also holds its wait at the verifier: an upper bound."""
    if not stats.rounds or not stats.draft_forwards or not stats.prefill_s:
        return before
    t_c = max(0.0, stats.overhead_median_s / 2)  # a round trip less the server's T_q may come out below 0
    new = OpenTimes(stats.prefill_s, stats.tp_s, stats.tq_s, t_c, stats.draft_prefill_s)
    if before is None:
        return new
    w = OPEN_TIMES_WEIGHT
    return OpenTimes(*(w * a + (1 - w) * b for a, b in zip(astuple(new), astuple(before))))


class FirstBlockThread:
    """The first block drafted and sent on a thread of its own (``draft(sid)``, started by ``start``:
    the ``first`` of a link's ``open_with``) while the decision's thread waits for ``Opened``, so that
    the Open's round trip t_open is seen when ``Opened`` comes, not once the drafting (T_pre + γ₀T_p)
    is over: drafted on the waiting thread, a first block longer than the Open's round trip measured
    its own drafting as t_open, and γ₀ grew with it. ``join`` returns what ``draft`` returned, or
    raises what it raised."""

    def __init__(self, draft: Callable[[bytes], tuple[RoundLink, SourcedDraft]]) -> None:
        self._draft = draft
        self._thread: threading.Thread | None = None
        self._result: tuple[RoundLink, SourcedDraft] | None = None
        self._error: BaseException | None = None

    def start(self, sid: bytes) -> None:
        self._thread = threading.Thread(target=self._run, args=(sid,), name="first-block", daemon=True)
        self._thread.start()

    def _run(self, sid: bytes) -> None:
        try:
            self._result = self._draft(sid)
        except BaseException as e:  # raised again on the decision's thread (join)
            self._error = e

    def join(self) -> tuple[RoundLink, SourcedDraft]:
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise RuntimeError("the first block was never started")
        return self._result
