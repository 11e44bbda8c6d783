"""The drafter's link to the verifier through the bridge node, over ROS topics.

It implements the verifier-link protocol (``wire.verifier_link.VerifierLink``) as the ZeroMQ client
does, so ``edge.modes.EdgeDecoder`` runs unchanged whether the robot talks to ZeroMQ directly or
through the bridge. Wire messages travel as the package's interfaces (msg/), converted by
nodes/wire_ros.py. The bridge's
heartbeat (nodes/bridge_node.py) tells a lost verifier as LINK_LOST with code ``VerifierLost.CODE``:
the wait in progress (open or receive) raises ``VerifierLost`` at once, and the decoder does not open
the decision again.

The first block rides with the Open here too (``open_with``, ``edge.first_block``): the OPEN travels on
``edge_spec/decision_request`` and the block right behind it on ``edge_spec/draft``. DDS orders the
messages of one topic, not those of two, so the block may reach the bridge first: the bridge holds a
draft for a decision it has not opened yet until its OPEN comes (``bridge_node.EARLY_DRAFT_WAIT_S``) and
forwards it right behind it. The same on the way back: the block's exit results (``edge_spec/exit_result``)
may come ahead of the decision's OPENED (``edge_spec/bridge_status``); the link holds them and delivers
them right behind it.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace

import rclpy
from rclpy.exceptions import InvalidHandle
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, HistoryPolicy

from edge_spec_ros.msg import BridgeStatus, DecisionRequest, DraftBlock as DraftBlockMsg, ExitResult as ExitResultMsg
from edge_spec_ros.nodes.compat import publisher_count
from edge_spec_ros.nodes.wire_ros import LinkLost, decision_of, from_ros, session_id, to_ros
from edge_spec_ros.wire.codec import encoded_size
from edge_spec_ros.wire.messages import Close, DraftBlock, Error, ErrorCode, Generate, Message, Open, Opened
from edge_spec_ros.wire.verifier_link import Traffic, VerifierError, VerifierLost, VerifierTimeout, send_first

# Drafts and results must not be dropped or reordered.
RELIABLE = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
RECEIVER_WAIT_S = 0.5  # longest sleep of a Receiver's thread with nothing arriving (closing wakes it at once)
PUMP_SLICE_S = 0.1  # longest wait of a receive taking the replies, before it looks at its deadline again
FOLLOW_SLICE_S = 0.005  # a receive waiting while another thread takes the replies looks again this often
# An OPEN unanswered this long is published again, the same (decision, stamp): one published before the
# bridge's reader has matched the link's writer is lost, and the bridge answers a repeat, not a second session.
OPEN_RETRY_S = 2.0
# How long an end waits, before its first message of a decision, for every topic of the exchange to have
# matched the other end on its side (writer and reader match separately; DDS drops what either has not).
MATCH_WAIT_S = 5.0
MATCH_POLL_S = 0.01


@dataclass
class _Matched:
    """A Receiver's subscription whose matched publishers are reported to ``report`` at each change."""

    sub: object
    node: Node
    report: Callable[[int], None]
    count: int | None = None

    def look(self) -> None:
        count = publisher_count(self.node, self.sub)
        if count != self.count:
            self.count = count
            self.report(count)


_receivers = itertools.count(1)


class Receiver:
    """Subscriptions served without the node's executor: by a thread of their own (``start()``), or by
    whoever calls ``pump()``.

    The subscriptions live on a node of the receiver's own (``<owner name>_receiver``, in the owner's
    namespace, topic names resolved and remapped as the owner resolves them; no parameter services, no
    rosout), added to an executor of the receiver's own: public rclpy API only (rclpy's wait sets are
    not, and they change between Humble, Jazzy and Kilted). A pump runs that executor: it waits up to
    its timeout for a message, then takes every message ready and calls its callback at once, in the
    order each topic delivers, on the pumping thread. Messages so reach their consumer without queueing
    behind the owner's other callbacks (camera frames, timers) in the owner's executor. ``close()`` ends
    the pumping (a pump in progress returns) and destroys the receiver's node."""

    def __init__(self, node: Node) -> None:
        self.owner = node
        self.node = rclpy.create_node(
            f"{node.get_name()}_receiver" + ("" if (n := next(_receivers)) == 1 else f"_{n}"),
            namespace=node.get_namespace(), context=node.context, use_global_arguments=False,
            enable_rosout=False, start_parameter_services=False)
        self._executor = SingleThreadedExecutor(context=node.context)
        self._executor.add_node(self.node)
        self.subscriptions: list = []
        self._matched: list[_Matched] = []
        self._closed = False
        self._taken = 0  # messages handed to callbacks so far (a pump takes until a spin takes none)
        self._pumping = threading.Lock()  # one pump at a time; close() destroys the node outside a pump
        self._thread: threading.Thread | None = None
        node.context.on_shutdown(self.close)

    def subscribe(self, msg_type, topic: str, callback: Callable, qos: QoSProfile,
                  on_matched: Callable[[int], None] | None = None):
        """Before the first pump: a subscription whose messages go to ``callback`` (on the pumping
        thread). ``on_matched(n)``, also on the pumping thread, hears how many publishers this
        subscription has matched, first and at each change (looked at whenever a pump takes nothing:
        every ``RECEIVER_WAIT_S`` at least on a receiver thread of its own). A message a publisher
        sends before it is matched here is lost, whatever the publisher's own count says."""
        def take(msg) -> None:
            self._taken += 1
            try:
                callback(msg)
            except Exception:  # noqa: BLE001 - one bad message must not end the receiving
                self.owner.get_logger().error(f"error in a callback of {sub.topic_name}:\n{traceback.format_exc()}")

        sub = self.node.create_subscription(msg_type, self.owner.resolve_topic_name(topic), take, qos)
        self.subscriptions.append(sub)
        if on_matched is not None:
            self._matched.append(_Matched(sub, self.node, on_matched))
        return sub

    def publisher_count(self, sub) -> int:
        """How many publishers ``sub`` (one of this receiver's) has matched (``nodes.compat``: the
        graph on Humble, whose rclpy has no ``Subscription.get_publisher_count``)."""
        node = self.node
        return publisher_count(node, sub) if node is not None else 0

    def start(self, name: str) -> None:
        """Pump on a thread of the receiver's own until ``close()``."""
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """End the pumping: a pump in progress returns, the receiver's thread (if any) is joined, the
        receiver's node destroyed."""
        self._closed = True
        try:
            self._executor.wake()
        except Exception:  # noqa: BLE001 - the context is gone already: the wait ends by itself
            pass
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=2 * RECEIVER_WAIT_S)
        if self._pumping.acquire(timeout=2 * RECEIVER_WAIT_S):
            try:
                if self.node is not None:
                    node, self.node = self.node, None
                    self._executor.remove_node(node)
                    node.destroy_node()
                    self._executor.shutdown(timeout_sec=0)
            except Exception:  # noqa: BLE001 - the context was shut down first: nothing left to free
                pass
            finally:
                self._pumping.release()

    def pump(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` (0: not at all) for messages, then take every one ready and call its
        callback. One thread at a time. False once closed (or the context is shutting down)."""
        if self._closed:
            return False
        with self._pumping:
            if self._closed or self.node is None:
                return False
            try:
                before = self._taken
                self._executor.spin_once(timeout_sec=max(0.0, timeout_s))
                if self._taken == before:
                    for watch in self._matched:
                        watch.look()
                while not self._closed and self._taken != before:  # the rest of what is ready, at once
                    before = self._taken
                    self._executor.spin_once(timeout_sec=0.0)
            except (ExternalShutdownException, InvalidHandle, RuntimeError):  # RuntimeError: rcl's, shutting down
                return False
        return not self._closed

    def _run(self) -> None:
        try:
            while self.pump(RECEIVER_WAIT_S):
                pass
        except Exception as exc:  # noqa: BLE001 - the context was shut down under the thread
            if not self._closed:
                self.owner.get_logger().error(f"receiver thread {threading.current_thread().name} ended: {exc!r}")


def unmatched(ends: dict[str, Callable[[], int]], timeout_s: float) -> list[str]:
    """Wait up to ``timeout_s`` until every end (a publisher's ``get_subscription_count`` or a
    subscription's ``get_publisher_count``) counts at least one match on its side; return the names of
    those that still count none (empty: all matched). Returns at once when all have matched already."""
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [name for name, count in ends.items() if count() < 1]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(MATCH_POLL_S)


class RosVerifierLink:
    """``first_decision``: the decision id (the session id on the verifier) of the first ``open``; the
    next ones count up from it."""

    def __init__(self, node: Node, open_timeout_s: float, reply_timeout_s: float, first_decision: int = 1) -> None:
        self.node = node
        self.open_timeout_s = open_timeout_s
        self.reply_timeout_s = reply_timeout_s
        self.traffic: dict[bytes, Traffic] = {}
        self._inbox: dict[int, queue.Queue] = {}
        self._lock = threading.Lock()
        self._next = first_decision
        self._closed = False
        self._opened: set[int] = set()  # decisions whose OPENED has been delivered (a repeat's is dropped)
        self._early: dict[int, list[Message]] = {}  # exit results that came ahead of their decision's OPENED
        self.open_retry_s = OPEN_RETRY_S
        self.priority = 0  # Open.priority of the next decisions opened, unless a request sets its own
        self._node = node
        self._requests = node.create_publisher(DecisionRequest, "edge_spec/decision_request", RELIABLE)
        self._drafts = node.create_publisher(DraftBlockMsg, "edge_spec/draft", RELIABLE)
        # the replies are taken by the thread that waits for them (receive), not by the node's executor:
        # no hand-off between threads on the way to the decoder
        self._receiver = Receiver(node)
        results = self._receiver.subscribe(ExitResultMsg, "edge_spec/exit_result", self._on_exit, RELIABLE)
        status = self._receiver.subscribe(BridgeStatus, "edge_spec/bridge_status", self._on_status, RELIABLE)
        # the ends of this side of the exchange: each must count the bridge before a decision starts
        self._ends = {"decision_request publisher": self._requests.get_subscription_count,
                      "draft publisher": self._drafts.get_subscription_count,
                      "exit_result subscription": lambda: self._receiver.publisher_count(results),
                      "bridge_status subscription": lambda: self._receiver.publisher_count(status)}
        self._pumping = threading.Lock()  # held by the receive that takes the replies for everyone

    @property
    def next_decision(self) -> int:
        """The decision id the next ``open`` will use (the session id on the verifier)."""
        return self._next

    def close(self) -> None:
        """Refuse new decisions and wake every receive in progress with an error."""
        with self._lock:
            self._closed = True
            boxes = list(self._inbox.values())
        for box in boxes:
            box.put(Error(int(ErrorCode.INTERNAL), "the drafter is shutting down"))
        self._receiver.close()

    def destroy(self) -> None:
        """Take the link's publishers off the node, after ``close`` and once no decision uses the link
        (its last ``end`` sends a Close): a drafter configured again makes new ones."""
        for publisher in (self._requests, self._drafts):
            self._node.destroy_publisher(publisher)

    def open(self, request: Open) -> tuple[bytes, Opened]:
        return self.open_with(request, None)

    def open_with(self, request: Open, first: Callable[[bytes], None] | None) -> tuple[bytes, Opened]:
        """``open``, calling ``first(sid)`` right after the OPEN is published and before waiting for
        ``Opened``: the decision's first block follows its OPEN (``edge.first_block``). When ``first``
        raises, the decision is closed and the error goes on."""
        with self._lock:
            if self._closed:
                raise VerifierError(int(ErrorCode.INTERNAL), "the drafter is shutting down")
            decision = self._next
            self._next += 1
            self._inbox[decision] = queue.Queue()
        sid = session_id(decision)
        self.traffic[sid] = Traffic()
        # a reply the bridge sends before this side's reader has matched its writer is lost, and the
        # decision would wait out a reply timeout: wait for the match (at once once matched)
        missing = unmatched(self._ends, min(MATCH_WAIT_S, self.open_timeout_s))
        if missing:
            self.node.get_logger().warning(f"opening decision {decision} although the bridge is not matched "
                                           f"yet by: {', '.join(missing)} (is bridge_node running?)")
        try:  # a value the message cannot hold (wire_ros.RangeError) fails the open before anything is sent
            msg = to_ros(decision, replace(request, priority=request.priority or self.priority), self._stamp())
        except (ValueError, TypeError):
            with self._lock:
                self._inbox.pop(decision, None)
            raise
        self._requests.publish(msg)
        self._count(sid, request)
        send_first(self, sid, first)
        deadline = time.monotonic() + self.open_timeout_s
        while True:
            try:
                reply = self.receive(sid, min(self.open_retry_s, max(0.0, deadline - time.monotonic())))
                break
            except VerifierTimeout:
                if time.monotonic() >= deadline:
                    raise VerifierTimeout(f"no reply through the bridge within {self.open_timeout_s:.1f} s "
                                          "(is bridge_node running and the verifier reachable?)") from None
                self.node.get_logger().warning(f"no answer to OPEN of decision {decision} within "
                                               f"{self.open_retry_s:.1f} s; sending it again")
                self._requests.publish(msg)  # the same stamp: the bridge knows it for a repeat
        if not isinstance(reply, Opened):
            raise VerifierError(int(ErrorCode.INTERNAL), f"expected Opened, got {type(reply).__name__}")
        return sid, reply

    def send(self, sid: bytes, message: Message) -> None:
        if not isinstance(message, (DraftBlock, Generate)):
            raise TypeError(f"the bridge link carries drafts and generation requests, not {type(message).__name__}")
        self._drafts.publish(to_ros(decision_of(sid), message, self._stamp()))
        self._count(sid, message)  # after publishing: the bridge relays while this counts

    def receive(self, sid: bytes, timeout_s: float | None = None) -> Message:
        """The session's next reply. The calling thread takes the replies off the topics itself (for
        every session: another session's go to its inbox); while another thread does so, it waits on
        its inbox and takes over within ``FOLLOW_SLICE_S`` when that one returns."""
        timeout_s = self.reply_timeout_s if timeout_s is None else timeout_s
        with self._lock:
            box = self._inbox.get(decision_of(sid))
        if box is None:
            raise KeyError("unknown or ended decision")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg = box.get_nowait()
                break
            except queue.Empty:
                pass
            remaining = deadline - time.monotonic()
            if self._pumping.acquire(blocking=False):
                try:
                    if box.empty() and not self._receiver.pump(min(max(0.0, remaining), PUMP_SLICE_S)) \
                            and box.empty():
                        raise VerifierError(int(ErrorCode.INTERNAL), "the drafter is shutting down")
                finally:
                    self._pumping.release()
            else:
                try:
                    msg = box.get(timeout=min(max(0.0, remaining), FOLLOW_SLICE_S))
                    break
                except queue.Empty:
                    pass
            if remaining <= 0 and box.empty():
                raise VerifierTimeout(f"no reply through the bridge within {timeout_s:.1f} s "
                                      "(is bridge_node running and the verifier reachable?)")
        if isinstance(msg, Error):
            if msg.code == VerifierLost.CODE:
                raise VerifierLost(msg.message)
            raise VerifierError(msg.code, msg.message)
        self._count(sid, msg, up=False)
        return msg

    def end(self, sid: bytes) -> None:
        self._requests.publish(to_ros(decision_of(sid), Close(), self._stamp()))
        self._count(sid, Close())
        with self._lock:
            self._inbox.pop(decision_of(sid), None)
            self._opened.discard(decision_of(sid))
            self._early.pop(decision_of(sid), None)

    def _stamp(self):
        return self.node.get_clock().now().to_msg()

    def _count(self, sid: bytes, message: Message, up: bool = True) -> None:
        """Count the bytes the bridge puts on the wire for ``message``."""
        t = self.traffic.get(sid)
        if t is not None:
            t.add(encoded_size(sid, message), up)

    def _deliver(self, decision: int, message: Message) -> None:
        with self._lock:
            box = self._inbox.get(decision)
        if box is not None:
            box.put(message)

    def _on_exit(self, msg: ExitResultMsg) -> None:
        """An exit result; one that comes ahead of its decision's ``Opened`` (the first block's verdict:
        DDS does not order the two topics) is held and delivered right behind it."""
        reply = from_ros(msg)
        with self._lock:
            early = msg.decision in self._inbox and msg.decision not in self._opened
            if early:
                self._early.setdefault(msg.decision, []).append(reply)
        if not early:
            self._deliver(msg.decision, reply)

    def _on_status(self, msg: BridgeStatus) -> None:
        reply = from_ros(msg)
        if isinstance(reply, Opened):
            with self._lock:  # a repeated OPEN may be answered twice: the first answer counts
                first = msg.decision not in self._opened and msg.decision in self._inbox
                self._opened.add(msg.decision)
                held = self._early.pop(msg.decision, [])
            if first:
                for message in (reply, *held):
                    self._deliver(msg.decision, message)
        elif isinstance(reply, LinkLost) and reply.code == VerifierLost.CODE:
            # the bridge's heartbeat: the verifier is gone; the wait ends now, and is not tried again
            self._deliver(msg.decision, Error(VerifierLost.CODE, reply.message))
        elif isinstance(reply, LinkLost):  # no reply within the bridge's timeout: may be tried again
            self._deliver(msg.decision, Error(-1, f"link to the verifier lost: {reply.message}"))
        else:
            self._deliver(msg.decision, reply)
