"""The drafter node's ``grammar`` over the ROS path: the bridge carries it in the Open's DecisionRequest,
the verifier masks p by it and the drafter q, so a grammar that allows one reply makes every decision
that reply (the verifier alone decides the tokens: had it not received the grammar, the pair's own
reply would come); a grammar that does not compile fails the drafter's configure with the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import yaml
from std_msgs.msg import String

from rosharness import drafter_matched_instruction, process, wait_for
from edge_spec_ros.msg import Decision
from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.grammar import parse_action
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.sim.world import World

ROOT = Path(__file__).resolve().parents[2]
NS = "grammar_ros"
UP_S = 90.0
FORCED = "Reasoning: the grey box is ahead. Action: stop"  # words of the shipped pair's vocabulary
STACK = ("import sys\n"
         "from edge_spec_ros.nodes.lifecycle import main_for\n"
         "from edge_spec_ros.nodes.drafter_node import DrafterNode\n"
         "from edge_spec_ros.nodes.bridge_node import BridgeNode\n"
         "from edge_spec_ros.nodes.camera_node import CameraNode\n"
         "raise SystemExit(main_for(DrafterNode, BridgeNode, CameraNode, args=sys.argv))\n")


def stack_params(tmp_path: Path, endpoint: str, grammar: str) -> Path:
    config = yaml.safe_load((ROOT / "config" / "go2_nav.yaml").read_text())
    config = {f"/{NS}/{name}": config[name] for name in ("drafter", "bridge", "camera")}
    frames = tmp_path / "frames"
    frames.mkdir()
    cv2.imwrite(str(frames / "room48.png"), cv2.cvtColor(World.random(48, distractors=3).render(), cv2.COLOR_RGB2BGR))
    config[f"/{NS}/camera"]["ros__parameters"].update(source=str(frames))
    config[f"/{NS}/bridge"]["ros__parameters"].update(verifier_endpoint=endpoint)
    config[f"/{NS}/drafter"]["ros__parameters"].update(mode="fsd", predraft_threads=1, torch_threads=1,
                                                       grammar=grammar)
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_grammar_of_one_reply_makes_the_decision_that_reply(ros, server_endpoint, tmp_path):
    decisions = ros.collect(Decision, f"/{NS}/edge_spec/decision", RELIABLE)
    instruction = ros.node.create_publisher(String, f"/{NS}/instruction", RELIABLE)
    log = tmp_path / "stack.log"
    grammar = f'root ::= "{FORCED}"'
    params = stack_params(tmp_path, server_endpoint, grammar)
    cmd = [sys.executable, "-c", STACK, "--ros-args", "-r", f"__ns:=/{NS}", "--params-file", str(params)]
    with process(cmd, log) as proc:
        wait_for(lambda: "drafter ready" in log.read_text() and drafter_matched_instruction(log.read_text()) >= 1,
                 UP_S, lambda: f"the drafter\n{log.read_text()[-3000:]}")
        instruction.publish(String(data="go to the grey box"))
        wait_for(lambda: decisions, UP_S, lambda: f"a decision\n{log.read_text()[-3000:]}")
        assert proc.poll() is None
    assert decisions[0].text == FORCED, decisions[0].text
    assert parse_action(decisions[0].text, NavConfig()).ok


def test_a_grammar_that_does_not_compile_fails_the_configure_with_its_reason(ros, tmp_path):
    log = tmp_path / "drafter.log"
    params = stack_params(tmp_path, "tcp://127.0.0.1:9", 'root ::= "unterminated')
    cmd = [sys.executable, "-c", STACK, "--ros-args", "-r", f"__ns:=/{NS}", "--params-file", str(params)]
    with process(cmd, log):
        wait_for(lambda: "does not compile" in log.read_text(), UP_S,
                 lambda: f"the configure's failure\n{log.read_text()[-3000:]}")
    assert "grammar 'root ::= \"unterminated'" in log.read_text()
