"""action_node in its own process: text → NavAction, /cmd_vel under limits, stops when in doubt."""

from __future__ import annotations

import time

import pytest
from geometry_msgs.msg import Twist
from std_msgs.msg import String

from rosharness import node_command, process, wait_for
from edge_spec_ros.msg import BridgeStatus, Decision, NavAction
from edge_spec_ros.nodes.ros_link import RELIABLE

DISCOVERY_S = 20.0


@pytest.fixture(scope="module")
def action_node(ros, tmp_path_factory):
    log = tmp_path_factory.mktemp("action") / "action_node.log"
    cmd = node_command("action_node", "-p", "rate_hz:=50.0", "-p", "watchdog_timeout_s:=3.0",
                       "-p", "cruise_linear_speed:=0.3")
    with process(cmd, log) as proc:
        decisions = ros.node.create_publisher(Decision, "edge_spec/decision", RELIABLE)
        status = ros.node.create_publisher(BridgeStatus, "edge_spec/bridge_status", RELIABLE)
        actions = ros.collect(NavAction, "edge_spec/action", RELIABLE)
        reasoning = ros.collect(String, "edge_spec/reasoning", RELIABLE)
        twists: list[tuple[float, float, float]] = []
        ros.node.create_subscription(Twist, "cmd_vel",
                                     lambda m: twists.append((time.monotonic(), m.linear.x, m.angular.z)), 10)
        wait_for(lambda: decisions.get_subscription_count() > 0 and status.get_subscription_count() > 0
                 and len(twists) > 0, DISCOVERY_S, "action_node to come up")
        yield decisions, status, actions, reasoning, twists
        assert proc.poll() is None, log.read_text()  # it never crashed


def send(pub, decision: int, text: str) -> None:
    msg = Decision()
    msg.decision, msg.text, msg.mode = decision, text, "fsd"
    pub.publish(msg)


def test_forward_action_moves_then_stops(action_node):
    decisions, _, actions, reasoning, twists = action_node
    send(decisions, 1, "Reasoning: the silver bottle is ahead. Action: move forward 30 cm")
    wait_for(lambda: any(a.decision == 1 for a in actions), 10, "the NavAction")
    action = next(a for a in actions if a.decision == 1)
    assert action.kind == "forward" and action.distance_m == pytest.approx(0.3)
    assert action.linear_x == pytest.approx(0.3) and action.duration_s == pytest.approx(1.0) and not action.clamped
    wait_for(lambda: any(r.data.startswith("the silver bottle is ahead") for r in reasoning), 5, "the reasoning")
    t_start = time.monotonic()
    wait_for(lambda: any(t > t_start and x == pytest.approx(0.3) for t, x, _ in twists), 5, "motion on /cmd_vel")
    wait_for(lambda: twists[-1][1] == 0.0 and any(t > t_start and x > 0 for t, x, _ in twists), 5,
             "the stop after 1 s")
    moving = [t for t, x, _ in twists if t > t_start and x > 0]
    assert 0.7 < moving[-1] - moving[0] < 1.3  # held for the planned second, then zero


def test_garbage_gives_no_motion_and_a_quoted_error(action_node):
    decisions, _, actions, _, twists = action_node
    send(decisions, 2, "Action: fly to the moon ###")
    wait_for(lambda: any(a.decision == 2 for a in actions), 10, "the NavAction")
    action = next(a for a in actions if a.decision == 2)
    assert action.kind == "invalid" and "fly to the moon" in action.error
    t = time.monotonic()
    wait_for(lambda: sum(1 for ts, _, _ in twists if ts > t) >= 5, 5, "cmd_vel")
    assert all(x == 0.0 and z == 0.0 for ts, x, z in twists if ts > t)


def test_commands_are_clamped(action_node):
    decisions, _, actions, _, _ = action_node
    send(decisions, 3, "Action: turn left 720 degrees")
    wait_for(lambda: any(a.decision == 3 for a in actions), 10, "the NavAction")
    action = next(a for a in actions if a.decision == 3)
    assert action.kind == "turn" and action.clamped
    assert abs(action.angular_z) <= 1.0 and action.duration_s <= 5.0


def test_lost_verifier_stops_the_robot_at_once(action_node):
    decisions, status, actions, _, twists = action_node
    send(decisions, 4, "Action: move forward large")  # 1 m at 0.3 m/s: 3.3 s of motion
    wait_for(lambda: any(x > 0 for _, x, _ in twists[-5:]), 10, "motion")
    lost = BridgeStatus()
    lost.decision, lost.state, lost.message = 4, BridgeStatus.LINK_LOST, "test"
    t = time.monotonic()
    status.publish(lost)
    wait_for(lambda: any(ts > t and x == 0.0 for ts, x, _ in twists), 2, "zero velocity after LINK_LOST")
    stopped = next(ts for ts, x, _ in twists if ts > t and x == 0.0)
    assert stopped - t < 0.5
