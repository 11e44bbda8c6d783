"""The verifier service: a ZeroMQ ROUTER serving many robots' decisions at once.

The I/O thread decodes every frame set under the server's limits (``cloud/limits.py``: sizes are
checked before anything is decompressed), validates every field of the request, and answers each
refusal itself with an ``Error`` carrying a code and a reason; it also answers the robots' heartbeat
(``Ping`` → ``Pong``, wire/heartbeat.py) itself, so a verifier busy in a long forward is not taken
for a dead one. Nothing slow runs there: the session's
state machine (``VerifySession.handle``) admits each request (an out-of-order draft is refused at
once) and returns its work, and that work (decoding the image, prefill, verification, generation)
runs on worker threads, one job at a time per session, in arrival order. A job gives its worker back
where it may pause (a prefill after each layer of each slice, a slice bounded in positions and in
attention cost; cloud-only generation after every token), and workers take the ready session with
the least compute used (start-time fair queuing on measured compute time, ``FairQueue``): a session
whose robot has been waiting on the robot's side, drafting, comes back with a bounded credit, so a
short round runs before a long job's next step, and a long job still gets its share. With ``max_batch`` > 1 (``serve --batch``) a worker
taking a whole draft block also takes the next ready sessions' whole blocks and runs them in one forward
of the verifier (``cloud/batching.py``). Close and session expiry cancel a session's queued work and stop
its running work at the next token or emulated layer.

Results go to a per-session outbox ordered by the session's queue policy (FSD Algorithm 2, SENDER;
Table 7): the final exit is sent before any early exit still waiting, and early exits of a round
whose final result has left are dropped, since the robot no longer needs them.

Other kinds of decision are hosted the same way (``SessionKind``): whoever builds the server gives it
a table of kinds keyed by the message type that opens one (``serve`` gives DRAGON's, keyed by
``DragonOpen``: edge_spec_ros/dragon/session.py); each kind's session state has the same
``handle(message, emit)`` shape as ``VerifySession``, and shares the session limits, the workers and
the fair queue with the verifier's decisions. This module knows no kind but verification.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from edge_spec_ros.cloud.limits import (
    DEFAULT_MAX_SESSIONS_PER_CLIENT, Limits, RequestError, check_open,
)
from edge_spec_ros.cloud.batching import batchable, verify_batch
from edge_spec_ros.cloud.session import (
    EXIT_SHORTLIST, PREFILL_CHUNK_CELLS, PREFILL_CHUNK_TOKENS, Cancelled, ComputeProfile, VerifySession,
)
from edge_spec_ros.config_cli import doc
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.wire.codec import SESSION_BYTES, DecodeLimits, WireError, decode, encode
from edge_spec_ros.wire.emulator import LinkShape
from edge_spec_ros.wire.link import CurveKeys, IOThread
from edge_spec_ros.wire.messages import (
    PROTOCOL_REVISION, Close, DraftBlock, Envelope, Error, ErrorCode, ExitResult, Generate, Message, Open, Ping, Pong,
    Stats, StatsReply,
)

log = logging.getLogger(__name__)

HOUSEKEEPING_PERIOD_S = 0.5
FAIR_CREDIT_S = 0.1  # compute a session coming back from idle may use ahead of the sessions already waiting
PRIORITY_LEAD_S = 1.0  # per priority level (Open.priority): more compute a session back from idle may use
# ahead of lower-priority sessions (a robot in motion, priority 1, goes ahead of a robot standing still)
WORKER_JOIN_S = 0.2  # how long stop() waits for the workers (a forward pass in flight is not interrupted)
RECEIVE_HWM = 100  # frame sets ZeroMQ buffers per connection before it stops reading that peer
VERIFY_STEPS = (DraftBlock, Generate)  # a verified decision's requests after its Open (Close aside)


@dataclass(frozen=True)
class ServerConfig:
    """bind: ZeroMQ endpoint (``tcp://127.0.0.1:*`` picks a free port); workers: verification threads;
    session_timeout_s: an idle session is dropped after this; max_sessions: in all;
    max_sessions_per_client: per CURVE key (without CURVE: per connection); max_requests /
    idle_exit_s: stop after that many requests / that long without one (0 = never; tests and benches
    use them); limits: what a request may ask for; prefill_chunk_tokens: prompt positions per prefill
    slice (0: no bound; other sessions' work runs between the slices' layers); prefill_chunk_cells:
    query-key pairs per prefill slice (a slice of s positions after c cached has s·(c + s); 0: no
    bound), so a slice's layer costs about the same at any depth of a long prompt; fair_credit_s: the
    compute time a session coming back from idle may use before the sessions already waiting (the
    scheduler's credit; ``FairQueue``); emulate_tq_s: emulated verification time per
    forward for benchmarks (0: real compute only; a request cannot ask for it); priority_lead_s: the
    compute a session may use ahead of sessions one priority level lower (``Open.priority``; the
    fairness bound of ``FairQueue``); max_batch: the most sessions whose pending verification rounds
    one forward of the verifier takes (1: one round per forward; cloud/batching.py)."""

    bind: str = field(default="tcp://127.0.0.1:5555", metadata=doc(
        "ZeroMQ endpoint; tcp://0.0.0.0:5555 to accept robots from the network"))
    workers: int = field(default=1, metadata=doc("verification threads", 1, 1024))
    session_timeout_s: float = field(default=60.0, metadata=doc("drop sessions idle this long (s)", 0.0, 1e9))
    max_sessions: int = field(default=64, metadata=doc("sessions in all", 1, 2**31 - 1))
    max_sessions_per_client: int = field(default=DEFAULT_MAX_SESSIONS_PER_CLIENT, metadata=doc(
        "sessions one CURVE key (without CURVE: one connection) may hold", 1, 2**31 - 1))
    max_requests: int = field(default=0, metadata=doc("stop after this many requests (0: never)", 0, 2**63 - 1))
    idle_exit_s: float = field(default=0.0, metadata=doc("stop after this long without requests (s; 0: never)",
                                                          0.0, 1e9))
    curve: CurveKeys | None = None
    limits: Limits = field(default_factory=Limits)
    emulate_tq_s: float = field(default=0.0, metadata=doc(
        "benchmarks: every verification forward takes at least this long (s; 0: off)", 0.0, 1e9))
    prefill_chunk_tokens: int = field(default=PREFILL_CHUNK_TOKENS, metadata=doc(
        "prompt positions per prefill slice: a long prompt shares the worker with other sessions' rounds "
        "between slices (0: one slice)", 0, 2**31 - 1))
    prefill_chunk_cells: int = field(default=PREFILL_CHUNK_CELLS, metadata=doc(
        "query-key pairs per prefill slice (s positions after c cached: s*(c+s)), so slices shorten as a long "
        "prompt's cache grows (0: no bound)", 0, 2**63 - 1))
    exit_shortlist: int = field(default=EXIT_SHORTLIST, metadata=doc(
        "N > 0: an early exit's head scores the token ids below N and the decision's own tokens, not the whole "
        "vocabulary (0: the whole vocabulary). Exits only steer pre-drafting: the output is the same either way "
        "(docs/benchmarks.md)", 0, 2**31 - 1))
    fair_credit_s: float = field(default=FAIR_CREDIT_S, metadata=doc(
        "compute time a session coming back from idle may use before the sessions already waiting (s)", 0.0, 1e9))
    priority_lead_s: float = field(default=PRIORITY_LEAD_S, metadata=doc(
        "compute a session may use ahead of sessions one priority level lower (Open.priority: a robot in motion "
        "is level 1); the bound of any session's wait behind higher ones (s; 0: priorities off)", 0.0, 1e9))
    max_batch: int = field(default=1, metadata=doc(
        "sessions whose pending rounds one verifier forward takes (1: one round per forward; docs/fleet.md)",
        1, 4096))

    def __post_init__(self) -> None:
        if not (math.isfinite(self.emulate_tq_s) and self.emulate_tq_s >= 0):
            raise ValueError(f"emulate_tq_s must be finite and >= 0, got {self.emulate_tq_s}")
        if self.exit_shortlist < 0:
            raise ValueError(f"exit_shortlist must be >= 0, got {self.exit_shortlist}")
        if self.prefill_chunk_tokens < 0 or self.prefill_chunk_cells < 0:
            raise ValueError(f"prefill_chunk_tokens and prefill_chunk_cells must be >= 0, got "
                             f"{self.prefill_chunk_tokens} and {self.prefill_chunk_cells}")
        if not (math.isfinite(self.fair_credit_s) and self.fair_credit_s >= 0):
            raise ValueError(f"fair_credit_s must be finite and >= 0, got {self.fair_credit_s}")
        if not (math.isfinite(self.priority_lead_s) and self.priority_lead_s >= 0):
            raise ValueError(f"priority_lead_s must be finite and >= 0, got {self.priority_lead_s}")
        if self.workers < 1 or self.max_sessions < 1 or self.max_sessions_per_client < 1 or self.max_batch < 1:
            raise ValueError("workers, max_sessions, max_sessions_per_client and max_batch must be >= 1")


Job = Iterator[None]  # a request's work (``VerifySession.handle``): it yields where it may be paused


class SessionState(Protocol):
    """A decision's request state machine (``VerifySession``; DRAGON's ``DragonSession``)."""

    def handle(self, message: Message, emit: Callable[[Message], None]) -> Job | None:
        """Admit ``message`` on the I/O thread (``RequestError``: refused, answered at once) and return
        its work for a worker, replies going to ``emit``; None when work already queued or running takes
        the message up."""


class SessionKind(Protocol):
    """A kind of decision the server hosts beside verification, keyed in ``VerifierServer``'s ``kinds``
    by the message type that opens one; ``steps``: the message types of an open decision of the kind
    (Close aside: it ends any decision)."""

    steps: tuple[type, ...]

    def caps(self, limits: DecodeLimits, max_message_bytes: int) -> tuple[DecodeLimits, int]:
        """The server's decode limits and largest frame once it hosts this kind (given the server's own)."""

    def open(self, message: Message) -> tuple[SessionState, LinkShape | None]:
        """The state of a decision ``message`` opens (``RequestError``: refused), and the emulated downlink
        its replies take (None: none); the server's first job for it is ``state.handle(message, emit)``."""


@dataclass(eq=False)  # sessions are compared by identity (the ready queue removes them; fields hold arrays)
class _Session:
    identity: bytes
    sid: bytes
    client: bytes  # whose quota the session counts against
    request: Message  # the message that opened it
    shape: LinkShape | None
    policy: str
    last_seen: float
    state: SessionState  # the decision's request state machine
    cancel: threading.Event  # set when the session is closed or expires (the state's work stops)
    steps: tuple[type, ...] = VERIFY_STEPS  # the requests its kind of decision takes after the open
    jobs: deque = field(default_factory=deque)
    current: Iterator[None] | None = None  # a sliced job in progress
    on_error: Callable[[], None] | None = None  # of the job in progress
    scheduled: bool = False  # in the ready queue or running on a worker
    closed: bool = False
    tag: float = -math.inf  # fair queuing: the session's virtual start time (``FairQueue``)
    order: int = 0  # when it was queued: ties go first come, first served
    weight: float = 1.0  # its share of the compute beside other waiting sessions
    lead: float = 0.0  # compute it may use ahead of priority-0 sessions when back from idle (Open.priority)

    @property
    def continuing(self) -> bool:
        """Its next step continues a sliced job (a long prefill or generation) rather than starting one."""
        return self.current is not None


class FairQueue:
    """Ready sessions, served by start-time fair queuing on measured compute time, with priorities
    (lock held by the caller for every call).

    Each session carries a virtual start tag S; a worker takes the ready session of least S (first
    queued among equals), the virtual clock V is the greatest S taken so far, and a session that ran
    for t seconds advances S by t/weight. A session that becomes ready after idling (its robot was
    drafting, or it is new) starts at max(S, V − credit − lead), where lead = priority ×
    ``priority_lead_s`` (0 for priority 0): it may use up to credit + lead of compute before the
    sessions already waiting get their next step, so a short round goes ahead of a long job's next
    step, and a robot in motion's round (priority 1) ahead of a standing robot's.

    Bounds (weights 1). S never decreases, and while a session i waits every session taken has S ≤
    S_i, so V ≤ S_i. Hence another session j runs ahead of i, from when i is queued (clock V_i) to
    when i is taken, for at most S_i − (V_i − credit − lead_j) of compute plus the one step it
    started last. For a round back from idle whose session has not used more than its share
    (S_i = V_i − credit − lead_i) that is lead_j − lead_i + one step: behind a session of the same or
    lower priority a round waits for at most one of its steps, behind a session k levels higher for
    at most k × ``priority_lead_s`` of its compute and one step: **no session is starved**, whatever
    the priorities. Over time a session that keeps waiting gets at least weight/Σ weights of the
    compute of the sessions that keep the workers busy."""

    def __init__(self, credit_s: float = FAIR_CREDIT_S) -> None:
        self.credit_s = credit_s
        self.clock = 0.0
        self._sessions: list[_Session] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self):
        """The ready sessions in the order they would be served."""
        return iter(sorted(self._sessions, key=lambda s: (s.tag, s.order)))

    def push(self, session: _Session, fresh: bool) -> None:
        """Queue a session: ``fresh`` if it was idle (no work queued or running) until now."""
        if fresh:
            session.tag = max(session.tag, self.clock - self.credit_s - session.lead)
        session.order = next(self._order)
        self._sessions.append(session)

    def head(self) -> _Session:
        """The session served next."""
        return min(self._sessions, key=lambda s: (s.tag, s.order))

    def pop(self) -> _Session:
        session = self.head()
        self.take(session)
        return session

    def take(self, session: _Session) -> None:
        """Take ``session`` out of the queue to run it."""
        self._sessions.remove(session)
        self.clock = max(self.clock, session.tag)

    @staticmethod
    def charge(session: _Session, seconds: float) -> None:
        """``session`` ran for ``seconds``."""
        session.tag += seconds / session.weight


class VerifierServer:
    def __init__(self, verifier: EarlyExitVerifier, encoder: PromptEncoder, config: ServerConfig,
                 kinds: Mapping[type, SessionKind] | None = None) -> None:
        """``kinds``: the other kinds of decision it hosts, keyed by the message type that opens one
        (``serve``: DRAGON's; none: it serves verification only)."""
        self.verifier = verifier
        self.encoder = encoder
        self.config = config
        self.vocab = verifier.stack.vocab_size
        self.decode_limits = config.limits.decode_limits(self.vocab)
        self.max_message_bytes = config.limits.max_message_bytes(self.vocab)
        self.compute = ComputeProfile(config.emulate_tq_s)
        self.kinds = dict(kinds or {})
        for kind in self.kinds.values():
            self.decode_limits, self.max_message_bytes = kind.caps(self.decode_limits, self.max_message_bytes)
        # every request a decision takes after its open
        self._requests = (Close, *VERIFY_STEPS, *(t for kind in self.kinds.values() for t in kind.steps))
        self.counters: Counter[str] = Counter()
        self.sessions: dict[tuple[bytes, bytes], _Session] = {}
        self._per_client: Counter[bytes] = Counter()
        self._lock = threading.Lock()  # sessions, jobs, the ready queue, counters
        self._ready_cv = threading.Condition(self._lock)
        self._ready = FairQueue(config.fair_credit_s)
        self._running = 0  # steps running on workers ...
        self._running_continued = 0  # ... of which continue a sliced job (``_may_start``)
        self._workers: list[threading.Thread] = []
        self._ctx = zmq.Context()
        self._auth: ThreadAuthenticator | None = None
        self._done = threading.Event()
        self._last_request = time.monotonic()
        self.endpoint = ""

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> str:
        """Bind and start serving; returns the bound endpoint."""
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a vanished robot's replies are dropped, not fatal
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)  # a larger frame: the peer is cut off
        sock.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        sock.setsockopt(zmq.LINGER, 0)
        if self.config.curve is not None:
            self._auth = ThreadAuthenticator(self._ctx)
            self._auth.start()
            self._auth.configure_curve(domain="*", location=self.config.curve.authorized_dir)
            sock.curve_server = True
            sock.curve_publickey = self.config.curve.public
            sock.curve_secretkey = self.config.curve.secret
        sock.bind(self.config.bind)
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._io = IOThread(sock, self._on_frames, "verifier-io", user_ids=self.config.curve is not None)
        self._io.start()
        for i in range(self.config.workers):
            worker = threading.Thread(target=self._work, name=f"verify-{i}", daemon=True)
            worker.start()
            self._workers.append(worker)
        self._housekeeper = threading.Thread(target=self._housekeeping, name="verifier-housekeeping", daemon=True)
        self._housekeeper.start()
        return self.endpoint

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def stop(self) -> bool:
        """Stop serving within a bounded time; True when every thread has ended (a worker inside a
        forward pass is left to the interpreter's exit: its threads are daemons)."""
        self._done.set()
        with self._lock:
            for session in self.sessions.values():
                self._cancel(session)
            self._ready_cv.notify_all()
        ended = self._io.stop()
        deadline = time.monotonic() + WORKER_JOIN_S
        for worker in self._workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
        ended = ended and not any(w.is_alive() for w in self._workers)
        if self._auth is not None:
            self._auth.stop()
        if ended:
            self._ctx.term()
        return ended

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counters, sessions_open=len(self.sessions))

    # --- I/O thread --------------------------------------------------------------------------------
    def _on_frames(self, frames: list[bytes], user_id: bytes = b"") -> None:
        identity, body = frames[0], frames[1:]
        self._count("frames_received")
        try:
            env = decode(body, self.decode_limits)
        except WireError as exc:
            self._counted_request()
            self._count(exc.code.name.lower())
            session = body[0][4:4 + SESSION_BYTES] if body and len(body[0]) >= 4 + SESSION_BYTES else bytes(16)
            self._reply(identity, session, Error(int(exc.code), str(exc)))
            return
        self._count(f"msg_{type(env.message).__name__}")
        if isinstance(env.message, Ping):
            # the heartbeat, answered here on the I/O thread and never by a worker: a verifier busy in
            # a long forward still answers, so the robot tells slow from dead. Not a request: it keeps
            # no idle server alive (idle_exit_s) and does not count towards max_requests
            self._count("pings")
            self._reply(identity, env.session, Pong(env.message.seq, PROTOCOL_REVISION))
            return
        self._counted_request()
        try:
            self._dispatch(identity, user_id or identity, env.session, env.message)
        except RequestError as exc:
            self._refuse(identity, env.session, exc, getattr(env.message, "round", -1))

    def _counted_request(self) -> None:
        """A request (anything but a Ping): the idle timer restarts, and ``max_requests`` counts it."""
        self._last_request = time.monotonic()
        if self.config.max_requests and \
                self.counters["frames_received"] - self.counters["pings"] >= self.config.max_requests:
            self._done.set()

    def _refuse(self, identity: bytes, sid: bytes, exc: RequestError, round_: int = -1) -> None:
        self._count("out_of_order" if exc.code == ErrorCode.OUT_OF_ORDER else f"refused_{exc.code.name.lower()}")
        if exc.code == ErrorCode.BAD_REQUEST:
            self._count("bad_request")
        self._reply(identity, sid, Error(int(exc.code), str(exc), round_))

    def _dispatch(self, identity: bytes, client: bytes, sid: bytes, msg: Message) -> None:
        key = (identity, sid)
        if isinstance(msg, Stats):
            self._reply(identity, sid, StatsReply(json.dumps(self.stats())))
            return
        if isinstance(msg, Open):
            self._open(key, client, msg)
            return
        if type(msg) in self.kinds:
            self._open_kind(key, client, msg, self.kinds[type(msg)])
            return
        if not isinstance(msg, self._requests):
            raise RequestError(f"{type(msg).__name__} is not a request")
        with self._lock:
            session = self.sessions.get(key)
        if session is None:
            self._count("unknown_session")
            self._reply(identity, sid, Error(int(ErrorCode.UNKNOWN_SESSION), "no open decision with this session id",
                                             getattr(msg, "round", -1)))
            return
        session.last_seen = time.monotonic()
        if isinstance(msg, Close):
            self._close(key)
            return
        if not isinstance(msg, session.steps):
            raise RequestError(f"{type(msg).__name__} does not belong to this session's kind of decision")
        # the session checks the request and its order: a refused one raises here, answered at once
        work = session.state.handle(msg, lambda reply: self._emit_reply(session, reply))
        if work is not None:  # None: the session's queued or running work takes it up
            self._submit(session, work)

    def _open(self, key: tuple[bytes, bytes], client: bytes, msg: Open) -> None:
        check_open(msg, self.config.limits, self.vocab)
        shape = LinkShape(msg.down_delay_s, msg.down_jitter_s, msg.down_bandwidth_bps, msg.down_loss)
        compute = self.compute  # the operator's (check_open refused a request asking for emulation)
        max_tokens = self.config.limits.max_prompt_tokens + self.config.limits.max_new_tokens
        cancel = threading.Event()
        state = VerifySession(self.verifier, self.encoder, msg, compute, cancel, max_tokens,
                              self.config.prefill_chunk_tokens, self.config.prefill_chunk_cells,
                              self.config.exit_shortlist, self.config.limits)
        session = _Session(key[0], key[1], client, msg, shape, msg.queue_policy, time.monotonic(), state, cancel,
                           lead=msg.priority * self.config.priority_lead_s)
        work = state.handle(msg, lambda reply: self._emit_reply(session, reply))  # on a worker: the image, prefill
        self._admit(key, client, session)
        self._submit(session, work, on_error=lambda: self._forget(session))

    def _open_kind(self, key: tuple[bytes, bytes], client: bytes, msg: Message, kind: SessionKind) -> None:
        """A decision of a hosted kind (``SessionKind``): its open's work runs as its first job, its
        replies leave in the order they are sent."""
        state, shape = kind.open(msg)
        session = _Session(key[0], key[1], client, msg, shape, "fifo", time.monotonic(), state, threading.Event(),
                           kind.steps)
        work = state.handle(msg, lambda reply: self._emit_reply(session, reply))
        self._admit(key, client, session)
        if work is not None:
            self._submit(session, work, on_error=lambda: self._forget(session))

    def _admit(self, key: tuple[bytes, bytes], client: bytes, session: _Session) -> None:
        """Enter a new session in the table, within the server's and the client's session limits."""
        with self._lock:
            old = self.sessions.get(key)
            if old is None and len(self.sessions) >= self.config.max_sessions:
                raise RequestError(f"the server holds {self.config.max_sessions} sessions", ErrorCode.BUSY)
            held = self._per_client[client] - (old is not None and old.client == client)
            if held >= self.config.max_sessions_per_client:
                raise RequestError(f"this client holds {held} sessions, the most one client may "
                                   "(close finished decisions)", ErrorCode.QUOTA)
            if old is not None:
                self._drop(key)
            self.sessions[key] = session
            self._per_client[client] += 1
            self.counters["sessions_opened"] += 1

    def _close(self, key: tuple[bytes, bytes]) -> None:
        with self._lock:
            if key in self.sessions:
                self._drop(key)
                self.counters["sessions_closed"] += 1

    def _forget(self, session: _Session) -> None:
        """Drop a session whose Open failed (unless the robot has opened it again since)."""
        key = (session.identity, session.sid)
        with self._lock:
            if self.sessions.get(key) is session:
                self._drop(key)

    def _drop(self, key: tuple[bytes, bytes]) -> None:
        """Forget a session and cancel its work (lock held)."""
        session = self.sessions.pop(key)
        self._per_client[session.client] -= 1
        if self._per_client[session.client] <= 0:
            del self._per_client[session.client]
        self._cancel(session)

    def _cancel(self, session: _Session) -> None:
        session.closed = True
        session.cancel.set()
        if session.jobs:
            self.counters["jobs_cancelled"] += len(session.jobs)
            session.jobs.clear()

    # --- jobs ------------------------------------------------------------------------------------
    def _submit(self, session: _Session, job: Job, on_error: Callable[[], None] | None = None) -> None:
        with self._lock:
            if session.closed:
                return
            session.jobs.append((job, on_error))
            if not session.scheduled:
                session.scheduled = True
                self._ready.push(session, fresh=True)
                self._ready_cv.notify()

    def _may_start(self, session: _Session) -> bool:
        """Whether a worker may start ``session``'s next step now (lock held). A step that continues a
        sliced job (a long prefill's next layer, a generation's next token) runs alone, and a step that
        starts a job (a verification round, an Open's first step) runs beside other such steps but not
        beside a continued one. So a round waits for at most the one step of a long job in progress
        when it arrives, and never shares the CPU, the interpreter lock or the GPU with a long job's
        steps while it runs (with several workers, the long job's next step waits for the round)."""
        if session.continuing:
            return self._running == 0
        return self._running_continued == 0

    def _work(self) -> None:
        """A worker: run one step of the ready session first in fair order (``FairQueue``) once
        ``_may_start`` allows it (the sessions behind it keep their places: the order is never
        overtaken), charge it the step's time, and queue it again if it has more work."""
        while True:
            with self._lock:
                while not self._done.is_set() and not (self._ready and self._may_start(self._ready.head())):
                    self._ready_cv.wait()
                if self._done.is_set():
                    return
                session = self._ready.pop()
                continued = session.continuing
                if session.current is None and session.jobs and not session.closed:
                    job, session.on_error = session.jobs.popleft()
                else:
                    job = None
                batch = []
                if self.config.max_batch > 1 and batchable(job):
                    batch = self._gather()
                self._running += 1
                self._running_continued += continued
            t0 = time.perf_counter()
            try:
                if batch:
                    self._step_batch([(session, job), *batch])
                else:
                    self._step(session, job)
            finally:
                elapsed = (time.perf_counter() - t0) / (1 + len(batch))  # a batch's sessions share its time
                with self._lock:
                    self._running -= 1
                    self._running_continued -= continued
                    for s in (session, *(other for other, _ in batch)):
                        self._ready.charge(s, elapsed)
                        if (s.current is not None or s.jobs) and not s.closed:
                            self._ready.push(s, fresh=False)
                        else:
                            s.scheduled = False
                            s.current = None
                    self._ready_cv.notify_all()  # what may start has changed

    def _gather(self) -> list[tuple[_Session, Job]]:
        """Batching (lock held): take from the ready queue up to ``max_batch - 1`` other sessions whose
        next job is a whole block's verification, in serving order; the rest keep their places."""
        limit = self.config.max_batch - 1
        taken: list[tuple[_Session, Job]] = []
        for other in list(self._ready):
            if len(taken) >= limit:
                break
            if other.current is None and other.jobs and not other.closed and batchable(other.jobs[0][0]):
                self._ready.take(other)
                job, other.on_error = other.jobs.popleft()
                taken.append((other, job))
        return taken

    def _step_batch(self, entries: list[tuple[_Session, Job]]) -> None:
        """Several sessions' verification rounds in one forward (``cloud/batching.py``); each session's
        failure is answered as a solo job's would be."""
        live = [(s, job) for s, job in entries if not s.closed]
        for s, _ in entries:
            if s.closed:
                self._fail(s, Cancelled())
        if not live:
            return
        try:
            errors = verify_batch(self.verifier, [job for _, job in live])
        except Exception as exc:  # the batched forward itself failed: every session in it is told
            errors = [exc] * len(live)
        with self._lock:
            self.counters["batches"] += 1
            self.counters["batched_rounds"] += len(live)
        for (s, _), exc in zip(live, errors):
            s.current = None
            if exc is not None:
                self._fail(s, exc)

    def _step(self, session: _Session, job: Job | None) -> None:
        try:
            if session.closed:
                raise Cancelled()
            if job is not None:
                session.current = job
            if session.current is not None:
                try:
                    next(session.current)
                except StopIteration:
                    session.current = None
            return
        except Exception as exc:  # noqa: BLE001 - answered per kind below
            self._fail(session, exc)

    def _fail(self, session: _Session, exc: BaseException) -> None:
        """A session's job raised ``exc``: answer it (nothing for a cancelled one), drop the job."""
        if isinstance(exc, Cancelled):  # closed or expired: nobody waits for a reply
            self._count("jobs_cancelled")
        elif isinstance(exc, RequestError):
            self._count(f"refused_{exc.code.name.lower()}")
            if exc.code == ErrorCode.BAD_REQUEST:
                self._count("bad_request")
            self._emit(session, Error(int(exc.code), str(exc)))
        else:  # the model failed: tell the robot, keep serving others
            log.error("verification job failed", exc_info=exc)
            self._count("internal_error")
            self._emit(session, Error(int(ErrorCode.INTERNAL), f"{type(exc).__name__}: {exc}"))
        session.current = None
        if session.on_error is not None:
            session.on_error()

    # --- sending ---------------------------------------------------------------------------------
    def _emit(self, session: _Session, msg: Message, confidence: float = math.inf, tag=None) -> None:
        frames = [session.identity, *encode(Envelope(session.sid, msg))]
        self._io.submit((session.identity, session.sid), frames, confidence, tag, session.shape, session.policy)

    def _emit_reply(self, session: _Session, msg: Message) -> None:
        """A reply of the session's work: exit results through the early-exit rules, the rest as is."""
        if isinstance(msg, ExitResult):
            self._emit_exit(session, msg)
        else:
            self._emit(session, msg)

    def _emit_exit(self, session: _Session, result: ExitResult) -> None:
        if not result.is_final:
            self._count("early_exits_sent")
            self._emit(session, result, result.confidence, ("early", result.round))
            return
        self._count("rounds_verified")
        self._emit(session, result)  # confidence +inf: ahead of every early exit still queued
        key, stale = (session.identity, session.sid), ("early", result.round)

        def drop() -> None:
            box = self._io.outboxes.get(key)
            if box is not None:
                dropped = box.drop(lambda tag: tag == stale)
                if dropped:
                    self._count("early_exits_dropped", dropped)
        self._io.call(drop)

    def _reply(self, identity: bytes, sid: bytes, msg: Message) -> None:
        if len(sid) != SESSION_BYTES:
            sid = bytes(SESSION_BYTES)
        self._io.submit(("reply", identity), [identity, *encode(Envelope(sid, msg))], math.inf)  # not an exit

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n

    # --- housekeeping ------------------------------------------------------------------------------
    def _housekeeping(self) -> None:
        while not self._done.wait(HOUSEKEEPING_PERIOD_S):
            now = time.monotonic()
            with self._lock:
                expired = [k for k, s in self.sessions.items() if now - s.last_seen > self.config.session_timeout_s]
                for key in expired:
                    self._drop(key)
                    self.counters["sessions_expired"] += 1
            for key in expired:
                self._io.call(lambda key=key: self._io.outboxes.pop(key, None))
            if self.config.idle_exit_s and now - self._last_request > self.config.idle_exit_s:
                log.info("no request for %.0f s: stopping", self.config.idle_exit_s)
                self._done.set()
