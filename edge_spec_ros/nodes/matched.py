"""The log line a node writes at each change in the publishers one of its subscriptions has matched
(or in the subscriptions one of its publishers has), and its reader. Writer and reader match each
other separately: a publisher's own count (``get_subscription_count``) says that it has matched the
subscription, not that the subscription has matched it back, and a message sent in between is lost (a
volatile reader never receives what a writer sent before the reader matched it); a message sent before
the publisher has matched a subscription never goes to it. Tests, the bench's ROS path and operators
wait for these lines (both ends' where both matter), not for the graph."""

from __future__ import annotations

import re


def matched_line(topic: str, count: int) -> str:
    """``<topic>: N publisher(s) matched`` (a subscription's)."""
    return f"{topic}: {count} publisher(s) matched"


def subscriptions_line(topic: str, count: int) -> str:
    """``<topic>: N subscription(s) matched`` (a publisher's)."""
    return f"{topic}: {count} subscription(s) matched"


def matched_publishers(log_text: str, topic: str, node: str = "") -> int:
    """How many publishers of ``topic`` a subscription has matched, by the latest such line in a
    node's log (0 before the first); ``node``: only lines of the node of that name (any namespace)."""
    return _latest(log_text, topic, "publisher", node)


def matched_subscriptions(log_text: str, topic: str, node: str = "") -> int:
    """How many subscriptions of ``topic`` a publisher has matched, as ``matched_publishers``."""
    return _latest(log_text, topic, "subscription", node)


def _latest(log_text: str, topic: str, ends: str, node: str) -> int:
    prefix = rf"\[(?:[^\]\s]*\.)?{re.escape(node)}\]" if node else r"\]"
    counts = re.findall(rf"{prefix}: {re.escape(topic)}: (\d+) {ends}\(s\) matched", log_text)
    return int(counts[-1]) if counts else 0
