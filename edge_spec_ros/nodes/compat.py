"""The rclpy APIs the nodes use that not every ROS 2 distribution has, detected once at import, each
with a fallback that keeps the nodes' behaviour on Humble.

    API                                        Humble (rclpy 3)   Iron, Jazzy (5, 7)   Kilted (9)
    rclpy.event_handler, subscription matched  -                  yes                  yes
      events (QoSSubscriptionMatchedInfo)      (rclpy.qos_event, without matched events)
    Node.add_post_set_parameters_callback      -                  yes                  yes
    Subscription.get_publisher_count           -                  yes                  yes

Detection looks for the API itself, never at a version number, so a backport is used where it exists.
The fallbacks:

- matched publishers (``subscribe_matched``, ``publisher_count``): the graph instead of the
  subscription's own matches: publishers of the topic this process has discovered whose QoS is
  compatible with the subscription's, looked at every ``MATCH_POLL_S``. The graph learns of a
  publisher from the same endpoint discovery that matches the subscription to it, but as a separate
  step: the count can run a few milliseconds ahead of the matches themselves.
- post-set parameter callbacks (``add_post_set_parameters_callback``): an on-set callback notes each
  request it sees and a one-shot timer runs the callback on the node's executor after the request,
  once the parameters hold the requested values (a request that another on-set callback refused, or
  that changed no value, runs nothing). The executor serves a ready timer before the node's
  subscriptions, so a message that arrives after the reply already sees the new values.

Tests run the nodes with these APIs removed, as Humble's rclpy has them (test/nodes/humble_api.py).
"""

from __future__ import annotations

import array
import math
import threading
from collections.abc import Callable
from typing import Any

from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSCompatibility, qos_check_compatible
from rclpy.subscription import Subscription

try:
    from rclpy.event_handler import (  # noqa: F401
        PublisherEventCallbacks, QoSSubscriptionMatchedInfo, SubscriptionEventCallbacks,
    )
    HAS_MATCHED_EVENTS = True
except ImportError:  # Humble: rclpy.qos_event, whose SubscriptionEventCallbacks has no matched events
    HAS_MATCHED_EVENTS = False
HAS_POST_SET_PARAMETERS = hasattr(Node, "add_post_set_parameters_callback")
HAS_SUBSCRIPTION_PUBLISHER_COUNT = hasattr(Subscription, "get_publisher_count")

MATCH_POLL_S = 0.1  # without matched events: how often the graph is looked at for a topic's publishers


def publisher_count(node: Node, subscription: Subscription) -> int:
    """How many publishers ``subscription`` has matched (Humble: compatible publishers in the graph)."""
    if HAS_SUBSCRIPTION_PUBLISHER_COUNT:
        return subscription.get_publisher_count()
    infos = node.get_publishers_info_by_topic(subscription.topic_name)
    return sum(1 for info in infos
               if qos_check_compatible(info.qos_profile, subscription.qos_profile)[0] != QoSCompatibility.ERROR)


def subscribe_matched(node: Node, msg_type, topic: str, callback: Callable, qos,
                      on_matched: Callable[[int], None], **kwargs: Any) -> Subscription:
    """``node.create_subscription(msg_type, topic, callback, qos, **kwargs)``, and ``on_matched(n)``
    at each change in the number of publishers the subscription has matched: from its matched events
    where rclpy has them, else from the graph every ``MATCH_POLL_S`` (a timer of the node's)."""
    if HAS_MATCHED_EVENTS:
        return node.create_subscription(msg_type, topic, callback, qos, event_callbacks=SubscriptionEventCallbacks(
            matched=lambda info: on_matched(info.current_count)), **kwargs)
    sub = node.create_subscription(msg_type, topic, callback, qos, **kwargs)
    seen = [0]  # as matched events: the first report is the first publisher

    def look() -> None:
        count = publisher_count(node, sub)
        if count != seen[0]:
            seen[0] = count
            on_matched(count)

    node.create_timer(MATCH_POLL_S, look, clock=Clock(clock_type=ClockType.STEADY_TIME))
    return sub


def publish_matched(node: Node, msg_type, topic: str, qos, on_matched: Callable[[int], None], **kwargs: Any):
    """``node.create_publisher(msg_type, topic, qos, **kwargs)``, and ``on_matched(n)`` at each change in
    the number of subscriptions the publisher has matched: from its matched events where rclpy has
    them, else from ``get_subscription_count`` every ``MATCH_POLL_S`` (a timer of the node's)."""
    if HAS_MATCHED_EVENTS:
        return node.create_publisher(msg_type, topic, qos, event_callbacks=PublisherEventCallbacks(
            matched=lambda info: on_matched(info.current_count)), **kwargs)
    pub = node.create_publisher(msg_type, topic, qos, **kwargs)
    seen = [0]

    def look() -> None:
        count = pub.get_subscription_count()
        if count != seen[0]:
            seen[0] = count
            on_matched(count)

    node.create_timer(MATCH_POLL_S, look, clock=Clock(clock_type=ClockType.STEADY_TIME))
    return pub


def _same(a, b) -> bool:
    """Parameter values equal (arrays as lists, NaN equal to NaN)."""
    if isinstance(a, (list, tuple, array.array)) and isinstance(b, (list, tuple, array.array)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def add_post_set_parameters_callback(node: Node, callback: Callable[[list], None]) -> None:
    """``callback(parameters)`` after a set-parameters request has been accepted by every on-set
    callback and the parameters hold their new values (Humble: deferred to the node's executor)."""
    if HAS_POST_SET_PARAMETERS:
        node.add_post_set_parameters_callback(callback)
        return
    lock = threading.Lock()
    pending: list[tuple[list, list]] = []  # (requested parameters, the values they had before)

    def note(params) -> SetParametersResult:
        with lock:
            pending.append((list(params), [node.get_parameter(p.name).value if node.has_parameter(p.name)
                                           else None for p in params]))
        timer.reset()
        return SetParametersResult(successful=True)

    def run() -> None:
        timer.cancel()
        with lock:
            batches = pending[:]
            pending.clear()
        for params, before in batches:
            now = [node.get_parameter(p.name).value if node.has_parameter(p.name) else None for p in params]
            applied = all(_same(value, p.value) for value, p in zip(now, params))
            if applied and not all(_same(old, value) for old, value in zip(before, now)):
                callback(params)

    timer = node.create_timer(0.0, run, clock=Clock(clock_type=ClockType.STEADY_TIME))
    timer.cancel()
    node.add_on_set_parameters_callback(note)
