"""RosVerifierLink and its Receiver, against a stand-in bridge in the test process: the thread that
waits in ``receive`` takes the replies off the topics itself (not the node's executor), a LINK_LOST
of the bridge's heartbeat ends a waiting receive at once with VerifierLost, every
session's replies reach that session's receive in order when two threads wait at once, an
unanswered OPEN is repeated (same decision and stamp) and a second answer dropped, ``close``
wakes a waiting receive, a silent bridge ends in VerifierTimeout, and the Receiver reports matches
and takes messages on the pumping thread, none of its entities on the executor."""

from __future__ import annotations

import itertools
import os
import threading
import time

import numpy as np
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor

from rosharness import wait_for
from edge_spec_ros.msg import BridgeStatus, DecisionRequest, DraftBlock as DraftBlockMsg, ExitResult as ExitResultMsg
from edge_spec_ros.nodes.ros_link import RELIABLE, Receiver, RosVerifierLink
from edge_spec_ros.nodes.wire_ros import i32
from edge_spec_ros.wire.messages import ExitResult, Open, Tokens
from edge_spec_ros.wire.verifier_link import VerifierError, VerifierLost, VerifierTimeout

_FRESH = itertools.count()
MATCH_S = 30.0  # discovery on a loaded 2-core machine
WAIT_S = 30.0  # a receive's own timeout: generous, the test waits on conditions only
EXITS = 5  # replies per session in the two-thread test


class RobotSide:
    """A node with a RosVerifierLink in a context of its own, spun as drafter_node spins it."""

    def __init__(self) -> None:
        # a namespace per test: an endpoint of an earlier test not yet forgotten by discovery cannot
        # stand in for one of this test's in a matched count
        self.ns = f"/ros_link_test_{os.getpid()}_{next(_FRESH)}"
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("drafter", namespace=self.ns, context=self.context)
        self.link = RosVerifierLink(self.node, WAIT_S, WAIT_S)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.link.close()
        self.executor.shutdown(timeout_sec=2.0)
        self.thread.join(timeout=5.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


class StandInBridge:
    """The bridge's topics in the test harness's node: answers each OPEN with OPENED at once and
    records the requests; replies are published by the test."""

    def __init__(self, ros, ns: str, replies: bool = True) -> None:
        self.node, self.ns = ros.node, ns
        self.requests: list[DecisionRequest] = []
        self.results = self.status = None
        if replies:
            self.add_replies()
        self.sub = ros.node.create_subscription(DecisionRequest, f"{ns}/edge_spec/decision_request",
                                                self._on_request, RELIABLE)
        self.drafted: list[DraftBlockMsg] = []
        self.drafts = ros.node.create_subscription(DraftBlockMsg, f"{ns}/edge_spec/draft", self.drafted.append,
                                                   RELIABLE)
        self.answer_opens = True
        self.lose_opens = 0  # this many OPENs are taken as lost (not answered)
        self.answers_per_open = 1

    def add_replies(self) -> None:
        """The publishers of the replies (a bridge whose reply writers the link has not matched yet)."""
        self.results = self.node.create_publisher(ExitResultMsg, f"{self.ns}/edge_spec/exit_result", RELIABLE)
        self.status = self.node.create_publisher(BridgeStatus, f"{self.ns}/edge_spec/bridge_status", RELIABLE)

    def destroy(self) -> None:
        for pub in (self.results, self.status):
            if pub is not None:
                self.node.destroy_publisher(pub)
        self.node.destroy_subscription(self.sub)
        self.node.destroy_subscription(self.drafts)

    def _on_request(self, msg: DecisionRequest) -> None:
        self.requests.append(msg)
        if msg.command == DecisionRequest.OPEN and self.answer_opens:
            if self.lose_opens > 0:
                self.lose_opens -= 1
                return
            for _ in range(self.answers_per_open):
                self.opened(msg.decision)

    def opened(self, decision: int) -> None:
        out = BridgeStatus()
        out.decision, out.state, out.num_layers, out.exit_layers = decision, BridgeStatus.OPENED, 4, [2, 4]
        self.status.publish(out)

    def exit(self, decision: int, layer: int, tokens: list[int], is_final: bool = False) -> None:
        msg = ExitResultMsg()
        msg.decision, msg.round, msg.layer, msg.is_final = decision, 1, layer, is_final
        msg.tokens = i32(tokens)
        self.results.publish(msg)


def link_subscriptions(robot: RobotSide) -> list:
    return robot.link._receiver.subscriptions


@pytest.fixture
def pair(ros):
    robot = RobotSide()
    bridge = StandInBridge(ros, robot.ns)
    link_subs = link_subscriptions(robot)
    # both ways, on both ends: a message sent before its reader matched the writer is lost, and so is
    # one sent before the writer matched the reader (volatile durability keeps nothing for late readers)
    wait_for(lambda: bridge.sub.get_publisher_count() > 0 and bridge.drafts.get_publisher_count() > 0
             and all(s.get_publisher_count() > 0 for s in link_subs)
             and bridge.results.get_subscription_count() > 0 and bridge.status.get_subscription_count() > 0,
             MATCH_S, "the link and the stand-in bridge to match")
    yield robot, bridge
    robot.close()
    bridge.destroy()


def test_receive_takes_the_replies_itself_not_the_executor(pair):
    robot, bridge = pair
    # the link's subscriptions are out of the executor's reach: on the receiver's own node, which the
    # node's executor does not spin; their messages wait for a receive
    subs = link_subscriptions(robot)
    receiver_node = robot.link._receiver.node
    assert len(subs) == 2 and all(s in receiver_node.subscriptions for s in subs)
    assert receiver_node not in robot.executor.get_nodes() and not list(robot.node.subscriptions)
    assert {s.topic_name for s in subs} == {f"{robot.ns}/edge_spec/exit_result", f"{robot.ns}/edge_spec/bridge_status"}
    sid, opened = robot.link.open(Open(input_ids=np.arange(3, dtype=np.int32)))
    assert opened.num_layers == 4 and opened.exit_layers == (2, 4)
    bridge.exit(1, 2, [7, 8])
    bridge.exit(1, 0, [9], is_final=True)
    first, second = robot.link.receive(sid), robot.link.receive(sid)
    assert isinstance(first, ExitResult) and first.layer == 2 and list(first.tokens) == [7, 8]
    assert isinstance(second, Tokens) and second.is_final and list(second.tokens) == [9]
    robot.link.end(sid)

    def open_then_close() -> bool:  # the OPEN may come again when its answer was slow (a loaded machine)
        commands = [r.command for r in bridge.requests]
        return len(commands) >= 2 and commands[-1] == DecisionRequest.CLOSE \
            and set(commands[:-1]) == {DecisionRequest.OPEN}

    wait_for(open_then_close, WAIT_S, "OPEN (maybe repeated) then CLOSE at the bridge")


def test_two_threads_waiting_each_get_their_own_replies_in_order(pair):
    robot, bridge = pair
    sids = [robot.link.open(Open(input_ids=np.arange(3, dtype=np.int32)))[0] for _ in range(2)]
    got: dict[int, list] = {0: [], 1: []}
    errors: list[BaseException] = []

    def consume(k: int) -> None:
        try:
            for _ in range(EXITS):
                got[k].append(robot.link.receive(sids[k]))
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for i in range(EXITS):  # interleaved: decision 1's i-th, decision 2's i-th
        bridge.exit(1, 1 + i, [100 + i], is_final=i == EXITS - 1)
        bridge.exit(2, 1 + i, [200 + i], is_final=i == EXITS - 1)
    for t in threads:
        t.join(timeout=2 * WAIT_S)
    assert not errors, errors
    assert [list(m.tokens) for m in got[0]] == [[100 + i] for i in range(EXITS)]
    assert [list(m.tokens) for m in got[1]] == [[200 + i] for i in range(EXITS)]


def test_an_unanswered_open_is_repeated_with_its_stamp_and_a_second_answer_is_dropped(pair):
    robot, bridge = pair
    bridge.lose_opens = 1  # as an OPEN published before the bridge's reader matched the link's writer
    bridge.answers_per_open = 2  # as a bridge answering a repeat whose first answer was on its way
    robot.link.open_retry_s = 0.3
    sid, opened = robot.link.open(Open(input_ids=np.arange(3, dtype=np.int32)))
    assert opened.num_layers == 4
    opens = [r for r in bridge.requests if r.command == DecisionRequest.OPEN]
    assert len(opens) >= 2 and {r.decision for r in opens} == {1}
    assert len({(r.header.stamp.sec, r.header.stamp.nanosec) for r in opens}) == 1  # one OPEN, repeated
    bridge.exit(1, 0, [5], is_final=True)
    reply = robot.link.receive(sid)  # the second OPENED never reaches the decoder
    assert isinstance(reply, Tokens) and list(reply.tokens) == [5]


def test_open_with_sends_the_first_block_before_opened_and_closes_the_decision_when_it_fails(pair):
    """``open_with`` (edge/first_block.py): the first block is published right behind the OPEN, before
    ``Opened`` arrives (the bridge answers only once it has the block); a first block that fails closes
    the decision (CLOSE) and the error goes on."""
    from edge_spec_ros.wire.messages import DraftBlock

    robot, bridge = pair
    bridge.answer_opens = False

    def first(sid: bytes) -> None:
        robot.link.send(sid, DraftBlock(round=0, position=3, tokens=np.array([7, 8], dtype=np.int32)))

    outcome: list = []
    opening = threading.Thread(target=lambda: outcome.append(
        robot.link.open_with(Open(input_ids=np.arange(3, dtype=np.int32)), first)))
    opening.start()
    wait_for(lambda: len(bridge.drafted) == 1, WAIT_S, "the first block")
    assert opening.is_alive() and list(bridge.drafted[0].tokens) == [7, 8] and bridge.drafted[0].decision == 1
    bridge.opened(1)
    opening.join(timeout=WAIT_S)
    assert not opening.is_alive() and outcome[0][1].num_layers == 4

    def failing(sid: bytes) -> None:
        raise RuntimeError("the drafter failed")

    with pytest.raises(RuntimeError, match="drafter failed"):
        robot.link.open_with(Open(input_ids=np.arange(3, dtype=np.int32)), failing)
    wait_for(lambda: any(r.decision == 2 and r.command == DecisionRequest.CLOSE for r in bridge.requests), WAIT_S,
             "the failed decision's CLOSE")


def test_the_first_blocks_verdict_ahead_of_opened_is_held_and_delivered_behind_it(pair):
    """DDS does not order two topics: the first block's exit results may come before the decision's
    OPENED. The link holds them and hands them over right behind ``Opened``, in their order."""
    from edge_spec_ros.wire.messages import ExitResult

    robot, bridge = pair
    bridge.answer_opens = False
    outcome: list = []
    request = Open(input_ids=np.arange(3, dtype=np.int32))
    opening = threading.Thread(target=lambda: outcome.append(robot.link.open(request)))
    opening.start()
    wait_for(lambda: any(r.command == DecisionRequest.OPEN for r in bridge.requests), WAIT_S, "the OPEN")
    bridge.exit(1, 2, [7])
    bridge.exit(1, 4, [7, 8], is_final=True)
    wait_for(lambda: len(robot.link._early.get(1, [])) == 2, WAIT_S, "the early exit results held")
    assert opening.is_alive()  # still waiting for Opened
    bridge.opened(1)
    opening.join(timeout=WAIT_S)
    assert not opening.is_alive() and outcome, "open_with took an exit result for its Opened"
    sid, _ = outcome[0]
    first, final = robot.link.receive(sid, WAIT_S), robot.link.receive(sid, WAIT_S)
    assert isinstance(first, ExitResult) and first.layer == 2 and list(first.tokens) == [7]
    assert isinstance(final, ExitResult) and final.is_final and list(final.tokens) == [7, 8]


def test_open_waits_until_the_link_has_matched_the_bridges_reply_writers(ros):
    """A reply published before the link's reader has matched the bridge's writer is lost: the link
    publishes no OPEN until its reply subscriptions count the bridge's publishers."""
    robot = RobotSide()
    bridge = StandInBridge(ros, robot.ns, replies=False)
    try:
        wait_for(lambda: bridge.sub.get_publisher_count() > 0 and bridge.drafts.get_publisher_count() > 0,
                 MATCH_S, "the stand-in bridge's readers to match the link")
        robot.link.open_retry_s = WAIT_S  # no repeat: the first OPEN must be the one answered
        outcome: list = []
        opening = threading.Thread(target=lambda: outcome.append(
            robot.link.open(Open(input_ids=np.arange(3, dtype=np.int32)))))
        opening.start()
        time.sleep(1.0)
        assert bridge.requests == [] and opening.is_alive()  # waiting for the reply writers
        bridge.add_replies()
        opening.join(timeout=MATCH_S)
        assert not opening.is_alive() and len(outcome) == 1
        sid, opened = outcome[0]
        assert opened.num_layers == 4 and len(bridge.requests) == 1
    finally:
        robot.close()
        bridge.destroy()


def test_the_links_priority_goes_with_each_open_unless_the_request_sets_its_own(pair):
    robot, bridge = pair
    robot.link.priority = 1  # as the drafter node sets it while the robot moves
    for request_priority in (0, 3):
        robot.link.open(Open(input_ids=np.arange(3, dtype=np.int32), priority=request_priority))
    opens = {r.decision: r.priority for r in bridge.requests if r.command == DecisionRequest.OPEN}  # and repeats
    assert opens == {1: 1, 2: 3}


def test_close_wakes_a_waiting_receive(pair):
    robot, bridge = pair
    sid, _ = robot.link.open(Open(input_ids=np.arange(3, dtype=np.int32)))
    outcome: list[BaseException] = []
    waiting = threading.Thread(target=lambda: outcome.append(_raised(robot.link.receive, sid)))
    waiting.start()
    robot.link.close()
    waiting.join(timeout=WAIT_S)
    assert not waiting.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], VerifierError) and "shutting down" in str(outcome[0])
    with pytest.raises(VerifierError, match="shutting down"):
        robot.link.open(Open(input_ids=np.arange(3, dtype=np.int32)))


def test_a_lost_verifier_ends_a_waiting_receive_at_once(pair):
    """The bridge's heartbeat found the verifier gone (LINK_LOST, code VerifierLost.CODE): the receive
    raises VerifierLost with the bridge's reason at once, not after its 30 s timeout."""
    robot, bridge = pair
    sid, _ = robot.link.open(Open(input_ids=np.arange(3, dtype=np.int32)))
    outcome: list = []
    waiting = threading.Thread(target=lambda: outcome.append((_raised(robot.link.receive, sid), time.monotonic())))
    waiting.start()
    lost = BridgeStatus()
    lost.decision, lost.state, lost.code = 1, BridgeStatus.LINK_LOST, VerifierLost.CODE
    lost.message = "verifier at tcp://127.0.0.1:1 lost: the connection was closed"
    published = time.monotonic()
    bridge.status.publish(lost)
    waiting.join(timeout=WAIT_S)
    assert not waiting.is_alive() and len(outcome) == 1
    error, ended = outcome[0]
    assert isinstance(error, VerifierLost) and "connection was closed" in str(error)
    assert ended - published < WAIT_S / 3  # far below the receive's own timeout


def test_a_silent_bridge_ends_in_a_timeout(pair):
    robot, bridge = pair
    bridge.answer_opens = False
    robot.link.open_timeout_s, robot.link.open_retry_s = 3.0, 0.3
    with pytest.raises(VerifierTimeout, match="no reply through the bridge within 3.0 s"):
        robot.link.open(Open(input_ids=np.arange(3, dtype=np.int32)))
    wait_for(lambda: len(bridge.requests) >= 2, WAIT_S, "the OPEN and its repeats at the bridge")
    assert {r.command for r in bridge.requests} == {DecisionRequest.OPEN}


def test_receiver_reports_matches_and_takes_messages_on_the_pumping_thread_only(ros):
    robot = RobotSide()
    try:
        receiver = Receiver(robot.node)
        received: list[BridgeStatus] = []
        matched: list[int] = []
        sub = receiver.subscribe(BridgeStatus, "receiver_test", received.append, RELIABLE, on_matched=matched.append)
        # nothing of the Receiver's is the executor's: its subscription is on a node of its own, in the
        # owner's namespace, which the owner's executor does not spin
        assert sub in receiver.node.subscriptions and receiver.node not in robot.executor.get_nodes()
        assert sub.topic_name == f"{robot.ns}/receiver_test" and receiver.node.get_namespace() == robot.ns
        assert receiver.pump(0.0) and matched == [0]  # no publisher of the topic yet
        sentinel: list[BridgeStatus] = []  # an ordinary subscription, served by the executor
        plain = robot.node.create_subscription(BridgeStatus, "receiver_test_sentinel", sentinel.append, RELIABLE)
        pub = ros.node.create_publisher(BridgeStatus, f"{robot.ns}/receiver_test", RELIABLE)
        pub_sentinel = ros.node.create_publisher(BridgeStatus, f"{robot.ns}/receiver_test_sentinel", RELIABLE)
        # the pump reports the publishers matched on this side: none first, then the test's one
        wait_for(lambda: receiver.pump(0.05) and matched[-1:] == [1], MATCH_S, "the Receiver to report a match")
        assert matched[0] == 0 and sub.get_publisher_count() == 1
        # the writers' side too: a writer that has not matched a reader sends it nothing
        wait_for(lambda: plain.get_publisher_count() == 1 and pub.get_subscription_count() == 1
                 and pub_sentinel.get_subscription_count() == 1, MATCH_S, "the sentinel to match")
        for decision in (1, 2, 3):
            msg = BridgeStatus()
            msg.decision = decision
            pub.publish(msg)
        pub_sentinel.publish(BridgeStatus())
        wait_for(lambda: len(sentinel) == 1, WAIT_S, "the executor to deliver the sentinel")
        assert received == []  # the executor ran, yet nothing takes the Receiver's messages but a pump
        wait_for(lambda: receiver.pump(0.1) and len(received) == 3, WAIT_S, "the pump to take three messages")
        assert [m.decision for m in received] == [1, 2, 3]
        receiver.close()
        assert receiver.pump(0.0) is False
        ros.node.destroy_publisher(pub)
        ros.node.destroy_publisher(pub_sentinel)
    finally:
        robot.close()


def _raised(fn, *args) -> BaseException | None:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - returned to the caller
        return exc
    return None
