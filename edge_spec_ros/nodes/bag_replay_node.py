"""bag_replay_node: publishes a rosbag2 into the graph, with its original timing or as fast as possible.

Publishes   every recorded topic (or those in ``topics``) with its recorded type, bytes unchanged,
            under its own name or the one ``remap`` gives it; /clock (rosgraph_msgs/Clock) from bag
            time when ``clock_hz`` > 0, so nodes running with ``use_sim_time`` follow the bag's time

Reads sqlite3 and mcap bags, rosbag2 versions 8 (Humble/Iron) and 9 (Jazzy and later). A topic whose
message type this installation does not have (a vendor type, a package not installed) is skipped
with one warning per type; the others play. ``remap`` entries are ``FROM:=TO`` with the topic names
as recorded (e.g. ``/camera/color/image_raw/compressed:=/camera/image_raw/compressed``); ``topics``
filters by recorded name.
"""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass, field

import rclpy
from builtin_interfaces.msg import Time
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock

from edge_spec_ros.bags import bag_info, read_bag
from edge_spec_ros.nodes.lifecycle import close_all, init, spin_until
from edge_spec_ros.nodes.params import declare_config, doc

DISCOVERY_GRACE_S = 0.5  # after the subscribers appear, before the first message
CLOCK_QOS = QoSProfile(depth=1)  # /clock: the latest time is all that matters (reliable: reaches every subscriber)


@dataclass(frozen=True)
class BagReplayConfig:
    bag: str = field(default="", metadata=doc("path of the rosbag2 directory (sqlite3 or mcap, version 8 or 9)"))
    rate: float = field(default=1.0, metadata=doc("playback speed factor; 0: as fast as possible", 0.0, 1000.0))
    loop: bool = field(default=False, metadata=doc("start again at the end"))
    topics: tuple[str, ...] = field(default=("",), metadata=doc("recorded topics to replay; empty: all"))
    remap: tuple[str, ...] = field(default=("",), metadata=doc(
        "FROM:=TO: publish the recorded topic FROM as TO (e.g. /camera/color/image_raw:=/camera/image_raw)"))
    clock_hz: float = field(default=0.0, metadata=doc(
        "publish /clock from bag time at this rate (Hz) and with every message; 0: no /clock", 0.0, 1000.0))
    wait_for_subscribers_s: float = field(default=5.0, metadata=doc("wait up to this long for subscribers", 0.0, 3600.0))

    def __post_init__(self) -> None:
        if not self.bag:
            raise ValueError("parameter 'bag' (the bag to replay) is required")
        if self.rate < 0:
            raise ValueError(f"rate must be >= 0, got {self.rate}")
        if self.clock_hz < 0:
            raise ValueError(f"clock_hz must be >= 0, got {self.clock_hz}")
        remap_rules(self.remap)  # raises for a malformed rule

    @property
    def topic_filter(self) -> tuple[str, ...]:
        return tuple(t for t in self.topics if t)


PARAMETER_CONFIGS = (BagReplayConfig,)


def remap_rules(rules: tuple[str, ...]) -> dict[str, str]:
    """``("FROM:=TO", ...)`` → {FROM: TO}; empty entries are ignored."""
    out = {}
    for rule in rules:
        if not rule:
            continue
        source, sep, target = rule.partition(":=")
        if not sep or not source or not target:
            raise ValueError(f"remap rule {rule!r} is not FROM:=TO")
        out[source] = target
    return out


def message_class(msgtype: str):
    """'sensor_msgs/msg/Image' → the rclpy message class; ``ValueError`` when this installation has none."""
    parts = msgtype.split("/")
    if len(parts) != 3 or parts[1] != "msg":
        raise ValueError(f"{msgtype!r} is not a ROS 2 message type name (package/msg/Name)")
    package, _, name = parts
    try:
        cls = getattr(importlib.import_module(f"{package}.msg"), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"no message type {msgtype} in this installation ({exc})") from None
    if not hasattr(cls, "_TYPE_SUPPORT"):
        raise ValueError(f"{msgtype} is not a generated message class")
    return cls


def time_msg(ns: int) -> Time:
    return Time(sec=ns // 10**9, nanosec=ns % 10**9)


class BagReplayNode(Node):
    def __init__(self) -> None:
        super().__init__("bag_replay")
        self.config = c = declare_config(self, BagReplayConfig)
        self.info = bag_info(c.bag)
        self.remap = remap_rules(c.remap)
        self.publishers_: dict[str, object] = {}  # recorded topic → publisher
        self.skipped: dict[str, list[str]] = {}  # message type this installation lacks → its topics
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        wanted = set(c.topic_filter)
        for topic in self.info.topics:
            if wanted and topic.name not in wanted:
                continue
            if c.clock_hz > 0 and topic.name == "/clock":
                self.get_logger().warning("the bag's own /clock is not replayed: /clock comes from bag time (clock_hz)")
                continue
            try:
                cls = message_class(topic.msgtype)
            except ValueError as exc:
                if topic.msgtype not in self.skipped:
                    self.get_logger().warning(f"skipping {topic.msgtype} ({topic.name}): {exc}")
                self.skipped.setdefault(topic.msgtype, []).append(topic.name)
                continue
            self.publishers_[topic.name] = self.create_publisher(cls, self.remap.get(topic.name, topic.name), qos)
        missing = wanted - {t.name for t in self.info.topics}
        if missing:
            self.get_logger().warning(f"not in the bag: {', '.join(sorted(missing))}")
        unused = set(self.remap) - {t.name for t in self.info.topics}
        if unused:
            self.get_logger().warning(f"remap rules for topics not in the bag: {', '.join(sorted(unused))}")
        self.clock = self.create_publisher(Clock, "/clock", CLOCK_QOS) if c.clock_hz > 0 else None
        self._last_clock = -1
        self.played = 0  # messages published
        self.get_logger().info(
            f"replaying {c.bag} ({self.info.storage}, version {self.info.version}): "
            + ", ".join(f"{t} → {p.topic_name}" if p.topic_name != t else t for t, p in self.publishers_.items())
            + (f"; /clock at {c.clock_hz:g} Hz" if self.clock else ""))
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name="bag-replay", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the replay thread and wait for it (before the context goes down)."""
        self._stop.set()
        self._thread.join(timeout=2.0)

    def _running(self) -> bool:
        return rclpy.ok() and not self._stop.is_set()

    def _publish_clock(self, bag_ns: int) -> None:
        if self.clock is not None and bag_ns > self._last_clock:
            self._last_clock = bag_ns
            self.clock.publish(Clock(clock=time_msg(bag_ns)))

    def _sleep_until(self, due: float, start_wall: float, start_bag: int) -> None:
        """Sleep until ``due`` (monotonic), publishing /clock at ``clock_hz`` meanwhile."""
        rate = self.config.rate
        period = 1.0 / self.config.clock_hz if self.clock is not None else 0.1
        while self._running():
            now = time.monotonic()
            if now >= due:
                return
            self._stop.wait(min(due - now, period))
            if self.clock is None:
                continue
            self._publish_clock(start_bag + int((min(time.monotonic(), due) - start_wall) * rate * 1e9))

    def _play(self) -> None:
        c = self.config
        try:
            deadline = time.monotonic() + c.wait_for_subscribers_s
            while time.monotonic() < deadline and self._running() and any(
                    p.get_subscription_count() == 0 for p in self.publishers_.values()):
                time.sleep(0.05)
            if c.wait_for_subscribers_s > 0:
                # a publisher sees its subscriber before the subscriber has matched the publisher;
                # samples sent in between are lost (best effort) — give discovery a moment to finish
                self._stop.wait(DISCOVERY_GRACE_S)
            topics = tuple(self.publishers_)
            while self._running() and topics:
                count = 0
                start_wall, start_bag = time.monotonic(), None
                self._last_clock = -1  # a loop starts the bag's time again
                for msg in read_bag(c.bag, topics):
                    if start_bag is None:
                        start_wall, start_bag = time.monotonic(), msg.timestamp_ns
                    if c.rate > 0:
                        self._sleep_until(start_wall + (msg.timestamp_ns - start_bag) / 1e9 / c.rate,
                                          start_wall, start_bag)
                    if not self._running():
                        return
                    self._publish_clock(msg.timestamp_ns)
                    self.publishers_[msg.topic].publish(msg.data)
                    count += 1
                    self.played += 1
                self.get_logger().info(f"replayed {count} messages from {c.bag}")
                if not c.loop:
                    break
            if not topics:
                self.get_logger().warning(f"nothing to replay from {c.bag}")
        except Exception as exc:  # a corrupt bag: say so and end the replay, not the process silently
            if self._running():
                self.get_logger().error(f"replay of {c.bag} failed: {exc}")
        finally:
            self.done.set()


def main(args: list[str] | None = None) -> int:
    """Replay until the bag ends (or, with ``loop``, until SIGINT/SIGTERM); status 1 when the bag cannot
    be replayed (missing, unreadable, invalid parameters), with one error line."""
    try:
        stop = init(args)
    except RuntimeError as exc:  # a malformed --ros-args rule (e.g. a remap entry not quoted)
        raise SystemExit(f"bag_replay: {exc}") from None
    node = None
    executor = None
    status = 0
    try:
        node = BagReplayNode()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        spin_until(executor, lambda: stop.event.is_set() or node.done.is_set())
    except (ValueError, OSError) as exc:
        rclpy.logging.get_logger("bag_replay").fatal(str(exc))
        status = 1
    finally:
        close_all([node] if node is not None else [], executor)
        stop.restore()
    if status:
        raise SystemExit(status)  # also for launchers that ignore main()'s return value
    return status


if __name__ == "__main__":
    raise SystemExit(main())
