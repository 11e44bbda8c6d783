"""The Navigate action, the Describe service and /diagnostics, with real nodes in separate processes:
camera (a folder holding one simulated room's frame), bridge, drafter and action nodes in one process
(as bringup composes them, but running until stopped), navigate_node in another, a verifier process on
loopback, and the action and service clients in the test process. On that frame (room 48: the green
box reached, the grey box ahead) the shipped pair decides "stop" for "go to the green box" and "move
forward 100 cm" for "go to the grey box"."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from action_msgs.msg import GoalStatus
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import Twist
from rclpy.action import ActionClient
from std_msgs.msg import String

from rosharness import (drafter_matched_instruction, in_executor, navigate_matched_instruction, node_command, process,
                        service_answers, wait_for)
from stack import room_frame, stack_command, stack_params
from edge_spec_ros.action import Navigate
from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.msg import BridgeStatus, Decision, DecisionRequest, NavAction as NavActionMsg
from edge_spec_ros.nav import NavConfig, parse_action
from edge_spec_ros.nodes.convert import rgb_to_image
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.srv import Describe

REACH = "go to the green box"  # the shipped pair, on room_frame() → "... Action: stop"
MOVE = "go to the grey box"  # → "... Action: move forward 100 cm" (6.7 s at 0.15 m/s)
UP_S = 90.0
DECIDE_S = 60.0


def navigate_stack(log_dir: Path, endpoint: str) -> list[str]:
    """The stack process of these tests (test_link_loss.py's too): timed motions (no odometry without
    the sim), slow enough to be cancelled on the way."""
    return stack_command(stack_params(log_dir, endpoint, bridge={"diagnostics_period_s": 0.25},
                                      drafter={"mode": "fsd", "predraft_threads": 1, "torch_threads": 1},
                                      action={"odom_topic": "", "cruise_linear_speed": 0.15}))


class Stack:
    """The processes, and what the test process hears of them."""

    def __init__(self, ros, log_dir: Path) -> None:
        self.ros, self.log_dir = ros, log_dir
        self.navigate = ActionClient(ros.node, Navigate, "navigate")
        self.describe = ros.node.create_client(Describe, "describe")
        self.twists: list[tuple[float, Twist]] = []
        ros.node.create_subscription(Twist, "cmd_vel", lambda m: self.twists.append((time.monotonic(), m)), 10)
        self.decisions = ros.collect(Decision, "edge_spec/decision", RELIABLE)
        self.actions: list[tuple[float, NavActionMsg]] = []
        ros.node.create_subscription(NavActionMsg, "edge_spec/action",
                                     lambda m: self.actions.append((time.monotonic(), m)), RELIABLE)
        self.instructions = ros.collect(String, "instruction", RELIABLE)
        self.diagnostics = ros.collect(DiagnosticArray, "/diagnostics")
        self.reached_text = ""  # the decision text of the REACHED goal (the Describe test compares)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(self.log_dir.glob("*.log")))

    def goal(self, instruction: str, max_decisions: int = 0, on_feedback=None):
        """Send a goal; return (goal handle, feedback list, result future)."""
        feedback: list = []

        def on_fb(msg):
            feedback.append(msg.feedback)
            if on_feedback is not None:
                on_feedback(msg.feedback)

        sent = in_executor(self.ros.executor, lambda: self.navigate.send_goal_async(
            Navigate.Goal(instruction=instruction, max_decisions=max_decisions), feedback_callback=on_fb))
        wait_for(sent.done, 10, "the goal's acceptance")
        handle = sent.result()
        assert handle.accepted, instruction
        return handle, feedback, in_executor(self.ros.executor, handle.get_result_async)

    def result(self, future, timeout_s: float = DECIDE_S):
        wait_for(future.done, timeout_s, lambda: f"the goal's result\n{self.logs()}")
        return future.result()

    def call(self, request: Describe.Request, timeout_s: float = DECIDE_S) -> Describe.Response:
        future = self.describe.call_async(request)
        wait_for(future.done, timeout_s, lambda: f"the describe answer\n{self.logs()}")
        return future.result()


@pytest.fixture(scope="module")
def stack(ros, server_endpoint, tmp_path_factory):
    logs = tmp_path_factory.mktemp("navigate")
    s = Stack(ros, logs)
    stack_cmd = navigate_stack(logs, server_endpoint)
    navigate_cmd = node_command("navigate_node", "-p", "progress_timeout_s:=60.0")
    with process(stack_cmd, logs / "stack.log") as robot, process(navigate_cmd, logs / "navigate.log") as nav:
        wait_for(lambda: s.navigate.server_is_ready() and s.describe.service_is_ready()
                 and len(ros.node.get_subscriptions_info_by_topic("/instruction")) >= 4, UP_S,
                 f"the stack and navigate_node\n{s.logs()}")  # drafter, action, navigate, the test
        # a goal's instruction reaches the drafter once both ends have matched each other: the drafter's
        # subscription navigate_node's publisher, and that publisher the drafter's subscription (with the
        # action node's, the test's and its own: 4). navigate_node publishes once its publisher has
        # matched every subscription its graph knows of, and its graph may not know the drafter's yet
        wait_for(lambda: drafter_matched_instruction((logs / "stack.log").read_text()) >= 1
                 and navigate_matched_instruction((logs / "navigate.log").read_text()) >= 4, UP_S,
                 f"the drafter and navigate_node matching each other on instruction\n{s.logs()}")
        # a refused request (an empty prompt) is the handshake that describe's replies reach this node
        service_answers(s.describe, Describe.Request(prompt=" "), UP_S, "describe's replies")
        yield s
        assert robot.poll() is None and nav.poll() is None, s.logs()


def moving(t: Twist) -> bool:
    return t.linear.x != 0.0 or t.angular.z != 0.0


def test_goal_reached_with_feedback_and_result(stack):
    """A goal runs the whole stack: feedback for the decision, its statistics and its action; the
    policy's "stop" ends it as REACHED (goal SUCCEEDED) with one decision."""
    handle, feedback, future = stack.goal(REACH)
    response = stack.result(future)
    result = response.result
    assert response.status == GoalStatus.STATUS_SUCCEEDED, result
    assert result.outcome == Navigate.Result.REACHED and result.decisions == 1, result
    assert parse_action(result.last_text, NavConfig()).action.kind == "stop", result.last_text
    assert stack.instructions and stack.instructions[0].data == REACH  # the topic interface, underneath
    # feedback (a topic) and the result (a service) may arrive in either order
    wait_for(lambda: any(f.event == Navigate.Feedback.ACTION for f in feedback), 5, "the action's feedback")
    events = [f.event for f in feedback]
    assert {Navigate.Feedback.DECISION, Navigate.Feedback.STATS, Navigate.Feedback.ACTION} <= set(events), events
    last = feedback[-1]
    assert last.decisions == 1 and last.decision.text == result.last_text and last.decision.instruction == REACH
    assert last.stats.decision == last.decision.decision and last.stats.rounds >= 1 and last.stats.tau > 0
    assert last.action.kind == "stop" and last.action.status == NavActionMsg.DONE
    assert stack.decisions[-1].text == result.last_text
    stack.reached_text = result.last_text


def test_cancel_mid_motion_zeroes_the_velocity_at_once(stack):
    """Cancelling while the robot moves: the cancel callback publishes "stop", the action node
    publishes zero velocity at once (well before the motion's planned end), the goal is CANCELED with
    outcome STOPPED, and nothing moves afterwards."""
    since = time.monotonic()
    handle, feedback, future = stack.goal(MOVE)

    def motion():
        return next((f.action for f in feedback if f.event == Navigate.Feedback.ACTION
                     and f.action.status == NavActionMsg.STARTED), None)

    wait_for(lambda: motion() is not None and any(moving(m) for t, m in stack.twists if t >= since), DECIDE_S,
             f"the robot to move\n{stack.logs()}")
    t_cancel = time.monotonic()
    in_executor(stack.ros.executor, handle.cancel_goal_async)
    response = stack.result(future)
    started = motion()

    assert started.kind == "forward" and started.linear_x > 0 and started.duration_s > 0.5, started
    assert response.status == GoalStatus.STATUS_CANCELED
    assert response.result.outcome == Navigate.Result.STOPPED and response.result.decisions == 1, response.result
    assert response.result.message == "cancelled"
    wait_for(lambda: any(m.decision == started.decision and m.status != NavActionMsg.STARTED for _, m in stack.actions),
             5, "the end of the motion")
    end = next(m for _, m in stack.actions if m.decision == started.decision and m.status != NavActionMsg.STARTED)
    assert end.status == NavActionMsg.CANCELLED and end.end_reason == "stop", end
    after = [(t, m) for t, m in stack.twists if t >= since]
    zero_at = next(t for t, m in after if t >= t_cancel and not moving(m))
    print(f"zero velocity {(zero_at - t_cancel) * 1e3:.0f} ms after the cancel request")
    assert zero_at - t_cancel < 0.3, f"zero velocity {zero_at - t_cancel:.3f} s after the cancel"
    assert zero_at - t_cancel < started.duration_s / 2  # not the motion's own end
    time.sleep(0.5)
    assert not any(moving(m) for t, m in stack.twists if t > zero_at), "moved again after the cancel"
    assert [i.data for i in stack.instructions[-2:]] == [MOVE, "stop"]


def test_max_decisions_fails_and_stops_the_cycle(stack):
    """A goal of one decision whose action is a move ends as FAILED (goal ABORTED) when that motion is
    over, and sends "stop" so the drafter does not decide again."""
    handle, feedback, future = stack.goal(MOVE, max_decisions=1)
    response = stack.result(future)
    assert response.status == GoalStatus.STATUS_ABORTED
    result = response.result
    assert result.outcome == Navigate.Result.FAILED and result.decisions == 1, result
    assert "max_decisions 1" in result.message, result.message
    assert parse_action(result.last_text, NavConfig()).action.kind == "forward"
    wait_for(lambda: len([f for f in feedback if f.event == Navigate.Feedback.ACTION]) >= 2, 5, "the feedback")
    assert [f.action.status for f in feedback if f.event == Navigate.Feedback.ACTION] == \
        [NavActionMsg.STARTED, NavActionMsg.DONE]
    assert stack.instructions[-1].data == "stop"
    count = len(stack.decisions)
    time.sleep(1.5)  # settle_s + a frame: a second decision would have started by now
    assert len(stack.decisions) == count, "the drafter decided again"


def test_describe_answers_text_and_statistics_and_moves_nothing(stack):
    """Describe on the latest frame and on an image in the request: the verifier's greedy text (the
    same the REACHED goal's decision had on the same frame) and statistics; no decision, no action,
    no velocity. Bad requests are refused with a reason."""
    decisions, actions, since = len(stack.decisions), len(stack.actions), time.monotonic()
    latest = stack.call(Describe.Request(prompt=REACH))
    assert latest.success, latest.message
    assert latest.text and latest.stats.rounds >= 1 and latest.stats.tokens >= 1 and latest.stats.mode == "FSD"
    assert latest.stats.decision >= 2**31  # its own verifier sessions
    assert latest.image_stamp.sec > 0
    if stack.reached_text:
        assert latest.text == stack.reached_text
    frame = rgb_to_image(room_frame(), latest.image_stamp, "camera", "bgr8")
    given = stack.call(Describe.Request(image=frame, prompt=REACH, mode="sd", max_new_tokens=48))
    assert given.success and given.text == latest.text and given.stats.mode == "SD", given
    assert (given.image_stamp.sec, given.image_stamp.nanosec) == (frame.header.stamp.sec, frame.header.stamp.nanosec)
    for request, reason in ((Describe.Request(prompt=" "), "empty prompt"),
                            (Describe.Request(prompt=REACH, mode="warp"), "unknown mode"),
                            (Describe.Request(prompt=REACH, max_new_tokens=100000), "above"),
                            (Describe.Request(image=_bad_image(latest.image_stamp), prompt=REACH), "image")):
        refused = stack.call(request, 10)
        assert not refused.success and reason in refused.message, (reason, refused.message)
    time.sleep(0.3)
    assert len(stack.decisions) == decisions and len(stack.actions) == actions
    assert not any(moving(m) for t, m in stack.twists if t >= since)


def _bad_image(stamp):
    frame = rgb_to_image(synthetic_camera_image(224, 168), stamp, "camera")
    frame.width = 0  # a zero-width frame
    return frame


def test_diagnostics_report_the_verifier_link(stack):
    """/diagnostics carries the link's state: connected, the last round trip, τ, α and the cache miss
    rate of the latest decision, the errors and the last one."""
    def latest():
        for array in reversed(stack.diagnostics):
            for status in array.status:
                if status.name == "bridge: verifier link" and status.hardware_id.startswith("tcp://127.0.0.1"):
                    values = {kv.key: kv.value for kv in status.values}
                    if values.get("tau"):
                        return status, values
        return None

    wait_for(lambda: latest() is not None, 10, "a diagnostics status with decode statistics")
    status, values = latest()
    assert status.level == DiagnosticStatus.OK and status.message == "connected", (status.message, values)
    assert values["connected"] == "true" and int(values["replies"]) > 0
    assert float(values["round_trip_s"]) > 0 and float(values["server_compute_s"]) >= 0
    assert float(values["tau"]) > 0 and 0 <= float(values["alpha"]) <= 1
    assert 0 <= float(values["cache_miss_rate"]) <= 1 and values["mode"] == "FSD"
    assert {"last_error", "errors", "last_reply_age_s", "open_sessions", "endpoint"} <= set(values)


def test_diagnostics_report_a_lost_link(ros, tmp_path):
    """A bridge whose verifier never answers: its heartbeat goes unanswered, so within about
    heartbeat_interval_s + heartbeat_timeout_s of its start, decision or none, its status is ERROR,
    connected false, link dead, with the lost link as the last error; an OPEN is then answered LINK_LOST
    at once. (In a namespace of its own, apart from the stack; its diagnostics go to the absolute
    /diagnostics all the same.)"""
    endpoint = "tcp://127.0.0.1:9"  # discard port: nothing answers
    diagnostics = ros.collect(DiagnosticArray, "/diagnostics")
    requests = ros.node.create_publisher(DecisionRequest, "/lost/edge_spec/decision_request", RELIABLE)
    status_msgs = ros.collect(BridgeStatus, "/lost/edge_spec/bridge_status", RELIABLE)
    cmd = node_command("bridge_node", "-p", f"verifier_endpoint:={endpoint}", "-p", "open_timeout_s:=30.0",
                       "-p", "diagnostics_period_s:=0.2", "-r", "__node:=lost_bridge", "-r", "__ns:=/lost")

    def mine():
        return [s for a in diagnostics for s in a.status if s.hardware_id == endpoint]

    with process(cmd, tmp_path / "bridge.log"):
        wait_for(lambda: mine() and requests.get_subscription_count() > 0, 30,
                 lambda: f"the bridge's diagnostics\n{(tmp_path / 'bridge.log').read_text()}")
        assert mine()[0].level in (DiagnosticStatus.STALE, DiagnosticStatus.ERROR)  # connecting, or lost already
        wait_for(lambda: mine()[-1].level == DiagnosticStatus.ERROR, 10, "the lost link in the diagnostics")
        requests.publish(DecisionRequest(decision=7, command=DecisionRequest.OPEN, input_ids=[1, 2, 3]))
        wait_for(lambda: any(m.decision == 7 for m in status_msgs), 10, "the OPEN answered on a dead link")
    answer = next(m for m in status_msgs if m.decision == 7)
    assert answer.state == BridgeStatus.LINK_LOST and "heartbeat" in answer.message, answer
    status = [s for s in mine() if s.message != "finalized"][-1]  # not the managed bridge's last word
    values = {kv.key: kv.value for kv in status.values}
    assert values["connected"] == "false" and values["link"] == "dead" and values["errors"] == "1", values
    assert values["last_error"].startswith("link lost") and "heartbeat within 1.5 s" in values["last_error"], values
    assert status.message.startswith("verifier lost") and status.name == "lost_bridge: verifier link"
