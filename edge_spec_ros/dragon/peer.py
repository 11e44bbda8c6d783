"""One side of DRAGON's Speculative Aggregation over messages (Liu et al. 2025, §4.2, Algorithm 1, §5).

Legend: l ≡ robot, r ≡ cloud (fixed labels, dragon/aggregation.py); t — generated position; x^s_t,
p^s_t, log h̃^s_t — side s's draft, locally aggregated distribution and weight; x_t — target token;
S^l, S^r — acceptance flags; η^l — the robot's side weight; epoch — a side's rejections so far.

``DragonPeer`` is the protocol state of one side, pure (no sockets, no threads, an injectable
clock): ``draft()`` decodes the next draft into the side's Draft Queue, ``aggregate()`` runs
Algorithm 1 when this side is the aggregator and both queue fronts are there, ``receive(msg)``
applies a message of the other side; each returns the messages (dragon/wire.py) to send. The robot
(dragon/robot.py) and the cloud (dragon/session.py) run the same class over their own model and
documents; ``run_interleaved`` drives two peers through encoded frames in a random but seeded order
of events (the tests' stand-in for the two sides' relative speeds and the network).

Exactness (the reason for each rule below):
  * Every draw is u(seed, stream, t) and a draft at t is only aggregated when it was decoded over
    the committed prefix x_<t: a rejected side clears its queue and rolls its KV caches back, the
    aggregator drops that side's queued drafts and, by epoch, those still in flight. So the output
    equals DRDG/TW (dragon/aggregation.drdg_tw) token for token for every interleaving, queue depth,
    payload and aggregator placement.
  * p^s_t travels as float32; each side drafts from the float32-rounded p^s_t (``wire_precision``),
    so both sides and the reference work on the same numbers. Departure: the paper does not say how
    distributions travel; the rounding moves p_t by < 1e-7 relative.
  * payload "on_demand" (exact): the aggregator decides from x^o_t, log h̃^o_t and
    p^o_t(x^o_t) alone when that determines x_t, and asks the drafting side for what is missing
    otherwise. Greedy: equal drafts are the target (both argmaxes at c make c the argmax of p_t; with
    float32 inputs and a weight ≥ ½ on one side the rounded mixture keeps the strict order); drafts
    that differ need all of p^o_t. Sampled: σ is drawn first; only the selected side's Sample(·)
    decides x_t; it needs p^o_t at one token (asked for alone when it is not the other side's draft)
    and all of p^o_t only after a rejection (the residual). The same comparisons on the same floats as
    dragon/aggregation.speculative_sample, so the token is identical.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from edge_spec_ros.dragon.aggregation import (
    CLOUD,
    ROBOT,
    AggregationResult,
    DragonStream,
    LocalAggregate,
    SideFunction,
    SideName,
    side_weights,
    speculative_aggregate,
)
from edge_spec_ros.dragon.scheduler import DragonProfiler, other
from edge_spec_ros.dragon.side import DraftingSide
from edge_spec_ros.dragon.wire import (
    DragonDist,
    DragonDistRequest,
    DragonDraft,
    DragonMessage,
    DragonOpen,
    DragonTarget,
    check_probs,
)
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig

GAMMA_L = 0.5  # γ^l of Algorithm 1 (§4.3)


MAX_TIMING_S = 3600.0  # the longest duration a side may report (decode_s, echo_hold_s, rtt_s)


def _timing(seconds: float) -> bool:
    return math.isfinite(seconds) and 0.0 <= seconds <= MAX_TIMING_S


def _check_timing(owner: str, name: str, seconds: float) -> None:
    if not _timing(seconds):
        raise DragonProtocolError(f"{owner}.{name} must be a duration in [0, {MAX_TIMING_S:.0f}] s, got {seconds}")


def _check_stamp(owner: str, name: str, stamp: float, none: float | None) -> None:
    """A clock reading of the aggregator's (finite, >= 0), or ``none`` where the field may be unset."""
    if not (math.isfinite(stamp) and (stamp >= 0.0 or stamp == none)):
        raise DragonProtocolError(f"{owner}.{name} must be a finite clock reading >= 0"
                                  + (f" or {none}" if none is not None else "") + f", got {stamp}")


class DragonProtocolError(RuntimeError):
    """A message that breaks the protocol (wrong role, position or epoch where none can be stale)."""


@dataclass(frozen=True)
class PeerConfig:
    """What both sides must agree on for one decision (DragonOpen carries it)."""

    max_new_tokens: int
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(0.0))
    seed: int = 0
    stop_tokens: tuple[int, ...] = ()
    first_aggregator: SideName = ROBOT
    policy: str = "dragon"  # dragon: eq. 8; robot | cloud: fixed
    payload: str = "full"  # full | on_demand
    max_queue: int = 4

    @classmethod
    def from_open(cls, msg: DragonOpen) -> "PeerConfig":
        return cls(msg.max_new_tokens, SamplingConfig(msg.temperature), msg.seed, tuple(msg.stop_tokens),
                   ROBOT if msg.aggregator == ROBOT else CLOUD, msg.policy, msg.payload, msg.max_queue)


def wire_precision(side: SideFunction) -> SideFunction:
    """p^s_t as the other side receives it: rounded to float32 (kept in float64 for the maths)."""

    def rounded(context: Sequence[int]) -> LocalAggregate:
        agg = side(context)
        return LocalAggregate(probs=agg.probs.float().double(), log_h=float(agg.log_h))

    return rounded


FULL = -1  # partial_aggregate's answer "p^o_t is needed in full"


def partial_aggregate(x_l: int, x_r: int, log_h_l: float, log_h_r: float, known: SideName,
                      p_known: torch.Tensor, p_other_at: dict[int, float], rng: PositionalRNG, position: int,
                      sampling: SamplingConfig) -> tuple[int | None, int]:
    """Algorithm 1's x_t when only side ``known``'s p is at hand and of the other side's p^o only the
    values ``p_other_at`` (token → p^o_t(token); its draft's at least). Returns (x_t, 0) when that
    decides it, else (None, what is needed): a token whose p^o_t value is missing, or FULL (greedy
    drafts that differ; a rejection, whose residual needs all of p^o_t). Same floats and comparisons
    as dragon/aggregation.speculative_aggregate, so a decided token is its token."""
    if sampling.greedy:
        return (x_l, 0) if x_l == x_r else (None, FULL)
    eta_l, eta_r = side_weights(log_h_l, log_h_r)
    selected: SideName = ROBOT if rng.uniform(DragonStream.SELECT, position) <= GAMMA_L else CLOUD  # type: ignore[arg-type]
    x = x_l if selected == ROBOT else x_r
    if selected == known:  # Sample(x, p_known, p_other, η_other): needs p_other(x)
        if x not in p_other_at:
            return None, x
        pa, pb = float(p_known[x]), p_other_at[x]
    else:  # Sample(x, p_other, p_known, η_known)
        pa, pb = p_other_at[x], float(p_known[x])
    eta = eta_r if selected == ROBOT else eta_l
    stream = DragonStream.ACCEPT_ROBOT if selected == ROBOT else DragonStream.ACCEPT_CLOUD
    if pa > pb and rng.uniform(stream, position) * pa < eta * (pa - pb):  # type: ignore[arg-type]
        return None, FULL  # rejected: the residual norm(max(0, p_b − p_a)) needs all of p^o
    return x, 0


@dataclass(frozen=True)
class DragonTrace:
    """A decision as one side saw it: x_t, S^l, S^r, η^l (aggregator positions only), the side that
    aggregated each position, and this side's counters."""

    tokens: tuple[int, ...]
    accept_robot: tuple[bool, ...]
    accept_cloud: tuple[bool, ...]
    aggregator: tuple[str, ...]
    drafted: int
    discarded: int
    rollbacks: int
    dropped: int  # stale drafts of the other side dropped (epoch, or this side not aggregating)
    requests: int  # DragonDistRequests sent (payload on_demand)


class DragonPeer:
    """One side's protocol state: its Draft Queue, the other side's drafts when aggregating, the
    committed tokens, both sides' epochs and a profiler for the scheduler."""

    def __init__(self, name: SideName, next_distribution: SideFunction, config: PeerConfig, vocab_size: int,
                 rollback: Callable[[int], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 placement: Callable[[int, AggregationResult], SideName] | None = None,
                 profiler: DragonProfiler | None = None) -> None:
        if config.max_queue < 1 or config.max_new_tokens < 1:
            raise ValueError("max_queue and max_new_tokens must be >= 1")
        self.name, self.other = name, other(name)
        self.config, self.vocab_size, self.clock, self.placement = config, vocab_size, clock, placement
        self.rng = PositionalRNG(config.seed)
        self.side = DraftingSide(name, wire_precision(next_distribution), [], self.rng, config.sampling, rollback)
        self.aggregator: SideName = config.first_aggregator
        self.remote: deque[DragonDraft] = deque()
        self.fetched: torch.Tensor | None = None  # p^o_t in full for the remote front (on_demand)
        self.values: dict[int, float] = {}  # single values p^o_t(x) fetched for the remote front
        self.pending: int | None = None  # position of an unanswered DragonDistRequest
        self._asked = FULL  # ... and what it asked for (a token's value, or FULL)
        self.epochs = {ROBOT: 0, CLOUD: 0}
        self.profiler = profiler or DragonProfiler(c_dec={ROBOT: 0.0, CLOUD: 0.0}, rtt=0.0)
        self.tokens: list[int] = []
        self.accept_robot: list[bool] = []
        self.accept_cloud: list[bool] = []
        self.where: list[SideName] = []
        self.commit_times: list[float] = []  # this side's clock when it learned each x_t
        self.dropped = 0
        self.requests = 0
        self._stamp: tuple[float, float] | None = None  # (target stamp, when received) to echo
        self._answered: set[tuple[int, int, int]] = set()  # (position, epoch, token) of requests answered

    # ------------------------------------------------------------------ state

    @property
    def is_aggregator(self) -> bool:
        return self.aggregator == self.name

    @property
    def done(self) -> bool:
        return len(self.tokens) >= self.config.max_new_tokens or bool(
            self.tokens and self.tokens[-1] in self.config.stop_tokens)

    def can_draft(self) -> bool:
        side = self.side
        if self.done or len(side.queue) >= self.config.max_queue or side.next_position >= self.config.max_new_tokens:
            return False
        return not (side.queue and side.queue[-1].token in self.config.stop_tokens)  # nothing past a stop draft

    def can_aggregate(self) -> bool:
        return (self.is_aggregator and not self.done and self.pending is None and bool(self.side.queue)
                and bool(self.remote))

    def trace(self) -> DragonTrace:
        return DragonTrace(tuple(self.tokens), tuple(self.accept_robot), tuple(self.accept_cloud),
                           tuple(self.where), self.side.drafted, self.side.discarded, self.side.rollbacks,
                           self.dropped, self.requests)

    # ------------------------------------------------------------------ drafting

    def draft(self) -> list[DragonMessage]:
        """Decode x^s_t over this side's context into its queue; send it unless this side aggregates."""
        start = self.clock()
        entry = self.side.draft()
        seconds = self.clock() - start
        self.profiler.observe_decode(self.name, seconds)
        return [] if self.is_aggregator else [self._draft_message(entry, seconds)]

    def _draft_message(self, entry, seconds: float) -> DragonDraft:
        echo, hold = -1.0, 0.0
        if self._stamp is not None:
            echo, hold = self._stamp[0], self.clock() - self._stamp[1]
            self._stamp = None
        full = self.config.payload == "full"
        return DragonDraft(position=entry.position, epoch=self.epochs[self.name], token=entry.token,
                           log_h=entry.dist.log_h,
                           probs=entry.dist.probs.float().numpy() if full else None,
                           p_token=-1.0 if full else float(entry.dist.probs[entry.token]),
                           decode_s=seconds, echo_stamp=echo, echo_hold_s=hold)

    # ------------------------------------------------------------------ receiving

    def receive(self, msg: DragonMessage) -> list[DragonMessage]:
        if isinstance(msg, DragonDraft):
            self._on_draft(msg)
            return []
        if isinstance(msg, DragonTarget):
            self._on_target(msg)
            return []
        if isinstance(msg, DragonDistRequest):
            return [self._on_request(msg)]
        if isinstance(msg, DragonDist):
            self._on_dist(msg)
            return []
        raise DragonProtocolError(f"{type(msg).__name__} is not a DRAGON decoding message")

    def _on_draft(self, msg: DragonDraft) -> None:
        self._check_draft(msg)  # a value no honest side sends is refused even in a draft dropped below
        if msg.epoch > self.epochs[self.other]:
            raise DragonProtocolError(f"DragonDraft.epoch {msg.epoch}: the sender has had only "
                                      f"{self.epochs[self.other]} rejections")
        if not self.is_aggregator or self.done or msg.epoch < self.epochs[self.other]:
            self.dropped += 1  # sent before a switch, or decoded before a rejection: stale
            return
        expected = len(self.tokens) + len(self.remote)
        if msg.position != expected:
            raise DragonProtocolError(f"DragonDraft.position: draft for position {msg.position}, expected {expected}")
        if len(self.remote) >= self.config.max_queue:  # an honest side never has more in flight
            raise DragonProtocolError(f"DragonDraft.position: more than max_queue = {self.config.max_queue} "
                                      "drafts ahead")
        if msg.echo_stamp >= 0.0:
            rtt = self.clock() - msg.echo_stamp - msg.echo_hold_s
            if _timing(rtt):  # else the echoed stamp is no target of this side's: ignored
                self.profiler.observe_rtt(rtt)
        self.profiler.observe_decode(self.other, msg.decode_s)
        self.remote.append(msg)

    def _check_draft(self, msg: DragonDraft) -> None:
        if msg.epoch < 0:
            raise DragonProtocolError(f"DragonDraft.epoch must be >= 0, got {msg.epoch}")
        if not 0 <= msg.token < self.vocab_size:
            raise DragonProtocolError(f"DragonDraft.token {msg.token} is outside the vocabulary [0, {self.vocab_size})")
        if not math.isfinite(msg.log_h):
            raise DragonProtocolError("DragonDraft.log_h (log h̃^s_t) must be finite")
        if self.config.payload == "full":
            if msg.p_token != -1.0:
                raise DragonProtocolError("DragonDraft.p_token: payload full sends p^s_t in probs, p_token -1")
            try:
                check_probs(msg.probs, self.vocab_size)
            except ValueError as exc:
                raise DragonProtocolError(f"DragonDraft.probs: {exc}") from None
        else:
            if msg.probs is not None:
                raise DragonProtocolError("DragonDraft.probs: payload on_demand sends p^s_t(x^s_t) only (p_token)")
            if not 0.0 < msg.p_token <= 1.0 + 1e-6:
                raise DragonProtocolError(f"DragonDraft.p_token: p^s_t(x^s_t) = {msg.p_token} for a drafted token")
        _check_timing("DragonDraft", "decode_s", msg.decode_s)
        _check_stamp("DragonDraft", "echo_stamp", msg.echo_stamp, none=-1.0)
        _check_timing("DragonDraft", "echo_hold_s", msg.echo_hold_s)

    def _on_target(self, msg: DragonTarget) -> None:
        if self.is_aggregator:
            raise DragonProtocolError("a target token sent to the aggregator")
        t = len(self.tokens)
        if msg.position != t or not self.side.queue or self.side.queue[0].position != t:
            raise DragonProtocolError(f"DragonTarget.position: target for position {msg.position}, expected {t} "
                                      "with this side's draft")
        if not 0 <= msg.token < self.vocab_size:
            raise DragonProtocolError(f"DragonTarget.token {msg.token} is outside the vocabulary "
                                      f"[0, {self.vocab_size})")
        own_accept = msg.accept_robot if self.name == ROBOT else msg.accept_cloud
        if own_accept != (self.side.queue[0].token == msg.token):
            raise DragonProtocolError(f"DragonTarget.accept_{self.name}: the acceptance flag disagrees with the "
                                      "draft and the target token")
        _check_stamp("DragonTarget", "stamp", msg.stamp, none=None)
        _check_timing("DragonTarget", "decode_s", msg.decode_s)
        _check_timing("DragonTarget", "rtt_s", msg.rtt_s)
        # The other side's flag (accept_cloud at the robot, accept_robot at the cloud) concerns the
        # aggregator's own draft, which this side never saw: taken as sent.
        self._commit(msg.token, msg.accept_robot, msg.accept_cloud, self.other)
        if msg.decode_s > 0.0:  # 0: the aggregator has no estimate yet
            self.profiler.observe_decode(self.other, msg.decode_s)
        if msg.rtt_s > 0.0:
            self.profiler.rtt = msg.rtt_s
        self._stamp = (msg.stamp, self.clock())
        if msg.switch:
            self.aggregator = self.name
            self.remote.clear()
            self.fetched, self.values, self.pending = None, {}, None

    def _on_request(self, msg: DragonDistRequest) -> DragonDist:
        # The aggregator asks only about the next position, at most once per token or in full: anything
        # else would let a peer make this side send V floats per 57-byte request, again and again.
        if not FULL <= msg.token < self.vocab_size:
            raise DragonProtocolError(f"DragonDistRequest.token {msg.token}: -1 (all of p^s_t) or an id in "
                                      f"[0, {self.vocab_size})")
        if msg.position != len(self.tokens):
            raise DragonProtocolError(f"DragonDistRequest.position: p^s_t requested for position {msg.position}, "
                                      f"the next is {len(self.tokens)}")
        if msg.epoch != self.epochs[self.name]:
            raise DragonProtocolError(f"DragonDistRequest.epoch {msg.epoch}: this side's drafts are of epoch "
                                      f"{self.epochs[self.name]}")
        key = (msg.position, msg.epoch, msg.token)
        if key in self._answered:
            raise DragonProtocolError(f"DragonDistRequest: p^s_t at position {msg.position} asked for twice")
        self._answered.add(key)
        for entry in self.side.queue:
            if entry.position == msg.position:
                probs = entry.dist.probs.float().numpy()
                if msg.token == FULL:
                    return DragonDist(msg.position, msg.epoch, probs)
                return DragonDist(msg.position, msg.epoch, probs[msg.token:msg.token + 1].copy(), token=msg.token)
        raise DragonProtocolError(f"DragonDistRequest.position: no draft of position {msg.position} is queued")

    def _on_dist(self, msg: DragonDist) -> None:
        if self.pending is None:
            raise DragonProtocolError("DragonDist: a distribution nobody asked for")
        for name, value, wanted in (("position", msg.position, self.pending),
                                    ("epoch", msg.epoch, self.epochs[self.other]), ("token", msg.token, self._asked)):
            if value != wanted:
                raise DragonProtocolError(f"DragonDist.{name} {value}: the request was for {wanted}")
        if msg.token == FULL:
            try:
                check_probs(msg.probs, self.vocab_size)
            except ValueError as exc:
                raise DragonProtocolError(f"DragonDist.probs: {exc}") from None
            self.fetched = torch.from_numpy(np.array(msg.probs, dtype=np.float32)).double()
        else:
            if msg.probs.shape != (1,) or not 0.0 <= float(msg.probs[0]) <= 1.0 + 1e-6:
                raise DragonProtocolError("DragonDist.probs: a single p^s_t value must be one number in [0, 1]")
            self.values[msg.token] = float(msg.probs[0])
        self.pending = None

    # ------------------------------------------------------------------ aggregating

    def aggregate(self) -> list[DragonMessage]:
        """Algorithm 1 at t = len(tokens) (the aggregator only; ``can_aggregate()`` must hold)."""
        if not self.can_aggregate():
            raise DragonProtocolError("nothing to aggregate")
        t = len(self.tokens)
        own, rem = self.side.queue[0], self.remote[0]
        if own.position != t or rem.position != t:
            raise DragonProtocolError(f"queue fronts at {own.position} and {rem.position}, expected {t}")
        p_rem = self.fetched if self.fetched is not None else (
            None if rem.probs is None else torch.from_numpy(np.array(rem.probs, dtype=np.float32)).double())
        x = {self.name: own.token, self.other: rem.token}
        log_h = {self.name: own.dist.log_h, self.other: rem.log_h}
        if p_rem is not None:
            dists = {self.name: own.dist, self.other: LocalAggregate(p_rem, rem.log_h)}
            result = speculative_aggregate(x[ROBOT], dists[ROBOT], x[CLOUD], dists[CLOUD], self.rng, t,
                                           self.config.sampling, GAMMA_L)
            token = result.token
        else:
            token, need = partial_aggregate(x[ROBOT], x[CLOUD], log_h[ROBOT], log_h[CLOUD], self.name,
                                            own.dist.probs, {rem.token: rem.p_token, **self.values}, self.rng, t,
                                            self.config.sampling)
            if token is None:
                self.pending, self._asked = t, need
                self.requests += 1
                return [DragonDistRequest(t, rem.epoch, need)]
            result = AggregationResult(token, x[ROBOT] == token, x[CLOUD] == token,
                                       side_weights(log_h[ROBOT], log_h[CLOUD])[0])
        accept = {ROBOT: result.accept_robot, CLOUD: result.accept_cloud}
        self.remote.popleft()
        self.fetched, self.values = None, {}
        if not accept[self.other]:
            self._drop_remote_queue()  # decoded after its rejected draft
        self._commit(token, result.accept_robot, result.accept_cloud, self.name)
        nxt = self._next_aggregator(t, result)
        switch = nxt != self.name and not self.done
        out: list[DragonMessage] = [DragonTarget(
            t, token, result.accept_robot, result.accept_cloud, switch, stamp=self.clock(),
            decode_s=self.profiler.c_dec[self.name], rtt_s=self.profiler.rtt)]
        if switch:
            self.aggregator = self.other
            self.remote.clear()
            out += [self._draft_message(entry, self.profiler.c_dec[self.name]) for entry in self.side.queue]
        return out

    def _drop_remote_queue(self) -> None:
        self.remote.clear()

    def _next_aggregator(self, t: int, result: AggregationResult) -> SideName:
        if self.placement is not None:
            return self.placement(t, result)
        if self.config.policy == "dragon":
            return self.profiler.choose(self.name).side
        return ROBOT if self.config.policy == ROBOT else CLOUD

    def _commit(self, token: int, accept_robot: bool, accept_cloud: bool, aggregator: SideName) -> None:
        """x_t is decided: record it, settle this side's front draft (a rejection clears the queue and
        rolls the KV caches back, §4.2 steps 3-4) and count both sides' rejections (epochs)."""
        self.tokens.append(token)
        self.commit_times.append(self.clock())
        self.accept_robot.append(accept_robot)
        self.accept_cloud.append(accept_cloud)
        self.where.append(aggregator)
        self.side.settle(token, accept_robot if self.name == ROBOT else accept_cloud)
        for side, ok in ((ROBOT, accept_robot), (CLOUD, accept_cloud)):
            self.profiler.observe_acceptance(side, float(ok))
            if not ok:
                self.epochs[side] += 1


# --------------------------------------------------------------------------- a seeded two-peer driver


@dataclass
class FrameLog:
    """Every frame list a session sent, per direction, and byte counts per message type."""

    frames: list[tuple[str, list[bytes]]] = field(default_factory=list)  # (direction, frames)
    bytes: dict[str, int] = field(default_factory=lambda: {"up": 0, "down": 0})  # up: robot → cloud
    by_type: dict[str, int] = field(default_factory=dict)

    def add(self, direction: str, msg_name: str, frames: list[bytes]) -> None:
        n = sum(len(f) for f in frames)
        self.frames.append((direction, frames))
        self.bytes[direction] += n
        self.by_type[msg_name] = self.by_type.get(msg_name, 0) + n


def run_interleaved(robot: DragonPeer, cloud: DragonPeer, seed: int, session: bytes = bytes(16),
                    log: FrameLog | None = None, max_events: int = 1_000_000) -> None:
    """Drive two peers to the end of the decision in a random order of events (seeded): a side
    drafts, a side aggregates, or the oldest message of one direction is delivered. Every message is
    encoded to frames and decoded on delivery (wire/codec.py)."""
    from edge_spec_ros.wire.codec import decode, encode
    from edge_spec_ros.wire.messages import Envelope

    gen = np.random.default_rng(seed)
    pipes: dict[str, deque[list[bytes]]] = {ROBOT: deque(), CLOUD: deque()}  # frames waiting for that side
    peers = {ROBOT: robot, CLOUD: cloud}

    def send(src: SideName, messages: list[DragonMessage]) -> None:
        for m in messages:
            frames = encode(Envelope(session, m))  # type: ignore[arg-type]
            if log is not None:
                log.add("up" if src == ROBOT else "down", type(m).__name__, frames)
            pipes[other(src)].append(frames)

    for _ in range(max_events):
        if robot.done and cloud.done:
            return
        enabled = []
        for name, peer in peers.items():
            if peer.can_draft():
                enabled.append(("draft", name))
            if peer.can_aggregate():
                enabled.append(("aggregate", name))
            if pipes[name]:
                enabled.append(("deliver", name))
        if not enabled:
            raise DragonProtocolError("deadlock: no event enabled before the decision ended")
        kind, name = enabled[int(gen.integers(len(enabled)))]
        peer = peers[name]
        if kind == "draft":
            send(name, peer.draft())
        elif kind == "aggregate":
            send(name, peer.aggregate())
        else:
            env = decode(pipes[name].popleft())
            if env.session != session:
                raise DragonProtocolError("frames of another session")
            send(name, peer.receive(env.message))  # type: ignore[arg-type]
    raise DragonProtocolError(f"no end after {max_events} events")


# --------------------------------------------------------------------------- one side's event loop


def run_peer(peer: DragonPeer, send: Callable[[list[DragonMessage]], None],
             receive: Callable[[float], DragonMessage | None], timeout_s: float = 30.0,
             stop: Callable[[], bool] = lambda: False) -> None:
    """Run one side until the decision ends: apply every message that has arrived first (targets
    before more drafting), then aggregate when this side can, else draft, else wait for a message.
    ``receive(t)`` returns a message or None after t seconds; ``timeout_s`` with nothing to do and
    nothing arriving raises TimeoutError."""
    while not peer.done and not stop():
        msg = receive(0.0)
        while msg is not None:
            send(peer.receive(msg))
            if peer.done:
                return
            msg = receive(0.0)
        if peer.can_aggregate():
            send(peer.aggregate())
        elif peer.can_draft():
            send(peer.draft())
        elif not stop():
            msg = receive(timeout_s)
            if msg is None:
                if stop():
                    return
                raise TimeoutError(f"the other side sent nothing for {timeout_s} s at position {len(peer.tokens)}")
            send(peer.receive(msg))
