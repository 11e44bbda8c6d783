"""The nodes on Humble's rclpy API: each runs in its own process with the newer rclpy APIs removed
(humble_api.py), so they take the fallbacks of nodes/compat.py, and behave as on Kilted: the recorder,
the drafter and the bridge log their matched publishers (from the graph), navigate_node the
subscriptions its publisher has matched, the action node refuses an invalid parameter with the reason
and applies an accepted one from its next command on, and applies nothing of a request another check
refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from std_msgs.msg import String

from humble_api import HIDDEN_LINE
from rosharness import drafter_matched_instruction, navigate_matched_instruction, process, set_parameters, wait_for
from edge_spec_ros.msg import Decision, DraftBlock as DraftBlockMsg, NavAction as NavActionMsg
from edge_spec_ros.nodes.matched import matched_publishers
from edge_spec_ros.nodes.ros_link import RELIABLE

SHIM = str(Path(__file__).with_name("humble_api.py"))
UP_S = 60.0  # the drafter loads its model first
ANSWER_S = 10.0


def humble_node(executable: str, *ros_args: str) -> list[str]:
    return [sys.executable, SHIM, f"edge_spec_ros.nodes.{executable}", "--ros-args", *ros_args]


def no_traceback(log: Path) -> None:
    text = log.read_text()
    assert HIDDEN_LINE in text and "Traceback" not in text and "AttributeError" not in text, text[-3000:]


def test_the_recorder_logs_matched_publishers_from_the_graph(ros, tmp_path):
    log = tmp_path / "record.log"
    cmd = [sys.executable, SHIM, "edge_spec_ros.cli", "record", "--out", str(tmp_path / "bag"),
           "--topic", "/humble/instruction:std_msgs/msg/String"]
    with process(cmd, log) as proc:
        wait_for(lambda: any(i.node_name == "bag_recorder"
                             for i in ros.node.get_subscriptions_info_by_topic("/humble/instruction")),
                 UP_S, lambda: f"the recorder's subscription ({log.read_text()[-2000:]})")
        assert "publisher(s) matched" not in log.read_text()  # none yet: no line, as with matched events
        publisher = ros.node.create_publisher(String, "/humble/instruction", RELIABLE)
        wait_for(lambda: matched_publishers(log.read_text(), "/humble/instruction") == 1, ANSWER_S,
                 lambda: f"the matched line ({log.read_text()[-2000:]})")
        ros.node.destroy_publisher(publisher)
        wait_for(lambda: "/humble/instruction: 0 publisher(s) matched" in log.read_text(), ANSWER_S,
                 lambda: f"the publisher's loss ({log.read_text()[-2000:]})")
        assert proc.poll() is None
    no_traceback(log)


def test_the_drafter_starts_and_logs_matched_publishers_from_the_graph(ros, tmp_path):
    log = tmp_path / "drafter.log"
    with process(humble_node("drafter_node", "-r", "__ns:=/humble"), log) as proc:
        wait_for(lambda: "drafter ready" in log.read_text() or proc.poll() is not None, UP_S,
                 lambda: f"the drafter to start ({log.read_text()[-2000:]})")
        assert proc.poll() is None, log.read_text()
        publisher = ros.node.create_publisher(String, "/humble/instruction", RELIABLE)
        wait_for(lambda: drafter_matched_instruction(log.read_text()) == 1, ANSWER_S,
                 lambda: f"the matched line ({log.read_text()[-2000:]})")
        ros.node.destroy_publisher(publisher)
        wait_for(lambda: "instruction: 0 publisher(s) matched" in log.read_text(), ANSWER_S,
                 lambda: f"the publisher's loss ({log.read_text()[-2000:]})")
        assert proc.poll() is None
    no_traceback(log)


def test_navigate_node_logs_the_subscriptions_its_instruction_publisher_matched(ros, tmp_path):
    """navigate_node's publisher (nodes/compat.publish_matched) counts its matched subscriptions by
    polling: its own subscription first, then the test's."""
    log = tmp_path / "navigate.log"
    with process(humble_node("navigate_node", "-r", "__ns:=/humble"), log) as proc:
        wait_for(lambda: navigate_matched_instruction(log.read_text()) == 1 or proc.poll() is not None, UP_S,
                 lambda: f"navigate_node's own subscription ({log.read_text()[-2000:]})")
        subscription = ros.node.create_subscription(String, "/humble/instruction", lambda m: None, RELIABLE)
        wait_for(lambda: navigate_matched_instruction(log.read_text()) == 2, ANSWER_S,
                 lambda: f"the matched line ({log.read_text()[-2000:]})")
        ros.node.destroy_subscription(subscription)
        wait_for(lambda: navigate_matched_instruction(log.read_text()) == 1, ANSWER_S,
                 lambda: f"the subscription's loss ({log.read_text()[-2000:]})")
        assert proc.poll() is None
    no_traceback(log)


def test_the_bridge_starts_and_logs_matched_publishers_from_the_graph(ros, tmp_path):
    """bridge_node's Receiver (nodes/ros_link.py) counts its matched publishers from the graph."""
    log = tmp_path / "bridge.log"
    with process(humble_node("bridge_node", "-r", "__ns:=/humble", "-p", "verifier_endpoint:=tcp://127.0.0.1:9"),
                 log) as proc:
        wait_for(lambda: "draft: 0 publisher(s) matched" in log.read_text() or proc.poll() is not None, UP_S,
                 lambda: f"the bridge to start ({log.read_text()[-2000:]})")
        assert proc.poll() is None, log.read_text()
        publisher = ros.node.create_publisher(DraftBlockMsg, "/humble/edge_spec/draft", RELIABLE)
        wait_for(lambda: "draft: 1 publisher(s) matched" in log.read_text(), ANSWER_S,
                 lambda: f"the matched line ({log.read_text()[-2000:]})")
        ros.node.destroy_publisher(publisher)
        assert proc.poll() is None
    no_traceback(log)


@pytest.fixture(scope="module")
def action_node(ros, tmp_path_factory):
    log = tmp_path_factory.mktemp("humble_action") / "action_node.log"
    cmd = humble_node("action_node", "-r", "__ns:=/humble", "-p", "rate_hz:=50.0", "-p", "cruise_linear_speed:=0.3")
    with process(cmd, log) as proc:
        decisions = ros.node.create_publisher(Decision, "/humble/edge_spec/decision", RELIABLE)
        actions = ros.collect(NavActionMsg, "/humble/edge_spec/action", RELIABLE)
        wait_for(lambda: decisions.get_subscription_count() > 0, UP_S, lambda: f"the action node ({log.read_text()})")
        yield decisions, actions, log
        assert proc.poll() is None, log.read_text()
    no_traceback(log)


def decide(decisions, actions, decision: int, text: str) -> NavActionMsg:
    msg = Decision()
    msg.decision, msg.text, msg.mode = decision, text, "fsd"
    decisions.publish(msg)
    wait_for(lambda: any(a.decision == decision for a in actions), ANSWER_S, f"the NavAction of decision {decision}")
    return next(a for a in actions if a.decision == decision)


def test_an_invalid_parameter_is_refused_with_the_reason(ros, action_node):
    (result,) = set_parameters(ros, "/humble/action", ANSWER_S, max_linear_speed=float("nan"))
    assert not result.successful and "max_linear_speed" in result.reason, result


def test_an_accepted_limit_applies_from_the_next_command(ros, action_node):
    decisions, actions, log = action_node
    (result,) = set_parameters(ros, "/humble/action", ANSWER_S, max_linear_speed=0.1)
    assert result.successful, result.reason
    action = decide(decisions, actions, 1, "Action: move forward 10 cm")  # sent as soon as the reply is here
    assert action.linear_x == pytest.approx(0.1) and action.clamped
    (result,) = set_parameters(ros, "/humble/action", ANSWER_S, max_linear_speed=0.5)
    assert result.successful
    wait_for(lambda: "parameters changed: max_linear_speed=0.5" in log.read_text(), ANSWER_S, "the log line")


@pytest.mark.parametrize("decision,refused,value", [(2, "odom_topic", "other_odom"), (3, "rate_hz", 0.0)])
def test_a_refused_request_applies_nothing(ros, action_node, decision, refused, value):
    """Atomically: a limit its own check accepts with a parameter another check refuses, that check
    running before the limit's (odom_topic, read at start-up) or after it (rate_hz 0: within its range,
    refused by ActionNodeConfig, whose on-set callback was added before NavConfig's)."""
    decisions, actions, _ = action_node
    (result,) = set_parameters(ros, "/humble/action", ANSWER_S, atomically=True, max_linear_speed=0.1,
                               **{refused: value})
    assert not result.successful and refused in result.reason
    action = decide(decisions, actions, decision, "Action: move forward 10 cm")
    assert action.linear_x == pytest.approx(0.3) and not action.clamped
