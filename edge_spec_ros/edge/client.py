"""The robot's connection to the verifier: a DEALER socket, sessions, timeouts, byte counters and a
heartbeat.

Every reply wait is bounded: a silent verifier surfaces as ``VerifierTimeout`` within the configured
time, an error reply as ``VerifierError`` carrying the server's code and message, and a refused CURVE
handshake (a key the server does not authorise, a plain client at a CURVE server or the reverse) as
``VerifierAuthError`` as soon as ZeroMQ's socket monitor reports it.

The heartbeat (``wire/heartbeat.py``) runs on a thread of its own, decisions or none: a ``Ping`` every
``heartbeat_interval_s``, answered by the server's I/O thread. When the link is known dead (a ping
unanswered for ``heartbeat_timeout_s``, or the connection closed under it) every wait in progress and
every later ``open`` or ``receive`` fails at once with ``VerifierLost`` instead of waiting out the
open or reply timeout; at the next sign of life the link is alive again by itself. ``link_state()``
tells the state, why it is dead and how long since the verifier was last heard; ``on_link_change``
callbacks hear each change. Pings bypass the emulated uplink (``ClientConfig.uplink``): the emulator
shapes the decisions' traffic for benchmarks, the heartbeat watches the real link. On a real link a
ping waits behind whatever the robot is uploading: ``heartbeat_timeout_s`` must exceed the time one
draft block takes on the uplink (a γ = 4 dense q at V = 152k is 2.4 MB: 1 s at 20 Mbit/s).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

import zmq
from zmq.utils.monitor import recv_monitor_message

from edge_spec_ros.wire.codec import WireError, decode, encode
from edge_spec_ros.wire.emulator import LinkShape
from edge_spec_ros.wire.heartbeat import HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S, Heartbeat, LinkState
from edge_spec_ros.wire.link import CurveKeys, IOThread
from edge_spec_ros.wire.messages import Close, Envelope, Error, ErrorCode, Message, Open, Opened, Ping, Pong
from edge_spec_ros.wire.verifier_link import (  # the protocol's errors and counters, re-exported here
    Traffic, VerifierAuthError, VerifierError, VerifierLost, VerifierTimeout, send_first,
)

log = logging.getLogger(__name__)

OPEN_TIMEOUT_S = 30.0  # image encoding + prefill on the verifier
REPLY_TIMEOUT_S = 10.0  # one verification round or one cloud token
WAIT_SLICE_S = 0.1  # a reply wait looks at the handshake state this often
MONITOR_POLL_MS = 200  # the monitor thread's longest wait for a socket event
HANDSHAKE_EVENTS = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "the handshake failed (no detail)",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "the handshake failed: the two sides do not speak the same security "
                                         "mechanism (CURVE on one side only?) or the peer sent garbage",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "the verifier refused this robot's CURVE key (not in its authorized/ directory)",
}
# With CURVE, a server that cannot decrypt the robot's HELLO (the robot holds another server's public
# key) drops the connection without a word: ZeroMQ reports "no detail" on the robot's side.
HEARTBEAT_JOIN_S = 1.0  # how long close() waits for the heartbeat thread
CURVE_NO_DETAIL = ("the CURVE handshake failed: the verifier could not be authenticated (is the server public "
                   "key this robot holds, server.key, the one of the verifier at this endpoint?)")


@dataclass(frozen=True)
class ClientConfig:
    """endpoint: the verifier's ZeroMQ endpoint; uplink: emulated robot → cloud link (None: real link);
    downlink: emulated cloud → robot link, applied by the server on this robot's sessions; priority:
    ``Open.priority`` of this robot's decisions (0: standing still, 1: in motion; the server serves
    higher priorities first within a fairness bound), changed at run time with ``VerifierClient.priority``;
    heartbeat_interval_s / heartbeat_timeout_s: a ping this often, and the link is dead when one goes
    unanswered this long (``wire/heartbeat.py``; 0 < interval < timeout)."""

    endpoint: str = "tcp://127.0.0.1:5555"
    open_timeout_s: float = OPEN_TIMEOUT_S
    reply_timeout_s: float = REPLY_TIMEOUT_S
    uplink: LinkShape | None = None
    downlink: LinkShape | None = None
    curve: CurveKeys | None = None
    priority: int = 0
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S
    heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S


class LostMarker:
    """Put in a session's inbox when the link dies: its waiting receive raises VerifierLost."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class VerifierClient:
    """Thread-safe: any thread may send; each session's replies go to that session's queue.

    ``on_replies``: called on the I/O thread after each frame set received (a ROS bridge publishes the
    replies at once, ``take``-ing them without a hand-off to another thread); it must not block."""

    def __init__(self, config: ClientConfig, on_replies: Callable[[], None] | None = None) -> None:
        self.config = config
        self._on_replies = on_replies
        self.priority = config.priority  # of the next decisions opened (a robot that starts moving raises it)
        self.counters: Counter[str] = Counter()
        self._ctx = zmq.Context()
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if config.curve is not None:
            sock.curve_publickey = config.curve.public
            sock.curve_secretkey = config.curve.secret
            sock.curve_serverkey = config.curve.server_public
        self.handshake_failure: str | None = None  # set by the monitor thread, cleared by a success
        self._inbox: dict[bytes, queue.Queue] = {}
        self.traffic: dict[bytes, Traffic] = {}
        self._lock = threading.Lock()
        self._health_lock = threading.Lock()
        self._heartbeat = Heartbeat(time.monotonic(), config.heartbeat_interval_s, config.heartbeat_timeout_s)
        self._link_listeners: list = []
        self._heartbeat_sid = uuid.uuid4().bytes  # never a decision's
        self._monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
                                                | sum(HANDSHAKE_EVENTS))
        self._monitor_stop = threading.Event()
        self._monitor_thread = threading.Thread(target=self._watch_handshakes, name="verifier-client-monitor",
                                                daemon=True)
        self._monitor_thread.start()
        sock.connect(config.endpoint)
        self._io = IOThread(sock, self._on_frames, "verifier-client-io")
        self._io.start()
        self._beat_stop = threading.Event()
        self._beat_thread = threading.Thread(target=self._beat, name="verifier-client-heartbeat", daemon=True)
        self._beat_thread.start()

    def close(self) -> None:
        self._beat_stop.set()
        self._beat_thread.join(timeout=HEARTBEAT_JOIN_S)
        self._monitor_stop.set()
        self._monitor_thread.join()
        self._monitor.close(linger=0)
        self._io.stop()
        self._ctx.term()

    def _watch_handshakes(self) -> None:
        """Record the last handshake outcome (ZeroMQ socket monitor events)."""
        while not self._monitor_stop.is_set():
            if not self._monitor.poll(MONITOR_POLL_MS):
                continue
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except (zmq.Again, zmq.ContextTerminated):
                continue
            except zmq.ZMQError:
                return
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self._link_event(lambda hb, now: hb.lost(now, f"the connection to {self.config.endpoint} "
                                                              "was closed (the verifier process ended?)"))
            elif event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.handshake_failure = None
            elif event["event"] in HANDSHAKE_EVENTS:
                self.counters["handshake_failures"] += 1
                detail = f" (errno {event['value']})" if event["event"] != zmq.EVENT_HANDSHAKE_FAILED_AUTH \
                    else f" (ZAP status {event['value']})"
                reason = HANDSHAKE_EVENTS[event["event"]]
                if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and self.config.curve is not None:
                    reason = CURVE_NO_DETAIL
                self.handshake_failure = reason + detail
                log.warning("verifier at %s: %s", self.config.endpoint, self.handshake_failure)

    # --- link health -------------------------------------------------------------------------
    def link_state(self) -> LinkState:
        """The heartbeat's view of the link: connecting, alive or dead (with why), seconds since the
        verifier was last heard, the last ping's round trip."""
        with self._health_lock:
            return self._heartbeat.snapshot(time.monotonic())

    def on_link_change(self, callback) -> None:
        """Call ``callback(LinkState)`` at each change of the link's state (on the thread that saw it:
        the heartbeat's, the monitor's or the I/O thread)."""
        self._link_listeners.append(callback)

    def _link_event(self, event) -> None:
        """Apply ``event(heartbeat, now) -> changed`` under the lock; on a change, wake the waits (dead)
        and tell the listeners."""
        with self._health_lock:
            now = time.monotonic()
            if not event(self._heartbeat, now):
                return
            state = self._heartbeat.snapshot(now)
        if state.dead:
            self.counters["link_lost"] += 1
            log.warning("verifier at %s lost: %s", self.config.endpoint, state.reason)
            with self._lock:
                boxes = list(self._inbox.values())
            for box in boxes:
                box.put(LostMarker(state.reason))
        elif state.alive and self.counters["link_lost"]:
            log.info("verifier at %s alive again", self.config.endpoint)
        for callback in list(self._link_listeners):
            try:
                callback(state)
            except Exception:  # a listener's bug must not stop the heartbeat
                log.exception("error in a link state listener")

    def _lost_error(self, reason: str) -> VerifierError:
        """The error of a wait on a dead link: a refused handshake says so (VerifierAuthError: the
        connection a failed handshake closes is no lost verifier), anything else VerifierLost."""
        if self.handshake_failure is not None:
            return VerifierAuthError(f"cannot talk to the verifier at {self.config.endpoint}: {self.handshake_failure}")
        return VerifierLost(f"verifier at {self.config.endpoint} lost: {reason}")

    def _beat(self) -> None:
        """The heartbeat thread: ping when due, declare the link dead when a ping goes unanswered."""
        wait = 0.0
        while not self._beat_stop.wait(wait):
            with self._health_lock:
                now = time.monotonic()
                seq = self._heartbeat.ping(now)
            if seq is not None:
                self.counters["pings"] += 1
                self._io.submit("heartbeat", encode(Envelope(self._heartbeat_sid, Ping(seq))))
            self._link_event(lambda hb, now: hb.check(now))
            with self._health_lock:
                wait = self._heartbeat.next_wake(time.monotonic())

    def __enter__(self) -> "VerifierClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- sessions ----------------------------------------------------------------------------
    def register(self, sid: bytes) -> None:
        """Start collecting replies for session ``sid``."""
        with self._lock:
            self._inbox[sid] = queue.Queue()
            self.traffic[sid] = Traffic()

    def with_downlink(self, request: Open) -> Open:
        """``request`` asking the server to emulate this client's configured downlink."""
        down = self.config.downlink
        if down is None:
            return request
        return replace(request, down_delay_s=down.delay_s, down_jitter_s=down.jitter_s,
                       down_bandwidth_bps=down.bandwidth_bps, down_loss=down.loss)

    def with_priority(self, request: Open) -> Open:
        """``request`` with this client's priority, unless the request sets one itself."""
        return replace(request, priority=self.priority) if self.priority and not request.priority else request

    def open(self, request: Open) -> tuple[bytes, Opened]:
        """Open a decision; returns its session id and the server's acknowledgement. Raises
        VerifierLost at once, sending nothing, while the link is known dead."""
        return self.open_with(request, None)

    def open_with(self, request: Open, first: Callable[[bytes], None] | None) -> tuple[bytes, Opened]:
        """``open``, calling ``first(sid)`` right after the Open has been handed to the I/O thread and
        before waiting for ``Opened``: the robot drafts its first block while the Open travels, and
        sends it on ``sid`` right behind it (``edge.first_block``). When ``first`` raises, the session
        is closed on the server and the error goes on."""
        state = self.link_state()
        if state.dead:
            raise self._lost_error(state.reason)
        sid = uuid.uuid4().bytes
        self.register(sid)
        self.send(sid, self.with_priority(self.with_downlink(request)))
        send_first(self, sid, first)
        reply = self.receive(sid, self.config.open_timeout_s)
        if not isinstance(reply, Opened):
            raise VerifierError(int(ErrorCode.INTERNAL), f"expected Opened, got {type(reply).__name__}")
        return sid, reply

    def end(self, sid: bytes) -> None:
        """Tell the server the decision is over and forget the session."""
        self.send(sid, Close())
        with self._lock:
            self._inbox.pop(sid, None)

    def send(self, sid: bytes, message: Message) -> None:
        frames = encode(Envelope(sid, message))
        with self._lock:
            t = self.traffic.get(sid)
            if t is not None:
                t.add(sum(len(f) for f in frames), up=True)
        self._io.submit("up", frames, shape=self.config.uplink)

    def receive(self, sid: bytes, timeout_s: float | None = None) -> Message:
        """The session's next message; raises VerifierError for an error reply, VerifierTimeout when
        nothing arrives within ``timeout_s`` (default: the reply timeout), VerifierLost at once when the
        link is or becomes known dead (a reply already received is still returned first)."""
        timeout_s = self.config.reply_timeout_s if timeout_s is None else timeout_s
        with self._lock:
            box = self._inbox.get(sid)
        if box is None:
            raise KeyError("unknown or ended session")
        if box.empty():
            state = self.link_state()
            if state.dead:
                raise self._lost_error(state.reason)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg = box.get(timeout=min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic())))
                break
            except queue.Empty:
                if self.handshake_failure is not None:
                    raise VerifierAuthError(f"cannot talk to the verifier at {self.config.endpoint}: "
                                            f"{self.handshake_failure}") from None
                if time.monotonic() >= deadline:
                    malformed = self.counters["malformed"]
                    raise VerifierTimeout(f"no reply from the verifier at {self.config.endpoint} within "
                                          f"{timeout_s:.1f} s"
                                          + (f" ({malformed} malformed frames received)" if malformed else "")) \
                        from None
        if isinstance(msg, LostMarker):
            raise self._lost_error(msg.reason)
        if isinstance(msg, Error):
            raise VerifierError(msg.code, msg.message)
        return msg

    # --- I/O thread --------------------------------------------------------------------------
    def take(self, sid: bytes) -> list[Message]:
        """The session's replies received so far, without waiting (errors included, not raised; the
        link's death is told by ``on_link_change``, not here)."""
        with self._lock:
            box = self._inbox.get(sid)
        out = []
        while box is not None:
            try:
                msg = box.get_nowait()
            except queue.Empty:
                break
            if not isinstance(msg, LostMarker):
                out.append(msg)
        return out

    def _on_frames(self, frames: list[bytes]) -> None:
        self._receive(frames)
        if self._on_replies is not None:
            self._on_replies()

    def _receive(self, frames: list[bytes]) -> None:
        try:
            env = decode(frames)
        except WireError as exc:
            self.counters["malformed"] += 1
            log.warning("dropped a malformed frame set from the verifier: %s", exc)
            return
        # every frame is a sign of life: a Pong, a decision's reply, an older server's Error to a Ping
        seq = env.message.seq if isinstance(env.message, Pong) else None
        self._link_event(lambda hb, now: hb.heard(now, seq))
        if env.session == self._heartbeat_sid:
            self.counters["pongs" if isinstance(env.message, Pong) else "ping_errors"] += 1
            return
        with self._lock:
            box = self._inbox.get(env.session)
            t = self.traffic.get(env.session)
            if t is not None:
                t.add(sum(len(f) for f in frames), up=False)
        if box is None:
            self.counters["unknown_session"] += 1
            if env.session == bytes(16) and isinstance(env.message, Error):
                log.warning("verifier: %s", env.message.message)
            return
        box.put(env.message)
