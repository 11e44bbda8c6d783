"""bridge_node in its own process against a real verifier: a malformed draft on edge_spec/draft is
answered with an ERROR status and dropped; the bridge keeps bridging (the next decision opens). A
repeated OPEN (the same decision and stamp) is answered again."""

from __future__ import annotations

from rosharness import node_command, process, wait_for
from edge_spec_ros.bench.ros_path import BRIDGE_TOPICS, bridge_matched
from edge_spec_ros.msg import BridgeStatus, DecisionRequest, DraftBlock as DraftBlockMsg, ExitResult as ExitResultMsg
from edge_spec_ros.nodes.ros_link import RELIABLE

DISCOVERY_S = 60.0  # discovery and matching on a loaded 2-core machine
OPEN_S = 60.0


def open_request(decision: int, prompt) -> DecisionRequest:
    msg = DecisionRequest()
    msg.decision, msg.command = decision, DecisionRequest.OPEN
    msg.input_ids = [int(t) for t in prompt.input_ids.reshape(-1)]
    msg.want_exits, msg.queue_policy = False, "priority"
    return msg


def test_a_malformed_draft_is_refused_and_the_bridge_goes_on(ros, server_endpoint, text_prompt, tmp_path):
    requests = ros.node.create_publisher(DecisionRequest, "edge_spec/decision_request", RELIABLE)
    drafts = ros.node.create_publisher(DraftBlockMsg, "edge_spec/draft", RELIABLE)
    status: list[BridgeStatus] = []
    status_sub = ros.node.create_subscription(BridgeStatus, "edge_spec/bridge_status", status.append, RELIABLE)
    results_sub = ros.node.create_subscription(ExitResultMsg, "edge_spec/exit_result", lambda m: None, RELIABLE)
    cmd = node_command("bridge_node", "-p", f"verifier_endpoint:={server_endpoint}")
    log = tmp_path / "bridge.log"
    with process(cmd, log) as proc:
        # matched on both sides of every topic: a message sent before its reader matched the writer is lost
        wait_for(lambda: requests.get_subscription_count() > 0 and drafts.get_subscription_count() > 0
                 and status_sub.get_publisher_count() > 0 and results_sub.get_publisher_count() > 0
                 and all(bridge_matched(log.read_text(), topic) > 0 for topic in BRIDGE_TOPICS),
                 DISCOVERY_S, "the bridge")
        requests.publish(open_request(1, text_prompt))
        wait_for(lambda: any(s.decision == 1 and s.state == BridgeStatus.OPENED for s in status), OPEN_S, "OPENED")
        # a repeat of the OPEN (same decision and stamp: the link heard no answer) is answered again
        requests.publish(open_request(1, text_prompt))
        wait_for(lambda: sum(s.decision == 1 and s.state == BridgeStatus.OPENED for s in status) == 2, OPEN_S,
                 "the repeated OPEN's answer")
        bad = DraftBlockMsg()
        bad.decision, bad.round, bad.position = 1, 1, 0
        bad.tokens = [1, 2, 3]
        bad.q, bad.vocab_size = [0.5] * 5, 7  # 5 values cannot be 3 rows of 7
        drafts.publish(bad)
        wait_for(lambda: any(s.decision == 1 and s.state == BridgeStatus.ERROR and "malformed" in s.message
                             for s in status), 10, "the ERROR status")
        requests.publish(open_request(2, text_prompt))
        wait_for(lambda: any(s.decision == 2 and s.state == BridgeStatus.OPENED for s in status), OPEN_S,
                 "the next decision to open")
        assert proc.poll() is None
