"""The matched-publishers and matched-subscriptions log lines and their readers (nodes/matched.py)."""

from edge_spec_ros.nodes.matched import matched_line, matched_publishers, matched_subscriptions, subscriptions_line

LOG = (f"[INFO] [1.0] [drafter]: {matched_line('instruction', 1)}\n"
       f"[INFO] [1.1] [ns.bridge]: {matched_line('instruction', 3)}\n"
       f"[INFO] [1.2] [robot1.drafter]: {matched_line('instruction', 2)}\n")


def test_the_latest_line_of_the_named_node_in_any_namespace():
    assert matched_publishers(LOG, "instruction", node="drafter") == 2
    assert matched_publishers(LOG, "instruction", node="bridge") == 3
    assert matched_publishers(LOG, "instruction") == 2  # any node: the latest line


def test_nothing_before_the_first_line_or_of_another_topic_or_node():
    assert matched_publishers("", "instruction") == 0
    assert matched_publishers(LOG, "draft") == 0
    assert matched_publishers(LOG, "instruction", node="action") == 0
    assert matched_publishers(LOG, "instruction", node="rafter") == 0  # a name, not a suffix of one


def test_a_publishers_matched_subscriptions_are_read_apart_from_a_subscriptions_publishers():
    log = LOG + f"[INFO] [1.3] [navigate]: {subscriptions_line('instruction', 4)}\n"
    assert matched_subscriptions(log, "instruction", node="navigate") == 4
    assert matched_subscriptions(log, "instruction", node="drafter") == 0
    assert matched_publishers(log, "instruction") == 2  # the publisher's line is not a subscription's
