"""bridge_node as a managed node, in its own process: unconfigured it reports STALE and opens
nothing; configured but inactive it answers an OPEN with ERROR ``INACTIVE_CODE`` at once; active it
opens decisions on the verifier; cleaned up it is unconfigured again, and configured and activated anew
it opens decisions again."""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from lifecycle_msgs.msg import State, Transition

from lifecycle_client import Lifecycle
from rosharness import node_command, process, wait_for
from edge_spec_ros.bench.ros_path import bridge_matched
from edge_spec_ros.msg import BridgeStatus, DecisionRequest
from edge_spec_ros.nodes.bridge_node import INACTIVE_CODE
from edge_spec_ros.nodes.ros_link import RELIABLE

DISCOVERY_S = 60.0
OPEN_S = 60.0
NS = "managed_br"


def open_request(decision: int, prompt) -> DecisionRequest:
    msg = DecisionRequest()
    msg.decision, msg.command = decision, DecisionRequest.OPEN
    msg.input_ids = [int(t) for t in prompt.input_ids.reshape(-1)]
    msg.want_exits, msg.queue_policy = False, "priority"
    return msg


def test_the_bridge_opens_decisions_only_while_active(ros, server_endpoint, text_prompt, tmp_path):
    diagnostics = ros.collect(DiagnosticArray, "/diagnostics")
    requests = ros.node.create_publisher(DecisionRequest, f"/{NS}/edge_spec/decision_request", RELIABLE)
    status: list[BridgeStatus] = []
    status_sub = ros.node.create_subscription(BridgeStatus, f"/{NS}/edge_spec/bridge_status", status.append, RELIABLE)
    log = tmp_path / "bridge.log"
    cmd = node_command("bridge_node", "-r", f"__ns:=/{NS}", "-p", f"verifier_endpoint:={server_endpoint}",
                       "-p", "autostart:=false", "-p", "diagnostics_period_s:=0.25")
    with process(cmd, log) as proc:
        bridge = Lifecycle(ros, f"{NS}/bridge", DISCOVERY_S)
        assert bridge.state() == State.PRIMARY_STATE_UNCONFIGURED

        def mine() -> list[DiagnosticStatus]:
            return [s for s in (st for a in list(diagnostics) for st in a.status)
                    if s.name == "bridge: verifier link" and s.hardware_id == server_endpoint]

        wait_for(mine, DISCOVERY_S, "the bridge's diagnostics")
        assert mine()[-1].level == DiagnosticStatus.STALE and mine()[-1].message == "unconfigured"
        assert requests.get_subscription_count() == 0  # unconfigured: nobody takes requests

        assert bridge.set(Transition.TRANSITION_CONFIGURE)
        wait_for(lambda: requests.get_subscription_count() > 0 and status_sub.get_publisher_count() > 0
                 and bridge_matched(log.read_text(), "decision_request") > 0, DISCOVERY_S, "the bridge's topics")
        requests.publish(open_request(1, text_prompt))
        wait_for(lambda: any(s.decision == 1 for s in status), 10, "the answer to an OPEN while inactive")
        refused = next(s for s in status if s.decision == 1)
        assert refused.state == BridgeStatus.ERROR and refused.code == INACTIVE_CODE, refused
        assert refused.message == "the bridge is inactive"

        assert bridge.set(Transition.TRANSITION_ACTIVATE)
        requests.publish(open_request(2, text_prompt))
        wait_for(lambda: any(s.decision == 2 and s.state == BridgeStatus.OPENED for s in status), OPEN_S,
                 lambda: f"OPENED once active\n{log.read_text()[-2000:]}")
        assert bridge.set(Transition.TRANSITION_DEACTIVATE)  # the open decision ends at once
        wait_for(lambda: any(s.decision == 2 and s.state == BridgeStatus.ERROR for s in status), 10,
                 "the open decision's end")
        ended = [s for s in status if s.decision == 2 and s.state == BridgeStatus.ERROR][-1]
        assert ended.code == INACTIVE_CODE and ended.message == "the bridge was deactivated", ended

        # cleanup: back to unconfigured (the link and the receiver closed); configured again it opens
        matches = log.read_text().count("decision_request: 1 publisher(s) matched")
        assert bridge.set(Transition.TRANSITION_CLEANUP)
        assert bridge.state() == State.PRIMARY_STATE_UNCONFIGURED
        wait_for(lambda: requests.get_subscription_count() == 0, 10, "the receiver's subscriptions gone")
        wait_for(lambda: mine()[-1].message == "unconfigured", 10, "unconfigured in the diagnostics")
        assert mine()[-1].level == DiagnosticStatus.STALE
        assert bridge.set(Transition.TRANSITION_CONFIGURE) and bridge.set(Transition.TRANSITION_ACTIVATE)
        wait_for(lambda: log.read_text().count("decision_request: 1 publisher(s) matched") > matches, DISCOVERY_S,
                 "the new receiver's match")
        requests.publish(open_request(3, text_prompt))
        wait_for(lambda: any(s.decision == 3 and s.state == BridgeStatus.OPENED for s in status), OPEN_S,
                 lambda: f"OPENED after cleanup and configure\n{log.read_text()[-2000:]}")
        assert proc.poll() is None, log.read_text()[-2000:]
