"""The log line a node writes at each change in the publishers one of its subscriptions has matched,
and its reader. A publisher's own count (``get_subscription_count``) says that it has matched the
subscription, not that the subscription has matched it back: a message sent in between is lost (a
volatile reader never receives what a writer sent before the reader matched it). Tests, the bench's
ROS path and operators wait for this line, not for the graph."""

from __future__ import annotations

import re


def matched_line(topic: str, count: int) -> str:
    """``<topic>: N publisher(s) matched``."""
    return f"{topic}: {count} publisher(s) matched"


def matched_publishers(log_text: str, topic: str, node: str = "") -> int:
    """How many publishers of ``topic`` a subscription has matched, by the latest such line in a
    node's log (0 before the first); ``node``: only lines of the node of that name (any namespace)."""
    prefix = rf"\[(?:[^\]\s]*\.)?{re.escape(node)}\]" if node else r"\]"
    counts = re.findall(rf"{prefix}: {re.escape(topic)}: (\d+) publisher\(s\) matched", log_text)
    return int(counts[-1]) if counts else 0
