"""Record topics of the live graph into a rosbag2 (``edge-spec-ros record``), bytes as delivered."""

from __future__ import annotations

import time

import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from edge_spec_ros.bags import BagWriter
from edge_spec_ros.nodes.bag_replay_node import message_class
from edge_spec_ros.nodes.compat import subscribe_matched
from edge_spec_ros.nodes.lifecycle import init
from edge_spec_ros.nodes.matched import matched_line

DEFAULT_TOPICS = {
    "/camera/image_raw": "sensor_msgs/msg/Image",
    "/instruction": "std_msgs/msg/String",
    "/cmd_vel": "geometry_msgs/msg/Twist",
    "/edge_spec/decision": "edge_spec_ros/msg/Decision",
    "/edge_spec/action": "edge_spec_ros/msg/NavAction",
    "/edge_spec/reasoning": "std_msgs/msg/String",
    "/edge_spec/stats": "edge_spec_ros/msg/DecodeStats",
}


class BagRecorder(Node):
    def __init__(self, path: str, topics: dict[str, str], storage: str = "sqlite3") -> None:
        super().__init__("bag_recorder")
        self.bag = BagWriter(path, storage)
        self.count = 0
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.BEST_EFFORT)
        for topic, msgtype in topics.items():
            subscribe_matched(self, message_class(msgtype), topic,
                              lambda data, t=topic, m=msgtype: self._write(t, m, data), qos,
                              on_matched=lambda count, t=topic: self._matched(t, count), raw=True)

    def _matched(self, topic: str, count: int) -> None:
        """Log each change in a topic's publishers matched on the recorder's side: a message sent
        before its publisher is matched here is not in the bag (the graph showing both ends is not
        enough; on a loaded computer matching can take seconds)."""
        self.get_logger().info(matched_line(topic, count))

    def _write(self, topic: str, msgtype: str, data: bytes) -> None:
        self.bag.write(topic, msgtype, self.get_clock().now().nanoseconds, data)
        self.count += 1

    def destroy_node(self) -> None:
        self.bag.close()
        super().destroy_node()


def record(path: str, topics: dict[str, str], duration_s: float, storage: str = "sqlite3") -> int:
    """Record for ``duration_s`` (0: until Ctrl-C or SIGTERM); returns the number of messages written.
    A signal only sets the stop event (``nodes.lifecycle``): the loop then closes the bag itself."""
    stop = init()
    node = BagRecorder(path, topics, storage)
    end = time.monotonic() + duration_s if duration_s > 0 else float("inf")
    try:
        while not stop.event.is_set() and rclpy.ok() and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        stop.restore()
        count = node.count
        node.destroy_node()
        rclpy.try_shutdown()
    return count
