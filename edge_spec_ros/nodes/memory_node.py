"""memory_node: writes the robot's private memory (DRAGON's D^device, dragon/stores.RobotMemory) as it runs.

Subscribes  edge_spec/decision (Decision: each decision's decoded text, recorded as an observation),
            instruction (std_msgs/String: each instruction; stop words and, unless record_questions,
            questions ending with '?' are not recorded),
            memory/note (std_msgs/String: a note a user adds), and ``odom_topic``
            (nav_msgs/Odometry: the pose x, y, θ recorded with every entry; empty: pose 0, 0, 0)
Serves      memory/add_note (AddNote: a note, answered once it is written, with the count of entries)
Publishes   /diagnostics: ``memory: recording`` (hardware id: the memory directory): OK with the count
            of entries, ERROR with the reason when nothing is recorded (or the last entry failed)

Every entry is appended to ``<memory_dir>/memory.jsonl`` at once (flushed; fsync with ``fsync``)
with the node's clock (simulation time under ``use_sim_time``) and the latest pose, and is there for
the next decision and after a restart. One node writes to a directory (an exclusive lock on
``<memory_dir>/memory.lock``: entry ids are counted by the writer); a second one, or a memory that
cannot be read, is logged as an error and records nothing, and the robot goes on. The memory never leaves the robot: DRAGON's robot side
(dragon/robot.RobotDragon) reads it, and only tokens and distributions cross the link.
"""

from __future__ import annotations

import fcntl
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from nav_msgs.msg import Odometry
from rclpy.node import Node
from std_msgs.msg import String

from edge_spec_ros.dragon.stores import MemoryKind, RobotMemory
from edge_spec_ros.edge.cycle import is_stop
from edge_spec_ros.msg import Decision
from edge_spec_ros.srv import AddNote as AddNoteSrv
from edge_spec_ros.nodes.diagnostics import ERROR, OK, Diagnostics, Report
from edge_spec_ros.nodes.lifecycle import main_for
from edge_spec_ros.nodes.params import declare_config, doc
from edge_spec_ros.nodes.ros_link import RELIABLE


LOCK_FILE = "memory.lock"  # held (flock) by the one memory node writing to a directory
DEFAULT_MEMORY_DIR = "~/.ros/edge_spec_ros/memory"  # beside ROS's own logs, not in the working directory


@dataclass(frozen=True)
class MemoryNodeConfig:
    memory_dir: str = field(default=DEFAULT_MEMORY_DIR, metadata=doc("directory of the robot's memory "
                                                                      "(memory.jsonl; ~ expanded), kept across restarts"))
    odom_topic: str = field(default="odom", metadata=doc("nav_msgs/Odometry topic: the pose of each entry; "
                                                         "empty: pose 0, 0, 0"))
    record_decisions: bool = field(default=True, metadata=doc("record each decision's text as an observation"))
    record_instructions: bool = field(default=True, metadata=doc("record each instruction (stop words excepted)"))
    record_questions: bool = field(default=False, metadata=doc("also record instructions ending with '?' (the "
                                                               "questions mode dragon answers; they are not "
                                                               "what the robot saw or was told)"))
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
        self.memory: RobotMemory | None = None
        self.unavailable = ""  # why nothing is recorded ("" : recording)
        self._lock_file = None
        self.last_error = ""  # why the last entry was not written ("" : it was)
        directory = Path(os.path.expanduser(c.memory_dir))
        self.diagnostics = Diagnostics(self, hardware_id=str(directory))
        self.diagnostics.add("recording", self.report)
        try:  # one writer per memory: entry ids are counted by the writer
            directory.mkdir(parents=True, exist_ok=True)
            self._lock_file = open(directory / LOCK_FILE, "a")
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.memory = RobotMemory(directory, fsync=c.fsync)
        except BlockingIOError:
            self.unavailable = f"another memory node writes to {directory}: this one records nothing"
        except (OSError, ValueError) as exc:  # an unreadable directory or file must not stop the robot
            self.unavailable = f"the memory in {directory} cannot be used ({exc}): nothing is recorded"
        if self.unavailable:
            self.get_logger().error(self.unavailable)
            self.close()
        self.pose = (0.0, 0.0, 0.0)
        if c.record_decisions:
            self.create_subscription(Decision, "edge_spec/decision", self.on_decision, RELIABLE)
        if c.record_instructions:
            self.create_subscription(String, "instruction", self.on_instruction, RELIABLE)
        self.create_subscription(String, "memory/note", self.on_note, RELIABLE)
        self.create_service(AddNoteSrv, "memory/add_note", self.on_add_note)
        if c.odom_topic:
            self.create_subscription(Odometry, c.odom_topic, self.on_odom, 10)
        if self.memory is not None:
            skipped = self.memory.skipped_lines
            self.get_logger().info(f"memory in {self.memory.path} ({len(self.memory)} entries"
                                   f"{f', {skipped} unreadable lines skipped' if skipped else ''})")
            for r in self.memory.renumbered:  # a hand-edited file: both entries kept (dragon/stores.RobotMemory)
                self.get_logger().warning(f"{self.memory.path} line {r.line}: entry id {r.entry_id} repeats line "
                                          f"{r.first_line}'s; kept as entry {r.new_id}")

    def close(self) -> None:
        """Release the memory directory's writer lock (another memory node may then write to it)."""
        if self._lock_file is not None:
            self._lock_file.close()  # closing the file releases its flock
            self._lock_file = None

    def on_odom(self, msg: Odometry) -> None:
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        pose = (p.x, p.y, yaw(q.x, q.y, q.z, q.w))
        if all(math.isfinite(v) for v in pose):
            self.pose = pose

    def _add(self, kind: MemoryKind, text: str) -> str:
        """Append one entry; '' when written (or nothing to write), else why not."""
        text = text.strip()
        if not text:
            return "empty text: nothing recorded"
        if self.memory is None:
            return self.unavailable
        now = self.get_clock().now().nanoseconds * 1e-9
        try:
            self.memory.add(kind, text, self.pose, time=now)
        except (OSError, ValueError) as exc:  # a full disk must not stop the robot: log and go on
            self.get_logger().error(f"memory entry not written: {exc!r}")
            self.last_error = f"memory entry not written: {exc}"
            return self.last_error
        self.last_error = ""
        return ""

    def report(self) -> Report:
        if self.memory is None:
            return Report(ERROR, self.unavailable)
        values = {"entries": len(self.memory), "file": self.memory.path, "skipped_lines": self.memory.skipped_lines}
        if self.last_error:
            return Report(ERROR, self.last_error, values)
        return Report(OK, f"recording ({len(self.memory)} entries)", values)

    def on_decision(self, msg: Decision) -> None:
        self._add("observation", msg.text)

    def on_instruction(self, msg: String) -> None:
        if is_stop(msg.data) or (msg.data.strip().endswith("?") and not self.config.record_questions):
            return
        self._add("instruction", msg.data)

    def on_note(self, msg: String) -> None:
        self._add("note", msg.data)

    def on_add_note(self, request: AddNoteSrv.Request, response: AddNoteSrv.Response) -> AddNoteSrv.Response:
        why = self._add("note", request.text)
        entries = len(self.memory) if self.memory is not None else 0
        response.success, response.message, response.entries = not why, why, entries
        return response


def main(args: list[str] | None = None) -> int:
    return main_for(MemoryNode, args=args)


if __name__ == "__main__":
    raise SystemExit(main())
