"""sim_node: the simulated room, in place of the robot and its camera.

Subscribes  cmd_vel (geometry_msgs/Twist)
Publishes   camera/image_raw (sensor_msgs/Image rgb8, first person), sim/pose (geometry_msgs/PoseStamped),
            sim/goal_reached (std_msgs/Bool, latched: true once the robot reaches the target)
It consumes /cmd_vel and produces the camera exactly as the real robot does, so the same stack runs
on it; record an episode with ``edge-spec-ros record``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import rclpy
from geometry_msgs.msg import PoseStamped, Twist
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, qos_profile_sensor_data
from sensor_msgs.msg import Image
from std_msgs.msg import Bool

from edge_spec_ros.nodes.convert import rgb_to_image
from edge_spec_ros.nodes.params import declare_config, doc
from edge_spec_ros.sim.world import World

LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)


@dataclass(frozen=True)
class SimConfig:
    seed: int = field(default=0, metadata=doc("room layout seed"))
    target: str = field(default="silver bottle", metadata=doc("'<colour> <kind>' of the object to find"))
    distractors: int = field(default=2, metadata=doc("look-alike objects besides the target"))
    camera_rate_hz: float = field(default=5.0, metadata=doc("camera frames per second"))
    physics_rate_hz: float = field(default=50.0, metadata=doc("integration rate of cmd_vel"))
    cmd_timeout_s: float = field(default=0.5, metadata=doc("stop when no cmd_vel arrived for this long"))
    frame_id: str = field(default="camera", metadata=doc("header.frame_id of the images"))

    def __post_init__(self) -> None:
        if min(self.camera_rate_hz, self.physics_rate_hz, self.cmd_timeout_s) <= 0 or self.distractors < 0:
            raise ValueError(f"rates and cmd_timeout_s must be > 0 and distractors >= 0, got {self}")


PARAMETER_CONFIGS = (SimConfig,)


class SimNode(Node):
    def __init__(self) -> None:
        super().__init__("sim")
        self.config = c = declare_config(self, SimConfig)
        self.world = World.random(c.seed, c.target, c.distractors)
        self.world.target(c.target)  # fails early on an unknown target
        self.cmd = (0.0, 0.0)
        self.last_cmd = -math.inf
        self.reached = False
        self.camera = self.create_publisher(Image, "camera/image_raw", qos_profile_sensor_data)
        self.pose_pub = self.create_publisher(PoseStamped, "sim/pose", 10)
        self.goal = self.create_publisher(Bool, "sim/goal_reached", LATCHED)
        self.create_subscription(Twist, "cmd_vel", self.on_cmd, 10)
        self.create_timer(1.0 / c.physics_rate_hz, self.physics)
        self.create_timer(1.0 / c.camera_rate_hz, self.render)
        self.goal.publish(Bool(data=False))
        self.get_logger().info(f"room with {[o.name for o in self.world.objects]}; target {c.target}")

    def on_cmd(self, msg: Twist) -> None:
        self.cmd = (msg.linear.x, msg.angular.z)
        self.last_cmd = time.monotonic()

    def physics(self) -> None:
        if time.monotonic() - self.last_cmd > self.config.cmd_timeout_s:
            self.cmd = (0.0, 0.0)
        self.world.step(*self.cmd, 1.0 / self.config.physics_rate_hz)
        pose = PoseStamped()
        pose.header.stamp = self.get_clock().now().to_msg()
        pose.header.frame_id = "room"
        pose.pose.position.x, pose.pose.position.y = self.world.pose.x, self.world.pose.y
        pose.pose.orientation.z = math.sin(self.world.pose.theta / 2)
        pose.pose.orientation.w = math.cos(self.world.pose.theta / 2)
        self.pose_pub.publish(pose)
        if not self.reached and self.world.reached(self.config.target):
            self.reached = True
            self.goal.publish(Bool(data=True))
            self.get_logger().info(f"reached the {self.config.target}")

    def render(self) -> None:
        self.camera.publish(rgb_to_image(self.world.render(), self.get_clock().now().to_msg(), self.config.frame_id))


def main(args: list[str] | None = None) -> None:
    rclpy.init(args=args)
    node = None
    try:
        node = SimNode()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
