"""drafter_node as a managed node, with the stack (bridge, action node, camera) in one process and the
verifier in another: autostart false leaves it unconfigured (an instruction decides nothing); once a
manager configures and activates it, it decides; deactivated mid-cycle it decides nothing more; cleaned
up, then configured and activated anew, it decides again; its /diagnostics (``drafter: decisions``)
report the decisions' latency and mode, and the bridge's its link under the same naming."""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State, Transition
from std_msgs.msg import String

from lifecycle_client import Lifecycle
from rosharness import drafter_matched_instruction, process, statuses, wait_for
from stack import stack_command, stack_params
from edge_spec_ros.msg import Decision, NavAction as NavActionMsg
from edge_spec_ros.nodes.ros_link import RELIABLE

NS = "managed_d"
MOVE = "go to the grey box"  # the shipped pair on room 48 (test_navigate.py) → a motion, then decide again
UP_S = 90.0


def test_the_drafter_decides_only_while_active(ros, server_endpoint, tmp_path):
    decisions = ros.collect(Decision, f"/{NS}/edge_spec/decision", RELIABLE)
    actions = ros.collect(NavActionMsg, f"/{NS}/edge_spec/action", RELIABLE)
    diagnostics = ros.collect(DiagnosticArray, "/diagnostics")
    instruction = ros.node.create_publisher(String, f"/{NS}/instruction", RELIABLE)
    log = tmp_path / "stack.log"
    params = stack_params(tmp_path, server_endpoint, NS,
                          drafter={"mode": "fsd", "predraft_threads": 1, "torch_threads": 1, "autostart": False},
                          action={"odom_topic": "", "cruise_linear_speed": 0.15})  # timed, slow
    cmd = stack_command(params, NS)
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
