"""The ROS path's readiness check reads the bridge's log: the latest "<topic>: N publisher(s) matched"
line of each of its subscriptions counts, a line of another topic does not."""

from __future__ import annotations

from edge_spec_ros.bench.ros_path import BRIDGE_TOPICS, bridge_matched

LOG = ("[INFO] [1.0] [edge_spec_bench_7.bridge]: bridging to the verifier at tcp://127.0.0.1:5555\n"
       "[INFO] [1.1] [edge_spec_bench_7.bridge]: decision_request: 1 publisher(s) matched\n"
       "[INFO] [1.2] [edge_spec_bench_7.bridge]: decision_request: 0 publisher(s) matched\n"
       "[INFO] [1.3] [edge_spec_bench_7.bridge]: draft: 2 publisher(s) matched\n")


def test_the_latest_line_of_each_topic_counts():
    assert BRIDGE_TOPICS == ("decision_request", "draft")
    assert bridge_matched(LOG, "decision_request") == 0  # matched, then lost
    assert bridge_matched(LOG, "draft") == 2
    assert bridge_matched(LOG + "[INFO] [1.4] [b]: decision_request: 1 publisher(s) matched\n",
                          "decision_request") == 1


def test_no_line_is_none_matched():
    assert bridge_matched("", "draft") == 0
    assert bridge_matched("[INFO] [1.0] [b]: bridging to the verifier\n", "decision_request") == 0
