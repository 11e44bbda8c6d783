"""memory_node: writes the robot's private memory (DRAGON's D^device, rag/stores.RobotMemory) as it runs.

Subscribes  edge_spec/decision (Decision: each decision's decoded text, recorded as an observation),
            instruction (std_msgs/String: each instruction; stop words are not recorded),
            memory/note (std_msgs/String: a note a user adds), and ``odom_topic``
            (nav_msgs/Odometry: the pose x, y, θ recorded with every entry; empty: pose 0, 0, 0)

Every entry is appended to ``<memory_dir>/memory.jsonl`` at once (flushed; fsync with ``fsync``)
with the node's clock (simulation time under ``use_sim_time``) and the latest pose, and is there for
the next decision and after a restart. The memory never leaves the robot: DRAGON's robot side
(edge/dragon.RobotDragon) reads it, and only tokens and distributions cross the link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nav_msgs.msg import Odometry
from rclpy.node import Node
from std_msgs.msg import String

from edge_spec_ros.edge.cycle import is_stop
from edge_spec_ros.msg import Decision
from edge_spec_ros.nodes.lifecycle import main_for
from edge_spec_ros.nodes.params import declare_config, doc
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.rag.stores import MemoryKind, RobotMemory


@dataclass(frozen=True)
class MemoryNodeConfig:
    memory_dir: str = field(default="memory", metadata=doc("directory of the robot's memory (memory.jsonl), "
                                                           "kept across restarts"))
    odom_topic: str = field(default="odom", metadata=doc("nav_msgs/Odometry topic: the pose of each entry; "
                                                         "empty: pose 0, 0, 0"))
    record_decisions: bool = field(default=True, metadata=doc("record each decision's text as an observation"))
    record_instructions: bool = field(default=True, metadata=doc("record each instruction (stop words excepted)"))
    fsync: bool = field(default=False, metadata=doc("fsync after every entry (survives power loss, slower)"))

    def __post_init__(self) -> None:
        if not self.memory_dir.strip():
            raise ValueError("memory_dir must not be empty")


PARAMETER_CONFIGS = (MemoryNodeConfig,)


def yaw(qx: float, qy: float, qz: float, qw: float) -> float:
    """θ of a planar pose from its quaternion (rad)."""
    return math.atan2(2.0 * (qw * qz + qx * qy), 1.0 - 2.0 * (qy * qy + qz * qz))


class MemoryNode(Node):
    def __init__(self) -> None:
        super().__init__("memory")
        self.config = c = declare_config(self, MemoryNodeConfig)
        self.memory = RobotMemory(c.memory_dir, fsync=c.fsync)
        self.pose = (0.0, 0.0, 0.0)
        if c.record_decisions:
            self.create_subscription(Decision, "edge_spec/decision", self.on_decision, RELIABLE)
        if c.record_instructions:
            self.create_subscription(String, "instruction", self.on_instruction, RELIABLE)
        self.create_subscription(String, "memory/note", self.on_note, RELIABLE)
        if c.odom_topic:
            self.create_subscription(Odometry, c.odom_topic, self.on_odom, 10)
        self.get_logger().info(f"memory in {self.memory.path} ({len(self.memory)} entries"
                               f"{f', {self.memory.skipped_lines} unreadable lines skipped' if self.memory.skipped_lines else ''})")

    def on_odom(self, msg: Odometry) -> None:
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        pose = (p.x, p.y, yaw(q.x, q.y, q.z, q.w))
        if all(math.isfinite(v) for v in pose):
            self.pose = pose

    def _add(self, kind: MemoryKind, text: str) -> None:
        text = text.strip()
        if not text:
            return
        now = self.get_clock().now().nanoseconds * 1e-9
        try:
            self.memory.add(kind, text, self.pose, time=now)
        except (OSError, ValueError) as exc:  # a full disk must not stop the robot: log and go on
            self.get_logger().error(f"memory entry not written: {exc!r}")

    def on_decision(self, msg: Decision) -> None:
        self._add("observation", msg.text)

    def on_instruction(self, msg: String) -> None:
        if not is_stop(msg.data):
            self._add("instruction", msg.data)

    def on_note(self, msg: String) -> None:
        self._add("note", msg.data)


def main(args: list[str] | None = None) -> int:
    return main_for(MemoryNode, args=args)


if __name__ == "__main__":
    raise SystemExit(main())
