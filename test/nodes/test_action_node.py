"""action_node in its own process: text → NavAction, /cmd_vel under limits, stops when in doubt."""

from __future__ import annotations

import time

import pytest
from geometry_msgs.msg import Twist
from std_msgs.msg import String

from rosharness import node_command, process, set_parameters, wait_for
from edge_spec_ros.msg import BridgeStatus, Decision, NavAction as NavActionMsg
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
        actions = ros.collect(NavActionMsg, "edge_spec/action", RELIABLE)
        reasoning = ros.collect(String, "edge_spec/reasoning", RELIABLE)
        twists: list[tuple[float, float, float]] = []
        ros.node.create_subscription(Twist, "cmd_vel",
                                     lambda m: twists.append((time.monotonic(), m.linear.x, m.angular.z)), 10)
        wait_for(lambda: decisions.get_subscription_count() > 0 and status.get_subscription_count() > 0
                 and ros.node.count_publishers("cmd_vel") > 0, DISCOVERY_S, "action_node to come up")
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


def test_stop_ends_a_motion_within_one_control_period(ros, action_node):
    decisions, _, actions, _, twists = action_node
    instruction = ros.node.create_publisher(String, "instruction", RELIABLE)
    wait_for(lambda: instruction.get_subscription_count() > 0, DISCOVERY_S, "the action node's instruction topic")
    send(decisions, 5, "Action: turn left 90 degrees")  # 2.6 s of turning
    wait_for(lambda: any(z > 0 for _, _, z in twists[-3:]), 10, "the turn")
    t = time.monotonic()
    instruction.publish(String(data="stop"))
    wait_for(lambda: any(a.decision == 5 and a.status == NavActionMsg.CANCELLED for a in actions), 2, "CANCELLED")
    ended = next(a for a in actions if a.decision == 5 and a.status == NavActionMsg.CANCELLED)
    assert ended.end_reason == "stop"
    stopped = next(ts for ts, _, z in twists if ts > t and z == 0.0)
    assert stopped - t < 0.2  # one control period is 20 ms at 50 Hz; DDS and scheduling take the rest


def test_after_a_motion_zero_is_held_then_nothing(action_node):
    """hold_zero_s (default 1 s) of zero after the end, then quiet: a twist_mux input times out."""
    decisions, _, actions, _, twists = action_node
    send(decisions, 6, "Action: move forward 6 cm")  # 0.2 s
    wait_for(lambda: any(a.decision == 6 and a.status == NavActionMsg.DONE for a in actions), 10, "DONE")
    done = time.monotonic()
    time.sleep(2.0)
    after = [(ts, x) for ts, x, _ in twists if ts > done]
    assert after and all(x == 0.0 for _, x in after)
    assert after[-1][0] - done < 1.3  # held about 1 s, then nothing for the rest of the 2 s
    assert time.monotonic() - after[-1][0] > 0.6


@pytest.mark.parametrize("name,value", [("max_linear_speed", float("nan")), ("rate_hz", -5.0),
                                        ("max_linear_speed", 7.0), ("max_angular_speed", -1.0),
                                        ("watchdog_timeout_s", 0.0), ("odom_topic", "other_odom")])
def test_invalid_parameters_are_refused_with_a_reason(ros, action_node, name, value):
    (result,) = set_parameters(ros, "/action", DISCOVERY_S, **{name: value})
    assert not result.successful and result.reason, (name, value, result)


def test_an_accepted_limit_takes_effect_on_the_next_command(ros, action_node):
    decisions, _, actions, _, _ = action_node
    (result,) = set_parameters(ros, "/action", DISCOVERY_S, max_linear_speed=0.1)
    assert result.successful, result.reason
    send(decisions, 7, "Action: move forward 10 cm")
    wait_for(lambda: any(a.decision == 7 and a.status == NavActionMsg.STARTED for a in actions), 10, "the NavAction")
    action = next(a for a in actions if a.decision == 7)
    assert action.linear_x == pytest.approx(0.1) and action.clamped
    (result,) = set_parameters(ros, "/action", DISCOVERY_S, max_linear_speed=0.5)
    assert result.successful


def test_sigterm_mid_motion_leaves_a_final_zero(ros, tmp_path):
    """SIGTERM (systemd, docker stop) while moving: another process sees the last command be zero,
    and the node exits 0 without a traceback."""
    twists: list[tuple[float, float]] = []
    ros.node.create_subscription(Twist, "term/cmd_vel", lambda m: twists.append((m.linear.x, m.angular.z)), 10)
    decisions = ros.node.create_publisher(Decision, "term/edge_spec/decision", RELIABLE)
    log = tmp_path / "action.log"
    cmd = node_command("action_node", "-r", "__ns:=/term", "-p", "rate_hz:=50.0")
    with process(cmd, log) as proc:
        wait_for(lambda: decisions.get_subscription_count() > 0, DISCOVERY_S, "the action node")
        send(decisions, 1, "Action: move forward 100 cm")
        wait_for(lambda: len(twists) > 5 and twists[-1][0] > 0, 10, "motion")
        proc.terminate()
        assert proc.wait(timeout=5) == 0, log.read_text()
    wait_for(lambda: twists[-1] == (0.0, 0.0), 2, "the final zero")
    out = log.read_text()
    assert "Traceback" not in out and "context is invalid" not in out, out


def test_a_start_up_parameter_is_refused_at_run_time(ros, tmp_path):
    """A node whose parameters are read once refuses a runtime change with that reason, rather than
    answering successful and changing nothing."""
    cmd = node_command("sim_node", "-r", "__ns:=/fixed")
    with process(cmd, tmp_path / "sim.log"):
        (result,) = set_parameters(ros, "/fixed/sim", DISCOVERY_S, camera_rate_hz=2.0)
    assert not result.successful and "restart" in result.reason
