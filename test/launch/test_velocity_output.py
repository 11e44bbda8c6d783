"""Where the velocity commands go (launch/go2_nav.launch.py, checked with the stand-ins of
test_launch_static.py): by default to ``cmd_vel_vlm``, a twist_mux input of the package's own, never to
nav2's ``cmd_vel``; the simulated room follows the same topic and the action node's message type; and
config/twist_mux_go2.yaml, the twist_mux snippet for go2_ros2_sdk, lists that input beside nav2's and
the joystick's."""

from __future__ import annotations

import yaml

from edge_spec_ros.nodes.action_node import ActionNodeConfig
from test_launch_static import MODULE, ROOT, YAML, launch, overrides

TWIST_MUX = ROOT / "config" / "twist_mux_go2.yaml"


def test_the_action_node_commands_a_twist_mux_input_of_its_own():
    nodes, _ = launch()
    assert nodes["action"]["remappings"] == [("cmd_vel", "cmd_vel_vlm")]
    sim, _ = launch(use_sim="true")
    assert sim["action"]["remappings"] == sim["sim"]["remappings"] == [("cmd_vel", "cmd_vel_vlm")]
    straight, _ = launch(cmd_vel_topic="cmd_vel")  # the argument still overrides it
    assert straight["action"]["remappings"] == [("cmd_vel", "cmd_vel")]


def test_the_room_takes_the_action_nodes_message_type(tmp_path):
    config = yaml.safe_load(YAML.read_text())
    assert config["action"]["ros__parameters"]["cmd_vel_type"] == ActionNodeConfig.cmd_vel_type == "Twist"
    config["action"]["ros__parameters"]["cmd_vel_type"] = "TwistStamped"
    stamped = tmp_path / "stamped.yaml"
    stamped.write_text(yaml.safe_dump(config))
    nodes, _ = launch(use_sim="true", params_file=str(stamped))
    assert overrides(nodes["sim"])["cmd_vel_type"] == "TwistStamped"
    assert "cmd_vel_type" not in overrides(nodes["action"])  # the action node reads it from the file itself
    del config["action"]["ros__parameters"]["cmd_vel_type"]
    stamped.write_text(yaml.safe_dump(config))
    nodes, _ = launch(use_sim="true", params_file=str(stamped))
    assert "cmd_vel_type" not in overrides(nodes["sim"])  # both nodes' default
    assert MODULE.action_cmd_vel_type(str(YAML)) == "Twist"


def test_the_twist_mux_snippet_puts_our_input_between_nav2_and_the_joystick():
    topics = yaml.safe_load(TWIST_MUX.read_text())["twist_mux"]["ros__parameters"]["topics"]
    by_topic = {entry["topic"]: entry for entry in topics.values()}
    default_output = next(d for name, d, _, _ in MODULE.arguments() if name == "cmd_vel_topic")
    ours, nav2, joystick = by_topic[default_output], by_topic["cmd_vel"], by_topic["cmd_vel_joy"]
    assert nav2["priority"] < ours["priority"] < joystick["priority"] <= 255
    assert len({entry["priority"] for entry in topics.values()}) == len(topics)  # no ties
    # a silent input is dropped well before the action node's own bounds: it publishes at >= 20 Hz while
    # moving and holds zero for hold_zero_s after a motion
    action = yaml.safe_load(YAML.read_text())["action"]["ros__parameters"]
    assert 2.0 / action["rate_hz"] < ours["timeout"] <= action["hold_zero_s"]
