"""A verifier lost while the robot decides and while it moves, through the whole ROS stack: camera,
bridge, drafter and action nodes in one process, navigate_node in another, a verifier process on a
fixed loopback port that the test SIGKILLs and restarts.

- mid-decision: the bridge's heartbeat knows the loss at once; the decision in progress fails with
  the reason (not opened again), the instruction cycle ends, and the navigate goal ends FAILED with
  the bridge's reason;
- after a restart the link is alive by itself and the next goal decides again;
- mid-motion: the action node ends the motion at zero velocity (CANCELLED, "verifier lost") and the
  goal ends FAILED with the reason.

Bounds on elapsed time are generous functional checks: without the heartbeat the loss took 30 s to be
noticed and the robot stood about 92 s before its cycle ended."""

from __future__ import annotations

import time

from action_msgs.msg import GoalStatus
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

from rosharness import drafter_matched_instruction, navigate_matched_instruction, node_command, process, wait_for
from test_navigate import MOVE, Stack, moving, navigate_stack
from edge_spec_ros.action import Navigate
from edge_spec_ros.msg import BridgeStatus, NavAction as NavActionMsg
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.server_process import verifier_server
from waiting import free_port

TQ_S = "0.2"  # emulated verification: a decision lasts long enough to be cut in the middle
LOST_WITHIN_S = 10.0  # from the SIGKILL to the goal's FAILED result (the heartbeat: at once)
UP_S = 90.0
DECIDE_S = 90.0


def test_a_lost_verifier_ends_the_decision_and_the_motion_with_the_reason(ros, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    serve = ("--bind", endpoint, "--emulate-tq-s", TQ_S)
    s = Stack(ros, tmp_path)
    status: list[tuple[float, BridgeStatus]] = []
    ros.node.create_subscription(BridgeStatus, "edge_spec/bridge_status",
                                 lambda m: status.append((time.monotonic(), m)), RELIABLE)
    link: list[tuple[float, DiagnosticStatus]] = []
    ros.node.create_subscription(DiagnosticArray, "/diagnostics", lambda a: link.extend(
        (time.monotonic(), st) for st in a.status if st.hardware_id == endpoint), 10)
    stack_cmd = navigate_stack(tmp_path, endpoint)
    navigate_cmd = node_command("navigate_node", "-p", "progress_timeout_s:=120.0")

    def heard_loss() -> int:  # the action node's log lines on a LINK_LOST so far
        return (tmp_path / "stack.log").read_text().count("verifier lost (")

    def alive_since(t: float) -> bool:
        return any(at >= t and st.level == DiagnosticStatus.OK for at, st in link)

    server = verifier_server(*serve)
    verifier = server.__enter__()
    try:
        with process(stack_cmd, tmp_path / "stack.log") as robot, process(navigate_cmd, tmp_path / "navigate.log"):
            wait_for(lambda: s.navigate.server_is_ready()
                     and len(ros.node.get_subscriptions_info_by_topic("/instruction")) >= 4
                     and drafter_matched_instruction((tmp_path / "stack.log").read_text()) >= 1
                     and navigate_matched_instruction((tmp_path / "navigate.log").read_text()) >= 4, UP_S,
                     lambda: f"the stack and navigate_node\n{s.logs()}")
            wait_for(lambda: alive_since(0.0), UP_S, lambda: f"the link alive\n{s.logs()}")

            # --- mid-decision ----------------------------------------------------------------------
            since = time.monotonic()
            _, _, future = s.goal(MOVE)
            wait_for(lambda: any(at >= since and m.state == BridgeStatus.OPENED for at, m in status), DECIDE_S,
                     lambda: f"a decision to open\n{s.logs()}")
            time.sleep(0.3)  # into the decision
            killed = time.monotonic()
            verifier.proc.kill()
            verifier.proc.wait()
            response = s.result(future, LOST_WITHIN_S)
            result = response.result
            assert response.status == GoalStatus.STATUS_ABORTED and result.outcome == Navigate.Result.FAILED, result
            assert "lost" in result.message and endpoint in result.message, result.message
            assert time.monotonic() - killed < LOST_WITHIN_S
            # the cycle ends failed, or superseded by the "stop" navigate_node publishes as the goal fails
            wait_for(lambda: any(f"instruction cycle ended after 1 decisions: {how}" in (tmp_path / "stack.log")
                                 .read_text() for how in ("failed", "superseded")),
                     LOST_WITHIN_S, lambda: f"the drafter's cycle to end\n{s.logs()}")
            log = (tmp_path / "stack.log").read_text()
            assert "lost" in log.split("decision 1 failed:")[1].splitlines()[0] and "opening it again" not in log

            # --- a restart: the link recovers by itself, the next goal decides --------------------
            server.__exit__(None, None, None)
            restarted = time.monotonic()
            server = verifier_server(*serve)
            verifier = server.__enter__()
            wait_for(lambda: alive_since(restarted), UP_S, lambda: f"the link to recover\n{s.logs()}")

            # --- mid-motion ----------------------------------------------------------------------
            since = time.monotonic()
            _, feedback, future = s.goal(MOVE)
            wait_for(lambda: any(moving(m) for t, m in s.twists if t >= since), DECIDE_S,
                     lambda: f"the robot to move after the restart\n{s.logs()}")
            assert any(d.text for d in s.decisions if d.decision > 1)  # the next decision decided
            heard = heard_loss()
            killed = time.monotonic()
            verifier.proc.kill()
            verifier.proc.wait()
            response = s.result(future, LOST_WITHIN_S)
            assert response.result.outcome == Navigate.Result.FAILED and "lost" in response.result.message, \
                response.result
            wait_for(lambda: any(t >= killed and not moving(m) for t, m in s.twists), LOST_WITHIN_S,
                     "zero velocity after the loss")
            zero = next(t for t, m in s.twists if t >= killed and not moving(m))
            assert zero - killed < LOST_WITHIN_S
            ended = [m for t, m in s.actions if t >= killed and m.status == NavActionMsg.CANCELLED]
            # the bridge's LINK_LOST reaches the action node directly, and through navigate_node as its
            # "stop" (the goal fails on the same LINK_LOST): when both wait in one wake of the action
            # node's executor, either can end the motion first; the action node hears the loss either way
            assert ended and ended[0].end_reason in ("verifier lost", "stop"), [m.end_reason for _, m in s.actions]
            wait_for(lambda: heard_loss() > heard, LOST_WITHIN_S,
                     lambda: f"the action node to hear the loss\n{s.logs()}")
            assert robot.poll() is None
    finally:
        server.__exit__(None, None, None)
