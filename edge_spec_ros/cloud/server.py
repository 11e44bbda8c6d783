"""The verifier service: a ZeroMQ ROUTER serving many robots' decisions at once.

The I/O thread decodes and validates every frame set and answers protocol errors itself; valid
requests become jobs run by a worker pool, one job at a time per session, in arrival order. Results
go to a per-session outbox ordered by the session's queue policy (FSD Algorithm 2, SENDER; Table 7):
the final exit is sent before any early exit still waiting, and early exits of a round whose final
result has left are dropped, since the robot no longer needs them.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from edge_spec_ros.cloud.session import RequestError, VerifySession
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.queues import POLICIES
from edge_spec_ros.wire.codec import SESSION_BYTES, WireError, decode, encode
from edge_spec_ros.wire.emulator import LinkShape
from edge_spec_ros.wire.link import CurveKeys, IOThread
from edge_spec_ros.wire.messages import (
    Close, DraftBlock, Envelope, Error, ErrorCode, ExitResult, Generate, Message, Open, Stats, StatsReply,
)

log = logging.getLogger(__name__)

HOUSEKEEPING_PERIOD_S = 0.5


@dataclass(frozen=True)
class ServerConfig:
    """bind: ZeroMQ endpoint (``tcp://127.0.0.1:*`` picks a free port); workers: verification threads;
    session_timeout_s: an idle session is dropped after this; max_requests / idle_exit_s: stop after
    that many requests / that long without one (0 = never; tests and benches use them)."""

    bind: str = "tcp://127.0.0.1:5555"
    workers: int = 1
    session_timeout_s: float = 60.0
    max_sessions: int = 64
    max_requests: int = 0
    idle_exit_s: float = 0.0
    curve: CurveKeys | None = None


@dataclass
class _Session:
    identity: bytes
    sid: bytes
    state: VerifySession
    shape: LinkShape | None
    policy: str
    last_seen: float
    jobs: deque = field(default_factory=deque)
    running: bool = False
    closed: bool = False


class VerifierServer:
    def __init__(self, verifier: EarlyExitVerifier, encoder: PromptEncoder, config: ServerConfig) -> None:
        self.verifier = verifier
        self.encoder = encoder
        self.config = config
        self.counters: Counter[str] = Counter()
        self.sessions: dict[tuple[bytes, bytes], _Session] = {}
        self._lock = threading.Lock()  # sessions, jobs, counters
        self._pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="verify")
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
        if self.config.curve is not None:
            self._auth = ThreadAuthenticator(self._ctx)
            self._auth.start()
            self._auth.configure_curve(domain="*", location=self.config.curve.authorized_dir)
            sock.curve_server = True
            sock.curve_publickey = self.config.curve.public
            sock.curve_secretkey = self.config.curve.secret
        sock.bind(self.config.bind)
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._io = IOThread(sock, self._on_frames, "verifier-io")
        self._io.start()
        self._housekeeper = threading.Thread(target=self._housekeeping, name="verifier-housekeeping", daemon=True)
        self._housekeeper.start()
        return self.endpoint

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def stop(self) -> None:
        self._done.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._io.stop()
        if self._auth is not None:
            self._auth.stop()
        self._ctx.term()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counters, sessions_open=len(self.sessions))

    # --- I/O thread --------------------------------------------------------------------------------
    def _on_frames(self, frames: list[bytes]) -> None:
        identity, body = frames[0], frames[1:]
        self._count("frames_received")
        self._last_request = time.monotonic()
        try:
            env = decode(body)
        except WireError as exc:
            self._count("malformed" if exc.code == ErrorCode.MALFORMED else "unsupported_version")
            session = body[0][4:4 + SESSION_BYTES] if body and len(body[0]) >= 4 + SESSION_BYTES else bytes(16)
            self._reply(identity, session, Error(int(exc.code), str(exc)))
            return
        self._count(f"msg_{type(env.message).__name__}")
        if self.config.max_requests and self.counters["frames_received"] >= self.config.max_requests:
            self._done.set()
        try:
            self._dispatch(identity, env.session, env.message)
        except RequestError as exc:
            self._count("bad_request")
            self._reply(identity, env.session, Error(int(ErrorCode.BAD_REQUEST), str(exc)))

    def _dispatch(self, identity: bytes, sid: bytes, msg: Message) -> None:
        key = (identity, sid)
        if isinstance(msg, Stats):
            self._reply(identity, sid, StatsReply(json.dumps(self.stats())))
            return
        if isinstance(msg, Open):
            self._open(key, msg)
            return
        with self._lock:
            session = self.sessions.get(key)
        if session is None:
            self._count("unknown_session")
            self._reply(identity, sid, Error(int(ErrorCode.UNKNOWN_SESSION), "no open decision with this session id"))
            return
        session.last_seen = time.monotonic()
        if isinstance(msg, Close):
            self._close(key)
        elif isinstance(msg, DraftBlock):
            if msg.round != session.state.next_round:
                self._count("out_of_order")
                self._reply(identity, sid, Error(int(ErrorCode.OUT_OF_ORDER),
                                                 f"draft for round {msg.round}, expected {session.state.next_round}",
                                                 msg.round))
                return
            session.state.check_draft(msg)
            if msg.partial:  # the same round's whole block follows
                self._submit(session, lambda: session.state.prepare(msg))
                return
            session.state.next_round += 1
            self._submit(session, lambda: session.state.verify(msg, lambda r: self._emit_exit(session, r)))
        elif isinstance(msg, Generate):
            self._submit(session, lambda: session.state.generate(msg, lambda t: self._emit(session, t)))
        else:
            raise RequestError(f"{type(msg).__name__} is not a request")

    def _open(self, key: tuple[bytes, bytes], msg: Open) -> None:
        if msg.queue_policy not in POLICIES:
            raise RequestError(f"queue_policy must be one of {POLICIES}")
        with self._lock:
            busy = key not in self.sessions and len(self.sessions) >= self.config.max_sessions
        if busy:
            self._count("busy")
            self._reply(*key, Error(int(ErrorCode.BUSY), f"the server holds {self.config.max_sessions} sessions"))
            return
        state = VerifySession(self.verifier, self.encoder, msg)  # validates; RequestError on bad input
        shape = LinkShape(msg.down_delay_s, msg.down_jitter_s, msg.down_bandwidth_bps, msg.down_loss)
        session = _Session(key[0], key[1], state, shape, msg.queue_policy, time.monotonic())
        with self._lock:
            old = self.sessions.pop(key, None)
            if old is not None:
                old.closed = True
            self.sessions[key] = session
            self.counters["sessions_opened"] += 1
        self._submit(session, lambda: self._emit(session, session.state.prefill()))

    def _close(self, key: tuple[bytes, bytes]) -> None:
        with self._lock:
            session = self.sessions.pop(key, None)
            if session is not None:
                session.closed = True
                self.counters["sessions_closed"] += 1

    # --- jobs ------------------------------------------------------------------------------------
    def _submit(self, session: _Session, job) -> None:
        with self._lock:
            session.jobs.append(job)
            if session.running:
                return
            session.running = True
        self._pool.submit(self._run_jobs, session)

    def _run_jobs(self, session: _Session) -> None:
        while True:
            with self._lock:
                if not session.jobs or session.closed:
                    session.running = False
                    session.jobs.clear()
                    return
                job = session.jobs.popleft()
            try:
                job()
            except RequestError as exc:
                self._count("bad_request")
                self._emit(session, Error(int(ErrorCode.BAD_REQUEST), str(exc)))
            except Exception as exc:  # the model failed: tell the robot, keep serving others
                log.exception("verification job failed")
                self._count("internal_error")
                self._emit(session, Error(int(ErrorCode.INTERNAL), f"{type(exc).__name__}: {exc}"))

    # --- sending ---------------------------------------------------------------------------------
    def _emit(self, session: _Session, msg: Message, confidence: float = math.inf, tag=None) -> None:
        frames = [session.identity, *encode(Envelope(session.sid, msg))]
        self._io.submit((session.identity, session.sid), frames, confidence, tag, session.shape, session.policy)

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
        self._io.submit(("reply", identity), [identity, *encode(Envelope(sid, msg))])

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
                    self.sessions.pop(key).closed = True
                    self.counters["sessions_expired"] += 1
            for key in expired:
                self._io.call(lambda key=key: self._io.outboxes.pop(key, None))
            if self.config.idle_exit_s and now - self._last_request > self.config.idle_exit_s:
                log.info("no request for %.0f s: stopping", self.config.idle_exit_s)
                self._done.set()
