"""bridge_node: owns the ZeroMQ link to the cloud verifier.

Subscribes  edge_spec/decision_request (DecisionRequest), edge_spec/draft (DraftBlock), on a
            receiver thread of its own (not the executor); logs "<topic>: N publisher(s) matched"
            first and at each change in the publishers of either matched on its side
Publishes   edge_spec/exit_result (ExitResult, every exit as it arrives), edge_spec/bridge_status,
            /diagnostics (diagnostic_msgs/DiagnosticArray, every ``diagnostics_period_s`` and at once
            when the link dies or recovers: the verifier link: alive / dead and why, time since the
            verifier was last heard, the heartbeat's round trip, last round trip, τ, α and the
            pre-draft cache miss rate r of the latest decision (from edge_spec/stats, which it
            subscribes), errors and the last one)

Link health: the bridge's ZeroMQ client keeps a heartbeat with the verifier, decisions or none
(``heartbeat_interval_s``, ``heartbeat_timeout_s``; edge/client.py, wire/heartbeat.py). When the link
dies (a SIGKILLed verifier: at once, its connection closes; a hung or unreachable one: a ping
unanswered for ``heartbeat_timeout_s``) the bridge publishes LINK_LOST with code
``VerifierLost.CODE`` (-3) and the reason for every open decision and once for decision 0 (no
decision: the action node stops a motion in progress), /diagnostics at ERROR at once, and answers
every OPEN with the same LINK_LOST until the link is alive again; the drafter's link fails the
decision in progress at once (nodes/ros_link.py) and does not open it again. A decision that gets no
reply within its open or reply timeout while the heartbeat is answered (a slow verifier) is reported
LINK_LOST with code 0, as before: the drafter may open it again.

A managed node (nodes/managed.py): configure connects the ZeroMQ client (its heartbeat starts) and
the receiver (unconfigured, nobody takes requests); activate opens decisions; an OPEN while the node
is inactive is answered ERROR (``INACTIVE_CODE``) at once; deactivate ends every open decision with that ERROR (the drafter's
decision in progress fails at once); cleanup closes the receiver and the client. /diagnostics
(``bridge: verifier link``, nodes/diagnostics.py naming) is published in every state: STALE
"unconfigured" before configure.

Messages are converted by nodes/wire_ros.py; a verifier's reply that a ROS message cannot hold (a
layer over uint16, say) reaches the drafter as an ERROR (``ErrorCode.INTERNAL``) of its decision.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

from edge_spec_ros.edge.client import (
    HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S, ClientConfig, VerifierAuthError, VerifierClient,
    VerifierError, VerifierLost,
)
from edge_spec_ros.msg import BridgeStatus, DecisionRequest
from edge_spec_ros.msg import DecodeStats as DecodeStatsMsg, DraftBlock as DraftBlockMsg, ExitResult as ExitResultMsg
from edge_spec_ros.nodes.diagnostics import ERROR, OK, STALE, WARN, Diagnostics, Report
from edge_spec_ros.nodes.lifecycle import main_for
from edge_spec_ros.nodes.managed import ManagedConfig, ManagedNode
from edge_spec_ros.nodes.matched import matched_line
from edge_spec_ros.nodes.params import declare_config, doc
from edge_spec_ros.nodes.ros_link import MATCH_WAIT_S, OPEN_RETRY_S, RELIABLE, Receiver, unmatched
from edge_spec_ros.nodes.wire_ros import LinkLost, from_ros, session_id, to_ros
from edge_spec_ros.wire.curve import client_keys
from edge_spec_ros.wire.emulator import LinkShape
from edge_spec_ros.wire.heartbeat import LinkState
from edge_spec_ros.wire.messages import Close, Error, ErrorCode, ExitResult, Opened, Tokens

POLL_S = 0.1  # how often a session's watcher looks at the link (and for shutdown)
NO_DECISION = 0  # the decision id of a link-wide status (the drafter's decisions start at 1)
# A draft for a decision not open yet waits this long for its OPEN: a decision's first block leaves right
# behind its OPEN (edge/first_block.py), on another topic, and DDS orders one topic's messages, not two's;
# longer than the drafter's link takes to repeat an OPEN it heard no answer to
EARLY_DRAFT_WAIT_S = 2.5 * OPEN_RETRY_S
INACTIVE_CODE = -4  # BridgeStatus.code of an ERROR: the bridge is not active (negative: the bridge's own codes,
# beside -1, a reply timeout, and VerifierLost.CODE; not retried by the decoder)


@dataclass(frozen=True)
class BridgeConfig:
    verifier_endpoint: str = field(default="tcp://127.0.0.1:5555", metadata=doc("ZeroMQ endpoint of the verifier"))
    open_timeout_s: float = field(default=30.0, metadata=doc("wait for the verifier's prefill (s)", 0.1, 3600.0))
    reply_timeout_s: float = field(default=10.0, metadata=doc("wait for a verification result (s)", 0.1, 3600.0))
    curve_secret_file: str = field(default="", metadata=doc("robot's CURVE secret key file; empty: no CURVE"))
    curve_server_key_file: str = field(default="", metadata=doc("verifier's CURVE public key file"))
    # the emulated link, both directions: emulate_<field> of wire.emulator.LinkShape (benchmarks and tests)
    emulate_delay_s: float = field(default=0.0, metadata=doc("emulated one-way delay, both directions (LinkShape.delay_s)", 0.0, 10.0))
    emulate_jitter_s: float = field(default=0.0, metadata=doc("emulated jitter (LinkShape.jitter_s)", 0.0, 10.0))
    emulate_bandwidth_bps: float = field(default=0.0, metadata=doc("emulated bandwidth cap (LinkShape.bandwidth_bps; "
                                                                   "0: none)", 0.0, 1000000000000.0))
    emulate_loss: float = field(default=0.0, metadata=doc("emulated loss probability, each loss costs a "
                                                          "retransmission (LinkShape.loss)", 0.0, 0.99))
    diagnostics_period_s: float = field(default=1.0, metadata=doc("/diagnostics period (steady clock, s)", 0.1, 60.0))
    heartbeat_interval_s: float = field(default=HEARTBEAT_INTERVAL_S, metadata=doc(
        "a heartbeat ping to the verifier this often, decisions or none (s)", 0.05, 10.0))
    heartbeat_timeout_s: float = field(default=HEARTBEAT_TIMEOUT_S, metadata=doc(
        "the verifier is lost when a ping goes unanswered this long (s; more than the interval, and more than "
        "one draft block takes on the uplink)", 0.1, 60.0))

    def __post_init__(self) -> None:
        if not self.heartbeat_interval_s < self.heartbeat_timeout_s:
            raise ValueError(f"heartbeat_interval_s ({self.heartbeat_interval_s}) must be less than "
                             f"heartbeat_timeout_s ({self.heartbeat_timeout_s})")


PARAMETER_CONFIGS = (BridgeConfig, ManagedConfig)


@dataclass
class _LinkHealth:
    """What /diagnostics reports about the verifier link (see BridgeNode.publish_diagnostics)."""

    replies: int = 0  # verifier replies (Opened, exits, tokens) since the start
    last_reply_s: float = 0.0  # steady clock of the last one
    round_trip_s: float | None = None  # the last request or draft → its final answer (s, with the server's compute)
    server_s: float = 0.0  # the server's compute in that round trip (s)
    lost: bool = False  # LINK_LOST and no reply since
    errors: int = 0  # ERROR and LINK_LOST statuses
    last_error: str = ""
    stats: DecodeStatsMsg | None = None  # the latest decision's statistics (edge_spec/stats)


class _Session:
    def __init__(self, decision: int, sid: bytes, timeout_s: float, stamp: tuple[int, int] = (0, 0)) -> None:
        self.decision = decision
        self.sid = sid
        self.stamp = stamp  # the OPEN's header stamp: a repeat of it (same decision, same stamp) is no new session
        self.answer: Opened | Error | LinkLost | None = None  # the status that answered the OPEN, for a repeat
        self.closed = threading.Event()
        self.waiting_since: float | None = None  # a request is outstanding since then (or since its last reply)
        self.sent_at: float | None = None  # the outstanding request or draft left then (for the round trip)
        self.timeout_s = timeout_s  # how long a request may go unanswered (open, then reply timeout)
        self.thread: threading.Thread | None = None  # watches for a silent verifier
        self.on_verifier = True  # its Open went to the verifier (not answered LINK_LOST by the bridge itself)
        self.drafts = 0  # drafts forwarded to the verifier


class BridgeNode(ManagedNode):
    def __init__(self) -> None:
        super().__init__("bridge")
        self.config = declare_config(self, BridgeConfig)
        self.sessions: dict[int, _Session] = {}
        self._early: dict[int, list[tuple[float, DraftBlockMsg]]] = {}  # decision -> drafts ahead of its OPEN
        self.client: VerifierClient | None = None  # configure() .. cleanup()
        self._receiver: Receiver | None = None
        self.results = self.create_publisher(ExitResultMsg, "edge_spec/exit_result", RELIABLE)
        self.status = self.create_publisher(BridgeStatus, "edge_spec/bridge_status", RELIABLE)
        self._diagnostics_init()

    # --- lifecycle (nodes/managed.py) ------------------------------------------------------------
    def configure(self) -> None:
        """Connect: the ZeroMQ client (its heartbeat starts) and the receiver of requests and drafts."""
        c = self.config
        shape = LinkShape(c.emulate_delay_s, c.emulate_jitter_s, c.emulate_bandwidth_bps, c.emulate_loss)
        curve = client_keys(c.curve_secret_file, c.curve_server_key_file) if c.curve_secret_file else None
        self.client = VerifierClient(ClientConfig(
            endpoint=c.verifier_endpoint, open_timeout_s=c.open_timeout_s, reply_timeout_s=c.reply_timeout_s,
            uplink=None if shape.ideal else shape, downlink=None if shape.ideal else shape, curve=curve,
            heartbeat_interval_s=c.heartbeat_interval_s, heartbeat_timeout_s=c.heartbeat_timeout_s),
            self._on_replies)
        # requests and drafts are served by a thread of their own (one wake-up less than the executor)
        self._receiver = receiver = Receiver(self)
        self._receiver.subscribe(DecisionRequest, "edge_spec/decision_request", self.on_request, RELIABLE,
                                 on_matched=self._matched_logger("decision_request"))
        drafts = self._receiver.subscribe(DraftBlockMsg, "edge_spec/draft", self.on_draft, RELIABLE,
                                          on_matched=self._matched_logger("draft"))
        # the ends of the bridge's side that a decision needs matched before it starts (see on_request)
        self._ends = {"exit_result publisher": self.results.get_subscription_count,
                      "bridge_status publisher": self.status.get_subscription_count,
                      "draft subscription": lambda: receiver.publisher_count(drafts)}
        self._receiver.start("bridge-receiver")
        self.client.on_link_change(self._on_link)  # after the publishers: it publishes
        self.diagnostics.publish()  # the link's state now (a change before the line above was not heard)
        self.get_logger().info(f"bridging to the verifier at {c.verifier_endpoint}")

    def deactivate(self) -> None:
        """End every open decision (ERROR ``INACTIVE_CODE``: the drafter's decision fails at once)."""
        self._end_sessions(f"the bridge was {self.lifecycle_state == 'finalized' and 'shut down' or 'deactivated'}")

    def cleanup(self) -> None:
        """End the receiver and every session's watcher (joined), then the verifier client."""
        if self._receiver is not None:
            self._receiver.close()
        self._end_sessions("")
        if self.client is not None:
            self.client.close()
        self._receiver = self.client = None
        self.diagnostics.publish()

    def _end_sessions(self, why: str) -> None:
        sessions, self.sessions = list(self.sessions.values()), {}
        for session in sessions:
            session.closed.set()
            if why:
                self._publish_status(session.decision, Error(INACTIVE_CODE, why))
            if session.on_verifier and self.client is not None:
                self.client.end(session.sid)
        for session in sessions:
            if session.thread is not None:
                session.thread.join(timeout=2 * POLL_S + 1.0)

    def _matched_logger(self, topic: str):
        """Log each change in the publishers of ``topic`` matched on the bridge's side. A drafter's
        publisher that counts the bridge's subscription (``get_subscription_count``) may not be
        matched here yet, and a request it publishes in between is lost: wait for this line."""
        def log(count: int) -> None:
            self.get_logger().info(matched_line(topic, count))
        return log

    def on_request(self, msg: DecisionRequest) -> None:
        request = from_ros(msg)
        if not isinstance(request, Close) and not self.active:
            self.get_logger().warning(f"decision {msg.decision} refused: the bridge is {self.lifecycle_state}")
            self._publish_status(msg.decision, Error(INACTIVE_CODE, f"the bridge is {self.lifecycle_state}"))
            return
        if isinstance(request, Close):
            session = self.sessions.pop(msg.decision, None)
            if session is not None:
                session.closed.set()
                if session.on_verifier:
                    self.client.end(session.sid)
            return
        stamp = (msg.header.stamp.sec, msg.header.stamp.nanosec)
        current = self.sessions.get(msg.decision)
        if current is not None and current.stamp == stamp:  # the link repeats an OPEN it heard no answer to
            answer = current.answer
            if answer is not None:  # answered: the answer may have been lost, say it again
                self._publish_status(msg.decision, answer)
            return  # else the verifier's answer is on its way
        # the drafter's first draft, or the answer to this OPEN, sent before this side has matched the
        # drafter's reader or writer is lost: wait for the match (at once once matched; the drafter has
        # waited for its own side)
        missing = unmatched(self._ends, MATCH_WAIT_S)
        if missing:
            self.get_logger().warning(f"opening decision {msg.decision} although no drafter is matched yet "
                                      f"by: {', '.join(missing)}")
        sid = session_id(msg.decision)
        session = self.sessions[msg.decision] = _Session(msg.decision, sid, self.config.open_timeout_s, stamp)
        link = self.client.link_state()
        if link.dead:  # the verifier is known gone: the decision fails now, nothing is sent
            session.on_verifier = False
            session.answer = self._lost_answer(link)
            self._publish_status(msg.decision, session.answer)
            return
        self.client.register(sid)
        session.waiting_since = session.sent_at = time.monotonic()
        self.client.send(sid, self.client.with_priority(self.client.with_downlink(request)))
        session.thread = threading.Thread(target=self._watch, args=(session,), name=f"bridge-{msg.decision}",
                                          daemon=True)
        session.thread.start()
        for _, early in self._early.pop(msg.decision, []):  # its first block, come ahead of it
            self._forward_draft(early)

    def on_draft(self, msg: DraftBlockMsg) -> None:
        try:
            self._forward_draft(msg)
        except (ValueError, TypeError) as exc:  # a malformed message: dropped, the bridge keeps going
            self.get_logger().warning(f"malformed edge_spec/draft for decision {msg.decision} dropped: {exc}")
            self._publish_status(msg.decision, Error(3, f"malformed draft: {exc}"))

    def _forward_draft(self, msg: DraftBlockMsg) -> None:
        """Send a draft to the verifier on its decision's session. A draft for a decision not open yet
        waits for its OPEN (``EARLY_DRAFT_WAIT_S``; then it is answered as belonging to no decision)."""
        now = time.monotonic()
        self._expire_early(now)
        session = self.sessions.get(msg.decision)
        if session is None:
            from_ros(msg)  # a malformed draft is refused now, not held
            self._early.setdefault(msg.decision, []).append((now, msg))
            self.get_logger().info(f"draft of decision {msg.decision} round {msg.round} came ahead of its OPEN: "
                                   "held for it")
            return
        out = from_ros(msg)
        if session.waiting_since is None:
            session.waiting_since = now
        if session.sent_at is None:
            session.sent_at = now
        session.drafts += 1
        self.client.send(session.sid, out)

    def _expire_early(self, now: float) -> None:
        """Answer the drafts that waited ``EARLY_DRAFT_WAIT_S`` for an OPEN that did not come."""
        for decision in [d for d, held in self._early.items() if now - held[0][0] > EARLY_DRAFT_WAIT_S]:
            del self._early[decision]
            self._publish_status(decision, Error(3, "draft for a decision that is not open"))

    def _on_replies(self) -> None:
        """On the client's I/O thread, after every frame set from the verifier: publish what the open
        sessions received, in order, at once (no hand-off to another thread)."""
        if self.client is None:
            return
        for session in list(self.sessions.values()):
            for msg in self.client.take(session.sid):
                self._publish_reply(session, msg)

    def _publish_reply(self, session: _Session, msg) -> None:
        try:
            self._relay(session, msg)
        except (ValueError, TypeError) as exc:  # wire_ros: a value the ROS message cannot hold
            self.get_logger().error(f"decision {session.decision}: the verifier's {type(msg).__name__} "
                                    f"cannot travel through ROS: {exc}")
            self._relay(session, Error(int(ErrorCode.INTERNAL), f"the verifier's {type(msg).__name__} cannot "
                                                                 f"travel through ROS: {exc}"))

    def _relay(self, session: _Session, msg) -> None:
        """Publish one verifier reply of ``session`` (converted before anything of the session changes)."""
        if isinstance(msg, ExitResult):
            self._publish_exit(session.decision, msg)
            if msg.is_final:
                session.waiting_since = session.sent_at = None
        elif isinstance(msg, Tokens):
            self._publish_exit(session.decision, msg)
            # the watchdog restarts at every token; the round trip runs from the request to its last token
            session.waiting_since = None if msg.is_final else time.monotonic()
            if msg.is_final:
                session.sent_at = None
        elif isinstance(msg, Error):
            answer = Error(msg.code, str(VerifierError(msg.code, msg.message)))
            self._publish_status(session.decision, answer)
            if session.answer is None:
                session.answer = answer
            session.waiting_since = session.sent_at = None
        else:  # Opened
            self._publish_status(session.decision, msg)
            session.timeout_s = self.config.reply_timeout_s
            # a first block sent right behind the OPEN is outstanding: its wait starts now
            session.waiting_since = time.monotonic() if session.drafts else None
            session.sent_at = None
            session.answer = msg

    def _watch(self, session: _Session) -> None:
        """Report a silent verifier (LINK_LOST) or a failed handshake (ERROR) of one decision."""
        while not session.closed.wait(POLL_S):
            handshake = self.client.handshake_failure
            if handshake is not None:
                exc = VerifierAuthError(f"cannot talk to the verifier at {self.config.verifier_endpoint}: {handshake}")
                self._publish_status(session.decision, Error(exc.code, str(exc)))
                session.waiting_since = None
                continue
            waited = session.waiting_since
            if waited is not None and time.monotonic() - waited > session.timeout_s:
                self._publish_status(session.decision, LinkLost(
                    f"no reply from {self.config.verifier_endpoint} within {session.timeout_s:.1f} s"))
                self.get_logger().error(f"decision {session.decision}: verifier silent for {session.timeout_s:.1f} s")
                session.waiting_since = None

    def _lost_answer(self, link: LinkState) -> Error | LinkLost:
        """The status of a decision on a dead link (a refused handshake, which also closes the
        connection, is told as the ERROR it is)."""
        handshake = self.client.handshake_failure
        if handshake is not None:
            exc = VerifierAuthError(f"cannot talk to the verifier at {self.config.verifier_endpoint}: {handshake}")
            return Error(exc.code, str(exc))
        return LinkLost(f"verifier at {self.config.verifier_endpoint} lost: {link.reason}", VerifierLost.CODE)

    def _on_link(self, link: LinkState) -> None:
        """The client's heartbeat saw the link die or come back (on the client's threads). Dead: every
        open decision ends now (LINK_LOST, code VerifierLost.CODE), and the action node stops a motion
        in progress (the same status for decision 0); either way /diagnostics tells it at once."""
        if link.dead:
            answer = self._lost_answer(link)
            self.get_logger().error(answer.message)
            for session in list(self.sessions.values()):
                if session.on_verifier and not session.closed.is_set():
                    session.waiting_since = session.sent_at = None
                    if session.answer is None:  # a repeat of an OPEN not yet answered hears the same
                        session.answer = answer
                    self._publish_status(session.decision, answer)
            self._publish_status(NO_DECISION, answer)
        elif link.alive:
            self.get_logger().info(f"verifier at {self.config.verifier_endpoint} answers the heartbeat"
                                   + (f" (round trip {link.rtt_s * 1e3:.1f} ms)" if link.rtt_s is not None else ""))
        self.diagnostics.publish()

    def _publish_exit(self, decision: int, r: ExitResult | Tokens) -> None:
        out = to_ros(decision, r, self.get_clock().now().to_msg())
        self._note_reply(decision, r)
        self.results.publish(out)

    def _publish_status(self, decision: int, reply: Opened | Error | LinkLost) -> None:
        out = to_ros(decision, reply, self.get_clock().now().to_msg())
        self._note_status(out.state, out.message, out.code)
        self.status.publish(out)

    # --- /diagnostics: the verifier link's health ---------------------------------------------------
    def _diagnostics_init(self) -> None:
        self._health = _LinkHealth()
        self._health_lock = threading.Lock()  # the sessions' threads note, the timer reads
        self.create_subscription(DecodeStatsMsg, "edge_spec/stats", self._note_stats, RELIABLE)
        # every diagnostics_period_s on the steady clock (also while simulated time stands), and at once
        # when the link dies or recovers
        self.diagnostics = Diagnostics(self, hardware_id=self.config.verifier_endpoint,
                                       period_s=self.config.diagnostics_period_s)
        self.diagnostics.add("verifier link", self.link_report)

    def _note_reply(self, decision: int, r: ExitResult | Tokens) -> None:
        session = self.sessions.get(decision)
        sent = session.sent_at if session is not None else None
        with self._health_lock:
            h = self._health
            h.replies += 1
            h.last_reply_s = time.monotonic()
            h.lost = False
            if r.is_final and sent is not None:  # request or draft → the final exit's answer
                h.round_trip_s, h.server_s = h.last_reply_s - sent, float(r.compute_s)

    def _note_status(self, state: int, message: str, code: int = 0) -> None:
        with self._health_lock:
            h = self._health
            if state == BridgeStatus.OPENED:
                h.replies += 1
                h.last_reply_s, h.lost = time.monotonic(), False
            elif state == BridgeStatus.LINK_LOST and message == h.last_error[len("link lost: "):]:
                pass  # the same loss told to several decisions: one error
            else:
                h.errors += 1
                # a decision's reply timeout; the heartbeat's loss is the link's state (client.link_state())
                h.lost = h.lost or (state == BridgeStatus.LINK_LOST and code != VerifierLost.CODE)
                h.last_error = f"{'link lost' if state == BridgeStatus.LINK_LOST else 'error'}: {message}"

    def _note_stats(self, msg: DecodeStatsMsg) -> None:
        with self._health_lock:
            self._health.stats = msg

    def link_report(self) -> Report:
        """The verifier link's health, for /diagnostics (``<node>: verifier link``)."""
        with self._health_lock:
            h = replace(self._health)
        if self.client is None:
            return Report(STALE, self.lifecycle_state, {"connected": "unknown", "lifecycle": self.lifecycle_state,
                                                        "endpoint": self.config.verifier_endpoint})
        handshake = self.client.handshake_failure
        link = self.client.link_state()
        if handshake or link.dead:
            level, connected = ERROR, "false"
            message = f"handshake failed: {handshake}" if handshake else f"verifier lost: {link.reason}"
        elif h.lost:  # the heartbeat is answered, but a decision's reply did not come within its timeout
            level, connected, message = WARN, "true", f"alive, but {h.last_error}"
        elif link.alive:
            level, message, connected = OK, "connected", "true"
        else:
            level, connected, message = STALE, "unknown", "connecting (no answer to the heartbeat yet)"
        s = h.stats
        values = {
            "connected": connected,
            "link": link.state,
            "link_reason": link.reason,
            "since_heard_s": f"{link.since_heard_s:.3f}" if link.since_heard_s is not None else "",
            "heartbeat_rtt_s": f"{link.rtt_s:.4f}" if link.rtt_s is not None else "",
            "endpoint": self.config.verifier_endpoint,
            "replies": h.replies,
            "last_reply_age_s": f"{time.monotonic() - h.last_reply_s:.3f}" if h.replies else "",
            "round_trip_s": f"{h.round_trip_s:.4f}" if h.round_trip_s is not None else "",
            "server_compute_s": f"{h.server_s:.4f}" if h.round_trip_s is not None else "",
            "open_sessions": len(self.sessions),
            "decision": s.decision if s is not None else "",
            "mode": s.mode if s is not None else "",
            "tau": f"{s.tau:.3f}" if s is not None else "",
            "alpha": f"{s.alpha:.3f}" if s is not None else "",
            "cache_miss_rate": f"{s.miss_rate:.3f}" if s is not None else "",
            "errors": h.errors,
            "last_error": handshake or (f"link lost: {link.reason}" if link.dead else h.last_error),
            "lifecycle": self.lifecycle_state,
        }
        return Report(level, message, values)


def main(args: list[str] | None = None) -> int:
    return main_for(BridgeNode, args=args)


if __name__ == "__main__":
    raise SystemExit(main())
