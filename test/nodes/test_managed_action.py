"""action_node as a managed node, in its own process, driven through its lifecycle services: active it
moves on a decision; deactivated mid-motion it ends the motion with a final zero and commands nothing
more; inactive or unconfigured it ignores decisions; its /diagnostics (``action: motion``) say so, and
give the watchdog's timeout and time since the last sign of life and the last command's clamp."""

from __future__ import annotations

import time

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Twist
from lifecycle_msgs.msg import State, Transition

from lifecycle_client import DISCOVERY_S, Lifecycle
from rosharness import node_command, process, statuses, wait_for
from edge_spec_ros.msg import Decision, NavAction as NavActionMsg
from edge_spec_ros.nodes.ros_link import RELIABLE


def send(pub, decision: int, text: str) -> None:
    msg = Decision()
    msg.decision, msg.text, msg.mode = decision, text, "fsd"
    pub.publish(msg)



class Stack:
    def __init__(self, ros, ns: str) -> None:
        self.twists: list[tuple[float, float, float]] = []
        ros.node.create_subscription(Twist, f"/{ns}/cmd_vel",
                                     lambda m: self.twists.append((time.monotonic(), m.linear.x, m.angular.z)), 100)
        self.decisions = ros.node.create_publisher(Decision, f"/{ns}/edge_spec/decision", RELIABLE)
        self.actions = ros.collect(NavActionMsg, f"/{ns}/edge_spec/action", RELIABLE)
        self.diagnostics = ros.collect(DiagnosticArray, "/diagnostics")

    def quiet_for_diagnostics(self, count: int = 3) -> None:
        """Wait for ``count`` more of the action node's diagnostics (it reports every second): a clock
        for "nothing more was published meanwhile"."""
        seen = len(statuses(self.diagnostics, "action: motion"))
        wait_for(lambda: len(statuses(self.diagnostics, "action: motion")) >= seen + count, 15,
                 f"{count} more diagnostics of the action node")


def test_deactivate_mid_motion_stops_at_zero_and_commands_nothing_more(ros, tmp_path):
    stack = Stack(ros, "managed_a")
    log = tmp_path / "action.log"
    with process(node_command("action_node", "-r", "__ns:=/managed_a", "-p", "rate_hz:=50.0"), log) as proc:
        node = Lifecycle(ros, "managed_a/action")
        assert node.state() == State.PRIMARY_STATE_ACTIVE  # autostart
        wait_for(lambda: stack.decisions.get_subscription_count() > 0, DISCOVERY_S, "the action node's subscription")
        send(stack.decisions, 1, "Action: move forward 100 cm")
        wait_for(lambda: len(stack.twists) > 5 and stack.twists[-1][1] > 0, 10, "motion")

        assert node.set(Transition.TRANSITION_DEACTIVATE)
        wait_for(lambda: any(a.status == NavActionMsg.CANCELLED for a in stack.actions), 5, "the motion's end")
        end = next(a for a in stack.actions if a.status == NavActionMsg.CANCELLED)
        assert end.decision == 1 and end.end_reason == "deactivated", end
        assert stack.twists[-1][1:] == (0.0, 0.0), stack.twists[-3:]
        after = len(stack.twists)
        send(stack.decisions, 2, "Action: turn left 90 degrees")  # inactive: no motion
        stack.quiet_for_diagnostics()
        assert len(stack.twists) == after, stack.twists[after:]
        assert not any(a.decision == 2 for a in stack.actions)
        assert statuses(stack.diagnostics, "action: motion")[-1].message == "inactive"
        assert "decision 2 ignored: the node is inactive" in log.read_text()

        assert node.set(Transition.TRANSITION_ACTIVATE)  # active again: decisions move it
        send(stack.decisions, 3, "Action: move forward 30 cm")
        wait_for(lambda: len(stack.twists) > after and stack.twists[-1][1] > 0, 10, "motion once active again")
        wait_for(lambda: any(v.key == "last_end" and v.value.startswith("decision 3 forward: done")
                             for s in statuses(stack.diagnostics, "action: motion") for v in s.values), 15,
                 "the motion's end in the diagnostics")
        assert proc.poll() is None, log.read_text()
    assert "Traceback" not in log.read_text()


def test_unconfigured_it_ignores_decisions_until_a_manager_activates_it(ros, tmp_path):
    stack = Stack(ros, "managed_b")
    log = tmp_path / "action.log"
    cmd = node_command("action_node", "-r", "__ns:=/managed_b", "-p", "rate_hz:=50.0", "-p", "autostart:=false")
    with process(cmd, log) as proc:
        node = Lifecycle(ros, "managed_b/action")
        assert node.state() == State.PRIMARY_STATE_UNCONFIGURED
        wait_for(lambda: stack.decisions.get_subscription_count() > 0, DISCOVERY_S, "the action node's subscription")
        send(stack.decisions, 1, "Action: move forward 30 cm")
        stack.quiet_for_diagnostics()
        assert not stack.twists and not stack.actions
        assert statuses(stack.diagnostics, "action: motion")[-1].message == "unconfigured"

        assert node.set(Transition.TRANSITION_CONFIGURE) and node.set(Transition.TRANSITION_ACTIVATE)
        send(stack.decisions, 2, "Action: move forward 30 cm")
        wait_for(lambda: stack.twists and stack.twists[-1][1] > 0, 10, "motion once a manager activated it")
        wait_for(lambda: any(a.decision == 2 and a.status == NavActionMsg.DONE for a in stack.actions), 10,
                 "the motion's end")

        # the watchdog's and the clamp's state in the diagnostics: a turn over the limits is clamped
        send(stack.decisions, 3, "Action: turn left 720 degrees")

        def clamped() -> list[dict[str, str]]:
            reports = ({v.key: v.value for v in s.values} for s in statuses(stack.diagnostics, "action: motion"))
            return [r for r in reports if r["motion"] == "decision 3 turn" and r["clamped"] == "True"]

        wait_for(clamped, 15, "the clamped turn in the diagnostics")
        report = clamped()[0]
        assert report["clamp_reasons"] and report["watchdog_timeout_s"] == "6", report
        assert 0.0 <= float(report["since_sign_of_life_s"]) < 6.0, report
        assert proc.poll() is None, log.read_text()
