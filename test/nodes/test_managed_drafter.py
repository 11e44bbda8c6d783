"""drafter_node as a managed node, with the stack (bridge, action node, camera) in one process and the
verifier in another: autostart false leaves it unconfigured (an instruction decides nothing); once a
manager configures and activates it, it decides; deactivated mid-cycle it decides nothing more; cleaned
up, then configured and activated anew, it decides again; its /diagnostics (``drafter: decisions``)
report the decisions' latency and mode, and the bridge's its link under the same naming."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State, Transition
from std_msgs.msg import String

from lifecycle_client import Lifecycle
from rosharness import drafter_matched_instruction, process, statuses, wait_for
from edge_spec_ros.msg import Decision, NavAction as NavActionMsg
from edge_spec_ros.nav.motion import PlanarPose as Pose
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.sim.world import World

ROOT = Path(__file__).resolve().parents[2]
NS = "managed_d"
MOVE = "go to the grey box"  # the shipped pair on room 48 (test_navigate.py) → a motion, then decide again
UP_S = 90.0
STACK = ("import sys\n"
         "from edge_spec_ros.nodes.lifecycle import main_for\n"
         "from edge_spec_ros.nodes.drafter_node import DrafterNode\n"
         "from edge_spec_ros.nodes.bridge_node import BridgeNode\n"
         "from edge_spec_ros.nodes.action_node import ActionNode\n"
         "from edge_spec_ros.nodes.camera_node import CameraNode\n"
         "raise SystemExit(main_for(DrafterNode, BridgeNode, ActionNode, CameraNode, args=sys.argv))\n")


def stack_params(tmp_path: Path, endpoint: str) -> Path:
    config = yaml.safe_load((ROOT / "config" / "go2_nav.yaml").read_text())
    config = {f"/{NS}/{name}": value for name, value in config.items()}
    frames = tmp_path / "frames"
    frames.mkdir()
    world = World.random(48, distractors=3)  # test_navigate.py's room: the grey box about 2 m ahead
    world.pose = Pose(2.91, 1.53, 1.74)
    cv2.imwrite(str(frames / "room48.png"), cv2.cvtColor(world.render(), cv2.COLOR_RGB2BGR))
    config[f"/{NS}/camera"]["ros__parameters"].update(source=str(frames))
    config[f"/{NS}/bridge"]["ros__parameters"].update(verifier_endpoint=endpoint)
    config[f"/{NS}/drafter"]["ros__parameters"].update(mode="fsd", predraft_threads=1, torch_threads=1,
                                                       autostart=False)
    config[f"/{NS}/action"]["ros__parameters"].update(odom_topic="", cruise_linear_speed=0.15)  # timed, slow
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_drafter_decides_only_while_active(ros, server_endpoint, tmp_path):
    decisions = ros.collect(Decision, f"/{NS}/edge_spec/decision", RELIABLE)
    actions = ros.collect(NavActionMsg, f"/{NS}/edge_spec/action", RELIABLE)
    diagnostics = ros.collect(DiagnosticArray, "/diagnostics")
    instruction = ros.node.create_publisher(String, f"/{NS}/instruction", RELIABLE)
    log = tmp_path / "stack.log"
    cmd = [sys.executable, "-c", STACK, "--ros-args", "-r", f"__ns:=/{NS}",
           "--params-file", str(stack_params(tmp_path, server_endpoint))]
    with process(cmd, log) as proc:
        drafter = Lifecycle(ros, f"{NS}/drafter", UP_S)
        assert drafter.state() == State.PRIMARY_STATE_UNCONFIGURED
        wait_for(lambda: statuses(diagnostics, "drafter: decisions"), UP_S, "the drafter's diagnostics")
        assert statuses(diagnostics, "drafter: decisions")[-1].message == "unconfigured"
        wait_for(lambda: drafter_matched_instruction(log.read_text()) >= 1, UP_S, "the drafter's instruction match")
        instruction.publish(String(data=MOVE))
        wait_for(lambda: "ignored: the drafter is unconfigured" in log.read_text(), 10,
                 lambda: f"the ignored instruction\n{log.read_text()[-3000:]}")
        assert not decisions

        assert drafter.set(Transition.TRANSITION_CONFIGURE), log.read_text()[-3000:]  # loads the models
        assert drafter.set(Transition.TRANSITION_ACTIVATE)
        instruction.publish(String(data=MOVE))
        wait_for(lambda: decisions, UP_S, lambda: f"a decision once active\n{log.read_text()[-3000:]}")
        first = decisions[0]
        assert first.text and first.instruction == MOVE
        wait_for(lambda: any(a.decision == first.decision and a.status == NavActionMsg.STARTED for a in actions), 10,
                 "the motion")

        assert drafter.set(Transition.TRANSITION_DEACTIVATE)  # mid-cycle: the motion runs, no decision follows
        wait_for(lambda: any(a.decision == first.decision and a.status != NavActionMsg.STARTED for a in actions),
                 30, "the motion's end")
        seen = len(statuses(diagnostics, "drafter: decisions"))
        wait_for(lambda: len(statuses(diagnostics, "drafter: decisions")) >= seen + 3, 15, "three more diagnostics")
        assert [d.decision for d in decisions] == [first.decision], decisions

        drafter_status = statuses(diagnostics, "drafter: decisions")[-1]
        values = {kv.key: kv.value for kv in drafter_status.values}
        assert drafter_status.message == "inactive" and values["mode"] == "fsd", drafter_status
        assert values["decisions"] == "1" and float(values["last_latency_s"]) > 0, values
        link = statuses(diagnostics, "bridge: verifier link")[-1]
        assert link.hardware_id == server_endpoint, link
        assert statuses(diagnostics, "action: motion") and statuses(diagnostics, "camera: frame rate")

        # cleanup: unconfigured again (threads joined, the link ended, the models dropped); a manager that
        # configures and activates it anew gets a drafter that decides again
        assert drafter.set(Transition.TRANSITION_CLEANUP), log.read_text()[-3000:]
        assert drafter.state() == State.PRIMARY_STATE_UNCONFIGURED
        wait_for(lambda: statuses(diagnostics, "drafter: decisions")[-1].message == "unconfigured", 15,
                 "unconfigured in the diagnostics")

        def link_publishers() -> int:  # the drafter's links' (decisions', describe's) publishers, in the graph
            return sum(info.node_name == "drafter" for topic in ("decision_request", "draft")
                       for info in ros.node.get_publishers_info_by_topic(f"/{NS}/edge_spec/{topic}"))

        wait_for(lambda: link_publishers() == 0, 15, lambda: "the links' publishers gone with cleanup\n"
                 + log.read_text()[-3000:])
        assert drafter.set(Transition.TRANSITION_CONFIGURE), log.read_text()[-3000:]
        wait_for(lambda: link_publishers() == 4, 15, "the links' publishers made anew, once each")
        assert drafter.set(Transition.TRANSITION_ACTIVATE)
        instruction.publish(String(data=MOVE))
        wait_for(lambda: len(decisions) > 1, UP_S, lambda: f"a decision after cleanup\n{log.read_text()[-3000:]}")
        assert decisions[1].text and decisions[1].instruction == MOVE, decisions[1]
        assert proc.poll() is None, log.read_text()[-3000:]
