"""bag_replay_node: publishes a rosbag2 into the graph, with its original timing or as fast as possible.

Publishes   every recorded topic (or those in ``topics``) with its recorded type, bytes unchanged
"""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass, field

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from edge_spec_ros.bags import read_bag
from edge_spec_ros.nodes.params import declare_config, doc


@dataclass(frozen=True)
class BagReplayConfig:
    bag: str = field(default="", metadata=doc("path of the rosbag2 directory (sqlite3 or mcap)"))
    rate: float = field(default=1.0, metadata=doc("playback speed factor; 0: as fast as possible"))
    loop: bool = field(default=False, metadata=doc("start again at the end"))
    topics: tuple[str, ...] = field(default=("",), metadata=doc("topics to replay; empty: all"))
    wait_for_subscribers_s: float = field(default=5.0, metadata=doc("wait up to this long for subscribers"))

    def __post_init__(self) -> None:
        if not self.bag:
            raise ValueError("parameter 'bag' (the bag to replay) is required")
        if self.rate < 0:
            raise ValueError(f"rate must be >= 0, got {self.rate}")


PARAMETER_CONFIGS = (BagReplayConfig,)


def message_class(msgtype: str):
    """'sensor_msgs/msg/Image' → the rclpy message class."""
    package, _, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


class BagReplayNode(Node):
    def __init__(self) -> None:
        super().__init__("bag_replay")
        self.config = declare_config(self, BagReplayConfig)
        self.topics = tuple(t for t in self.config.topics if t)
        self.publishers_: dict[str, object] = {}
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        for msg in read_bag(self.config.bag, self.topics):
            if msg.topic not in self.publishers_:
                self.publishers_[msg.topic] = self.create_publisher(message_class(msg.msgtype), msg.topic, qos)
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._play, name="bag-replay", daemon=True)
        self._thread.start()

    def _play(self) -> None:
        c = self.config
        deadline = time.monotonic() + c.wait_for_subscribers_s
        while time.monotonic() < deadline and any(p.get_subscription_count() == 0 for p in self.publishers_.values()):
            time.sleep(0.05)
        while rclpy.ok():
            count = 0
            start_wall = time.monotonic()
            start_bag = None
            for msg in read_bag(c.bag, self.topics):
                if start_bag is None:
                    start_bag = msg.timestamp_ns
                if c.rate > 0:
                    due = start_wall + (msg.timestamp_ns - start_bag) / 1e9 / c.rate
                    time.sleep(max(0.0, due - time.monotonic()))
                if not rclpy.ok():
                    return
                self.publishers_[msg.topic].publish(msg.data)
                count += 1
            self.get_logger().info(f"replayed {count} messages from {c.bag}")
            if not c.loop:
                break
        self.done.set()


def main(args: list[str] | None = None) -> None:
    rclpy.init(args=args)
    node = None
    try:
        node = BagReplayNode()
        while rclpy.ok() and not node.done.is_set():
            rclpy.spin_once(node, timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
