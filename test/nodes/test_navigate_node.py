"""navigate_node's goal logic with the node itself in this process and a stand-in for the robot stack:
a node that listens on `instruction` and publishes the Decision, DecodeStats and NavAction messages a
drafter and an action node would. No models, no verifier: each case takes well under a second."""

from __future__ import annotations

import threading
import time

import pytest
import rclpy
from action_msgs.msg import GoalStatus
from rclpy.action import ActionClient
from rclpy.executors import SingleThreadedExecutor
from std_msgs.msg import String

from rosharness import in_executor, wait_for
from edge_spec_ros.action import Navigate
from edge_spec_ros.msg import Decision, DecodeStats as DecodeStatsMsg, NavAction as NavActionMsg
from edge_spec_ros.nodes.navigate_node import GoalRun, NavigateNode
from edge_spec_ros.nodes.ros_link import RELIABLE

Result, Feedback = Navigate.Result, Navigate.Feedback


class FakeStack:
    """What the drafter and the action node publish, on demand; what reaches `instruction`."""

    def __init__(self, node) -> None:
        self.node = node
        self.instructions: list[str] = []
        node.create_subscription(String, "instruction", lambda m: self.instructions.append(m.data), RELIABLE)
        self.decisions = node.create_publisher(Decision, "edge_spec/decision", RELIABLE)
        self.stats = node.create_publisher(DecodeStatsMsg, "edge_spec/stats", RELIABLE)
        self.actions = node.create_publisher(NavActionMsg, "edge_spec/action", RELIABLE)
        self.other = node.create_publisher(String, "instruction", RELIABLE)
        self.next_id = 100

    def decide(self, instruction: str, text: str, kind: str = "", status: int | None = None,
               stats_first: bool = False) -> int:
        decision, self.next_id = self.next_id, self.next_id + 1
        msg = Decision(decision=decision, instruction=instruction, mode="fsd", text=text)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        stats = DecodeStatsMsg(decision=decision, mode="FSD", tokens=12, rounds=3, tau=4.0, alpha=0.9)
        if stats_first:  # another topic: may arrive before its decision
            self.stats.publish(stats)
            self.decisions.publish(msg)
        else:
            self.decisions.publish(msg)
            self.stats.publish(stats)
        if kind:
            self.act(decision, kind, NavActionMsg.STARTED if status is None else status)
        return decision

    def act(self, decision: int, kind: str, status: int, error: str = "") -> None:
        self.actions.publish(NavActionMsg(decision=decision, kind=kind, status=status, error=error, linear_x=0.3))


class World:
    def __init__(self) -> None:
        rclpy.init(args=["--ros-args", "-p", "progress_timeout_s:=1.5", "-p", "max_decisions:=3"])
        self.navigate = NavigateNode()
        self.node = rclpy.create_node("fake_stack")
        self.stack = FakeStack(self.node)
        self.client = ActionClient(self.node, Navigate, "navigate")
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.navigate)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()
        wait_for(lambda: self.client.server_is_ready() and self.navigate.instruction.get_subscription_count() >= 2
                 and self.navigate.count_subscribers("/navigate/_action/feedback") >= 1
                 and self.stack.actions.get_subscription_count() >= 1, 10, "discovery")

    def goal(self, instruction: str, max_decisions: int = 0):
        feedback: list = []
        sent = in_executor(self.executor, lambda: self.client.send_goal_async(
            Navigate.Goal(instruction=instruction, max_decisions=max_decisions),
            feedback_callback=lambda m: feedback.append(m.feedback)))
        wait_for(sent.done, 5, "acceptance")
        handle = sent.result()
        if handle.accepted:
            wait_for(lambda: instruction in self.stack.instructions, 5, "the instruction")
        return handle, feedback

    def result(self, handle, timeout_s: float = 5.0):
        future = in_executor(self.executor, handle.get_result_async)
        wait_for(future.done, timeout_s, "the result")
        return future.result()

    def close(self) -> None:
        self.executor.shutdown()
        self.navigate.destroy_node()
        self.node.destroy_node()
        rclpy.shutdown()


@pytest.fixture(scope="module")
def w():
    world = World()
    yield world
    world.close()


def test_stop_decision_reaches_and_early_statistics_are_relayed(w):
    handle, feedback = w.goal("find the bottle")
    d = w.stack.decide("find the bottle", "Action: stop", "stop", NavActionMsg.DONE, stats_first=True)
    response = w.result(handle)
    assert response.status == GoalStatus.STATUS_SUCCEEDED
    assert (response.result.outcome, response.result.decisions, response.result.last_text) == \
        (Result.REACHED, 1, "Action: stop")
    assert sorted(f.event for f in feedback) == [Feedback.DECISION, Feedback.STATS, Feedback.ACTION]
    assert all(f.decision.decision == d and f.decisions == 1 for f in feedback)
    assert feedback[-1].stats.tau == 4.0 and feedback[-1].action.kind == "stop"  # all before the result


def test_invalid_action_and_failed_decision_fail(w):
    handle, _ = w.goal("go")
    d = w.stack.decide("go", "Action: fly")
    w.stack.act(d, "invalid", NavActionMsg.DONE, error="no action phrase")
    response = w.result(handle)
    assert response.status == GoalStatus.STATUS_ABORTED
    assert response.result.outcome == Result.FAILED and "invalid action: no action phrase" in response.result.message
    handle, _ = w.goal("go again")
    w.stack.decide("go again", "")  # the drafter's decision failed (verifier error)
    response = w.result(handle)
    assert response.result.outcome == Result.FAILED and "no text" in response.result.message


def test_other_instructions_decisions_and_old_decisions_are_not_the_goals(w):
    handle, feedback = w.goal("find the chair")
    w.stack.decide("find the bottle", "Action: stop", "stop", NavActionMsg.DONE)  # another instruction's
    old = Decision(decision=1, instruction="find the chair", text="Action: stop")  # stamped before the goal
    w.stack.decisions.publish(old)
    time.sleep(0.3)
    assert not feedback
    d = w.stack.decide("find the chair", "Action: move forward 25 cm", "forward")
    w.stack.act(d, "forward", NavActionMsg.DONE)
    d2 = w.stack.decide("find the chair", "Action: stop", "stop", NavActionMsg.DONE)
    response = w.result(handle)
    assert response.result.outcome == Result.REACHED and response.result.decisions == 2
    assert {f.decision.decision for f in feedback} == {d, d2}


def test_max_decisions_fails_and_sends_stop(w):
    handle, _ = w.goal("wander")  # the node's max_decisions: 3
    for _ in range(3):
        d = w.stack.decide("wander", "Action: turn left 30 degrees", "turn")
        w.stack.act(d, "turn", NavActionMsg.DONE)
    response = w.result(handle)
    assert response.result.outcome == Result.FAILED and response.result.decisions == 3
    assert "max_decisions 3" in response.result.message
    wait_for(lambda: w.stack.instructions[-1:] == ["stop"], 2, "stop")


def test_a_new_goal_or_another_instruction_supersedes(w):
    first, _ = w.goal("find the chair")
    second, _ = w.goal("find the bottle")
    response = w.result(first)
    assert response.status == GoalStatus.STATUS_ABORTED
    assert response.result.outcome == Result.STOPPED and response.result.message == "superseded by a new goal"
    w.stack.other.publish(String(data="turn around"))
    response = w.result(second)
    assert response.result.outcome == Result.STOPPED and "'turn around' from another node" in response.result.message


def test_cancel_sends_stop_and_cancels(w):
    handle, feedback = w.goal("find the chair")
    d = w.stack.decide("find the chair", "Action: move forward 50 cm", "forward")
    wait_for(lambda: any(f.event == Feedback.ACTION for f in feedback), 2, "the motion's start")
    cancel = in_executor(w.executor, handle.cancel_goal_async)
    wait_for(cancel.done, 5, "the cancel response")
    assert len(cancel.result().goals_canceling) == 1
    wait_for(lambda: w.stack.instructions[-1:] == ["stop"], 2, "stop on instruction")
    response = w.result(handle)
    assert response.status == GoalStatus.STATUS_CANCELED
    assert (response.result.outcome, response.result.decisions) == (Result.STOPPED, 1)
    w.stack.act(d, "forward", NavActionMsg.CANCELLED)  # late: changes nothing


def test_no_progress_fails_and_stops(w):
    handle, _ = w.goal("find the chair")
    started = time.monotonic()
    response = w.result(handle, timeout_s=5.0)
    assert 1.5 <= time.monotonic() - started < 3.5
    assert response.result.outcome == Result.FAILED and "no decision, statistics or action" in response.result.message
    wait_for(lambda: w.stack.instructions[-1:] == ["stop"], 2, "stop")


def test_stop_words_are_rejected_and_nobody_listening_fails(w):  # last: the stand-in goes
    for word in ("", "stop", " Cancel "):
        sent = in_executor(w.executor, lambda: w.client.send_goal_async(Navigate.Goal(instruction=word)))
        wait_for(sent.done, 5, "the answer")
        assert not sent.result().accepted, word
    w.executor.remove_node(w.node)  # the stand-in goes away: only navigate's own subscription is left
    w.node.destroy_node()
    w.node = rclpy.create_node("client_only")
    w.client = ActionClient(w.node, Navigate, "navigate")
    w.executor.add_node(w.node)
    wait_for(lambda: w.client.server_is_ready() and w.navigate.instruction.get_subscription_count() == 1, 10,
             "the stand-in's subscription to go")
    sent = in_executor(w.executor, lambda: w.client.send_goal_async(Navigate.Goal(instruction="find the chair")))
    wait_for(sent.done, 5, "acceptance")
    response = w.result(sent.result())
    assert response.result.outcome == Result.FAILED and "nobody listens" in response.result.message


def test_goal_run_keeps_early_messages_of_a_few_decisions_only():
    run = GoalRun("x", 5, 0, 0.0)
    for i in range(40):
        assert run.on_stats(DecodeStatsMsg(decision=i), 0.0) == []
    assert min(run._early) == 40 - 16 and len(run._early) == 16
