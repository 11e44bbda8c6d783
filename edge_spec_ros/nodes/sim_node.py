"""sim_node: the simulated room, in place of the robot and its camera; it owns simulated time.

Subscribes  cmd_vel (geometry_msgs/Twist, or TwistStamped with ``cmd_vel_type``: the action node's type; the
            launch file and bringup give it the action node's)
Publishes   /clock (rosgraph_msgs/Clock), camera/image_raw (sensor_msgs/Image rgb8, first person),
            odom (nav_msgs/Odometry: pose in the odom frame, the start pose as origin, and the achieved
            velocity), sim/pose (geometry_msgs/PoseStamped, room frame), sim/goal_reached (std_msgs/Bool,
            latched: whether the robot is at the target now, within the success distance and facing it)

Every physics tick advances simulated time by 1/physics_rate_hz and integrates the command in effect
over exactly that step (``sim/simulation.py``); ``real_time_factor`` sets how fast ticks come in wall
time. With ``lockstep`` (as PX4's simulators run with Gazebo), while the robot moves a tick waits until
a cmd_vel has answered the last odometry, so the closed loop through the action node integrates
exactly the commands the in-process evaluation does, however late the controller answers
(``lockstep_timeout_s`` bounds the wait: a dead controller cannot freeze time for long). Run every other node with ``use_sim_time:=true``: their timers and stamps then follow /clock,
so an action held for 3.3 s is held for 3.3 s of simulated time however loaded the computer is.
Camera frames are rendered every 1/camera_rate_hz of simulated time. The node's own tick timer runs on
the steady clock (it is the clock source), whatever its use_sim_time says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, qos_profile_sensor_data
from rclpy.time import Time
from rosgraph_msgs.msg import Clock as ClockMsg
from sensor_msgs.msg import Image
from std_msgs.msg import Bool

from edge_spec_ros.nodes.convert import rgb_to_image
from edge_spec_ros.nodes.lifecycle import main_for
from edge_spec_ros.nodes.params import declare_config, doc
from edge_spec_ros.nodes.velocity import CMD_VEL_TYPES, check_cmd_vel_type, velocity_values
from edge_spec_ros.sim.simulation import Simulation
from edge_spec_ros.sim.tasks import Task, episode_world
from edge_spec_ros.sim.world import Pose, World

LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
CLOCK_QOS = QoSProfile(depth=1)  # /clock: the latest time is all that matters


@dataclass(frozen=True)
class SimConfig:
    seed: int = field(default=0, metadata=doc("room seed: the room is episode_world(seed, target, distractors), "
                                              "the distribution sim-eval evaluates", 0, 16777215))
    target: str = field(default="silver bottle", metadata=doc("'<colour> <kind>' of the object to find "
                                                              "('': drawn from the seed)"))
    distractors: int = field(default=2, metadata=doc("look-alike objects besides the target (0: drawn, 1-3)", 0, 3))
    camera_rate_hz: float = field(default=5.0, metadata=doc("camera frames per second of simulated time", 0.1, 100.0))
    physics_rate_hz: float = field(default=50.0, metadata=doc("physics ticks per second of simulated time", 1.0, 1000.0))
    real_time_factor: float = field(default=1.0, metadata=doc("simulated seconds per wall second", 0.01, 100.0))
    cmd_timeout_s: float = field(default=0.5, metadata=doc("stop when no cmd_vel arrived for this long "
                                                           "(simulated time)", 0.01, 60.0))
    frame_id: str = field(default="camera", metadata=doc("header.frame_id of the images"))
    start_x: float = field(default=math.nan, metadata=doc("start pose override (room frame, m); NaN: the room's"))
    start_y: float = field(default=math.nan, metadata=doc("start pose override (m); NaN: the room's"))
    start_theta: float = field(default=math.nan, metadata=doc("start heading override (rad); NaN: the room's"))
    lockstep: bool = field(default=False, metadata=doc("while the robot moves, advance a tick only once a cmd_vel "
                                                       "answered the last odometry (deterministic closed loop)"))
    lockstep_timeout_s: float = field(default=1.0, metadata=doc("lockstep: advance anyway after this long "
                                                                "(wall clock) without a command", 0.01, 60.0))
    cmd_vel_type: str = field(default="Twist", metadata=doc("message type of cmd_vel: Twist or TwistStamped (the "
                                                            "action node's cmd_vel_type)"))

    def __post_init__(self) -> None:
        check_cmd_vel_type(self.cmd_vel_type)
        if min(self.camera_rate_hz, self.physics_rate_hz, self.cmd_timeout_s, self.real_time_factor,
               self.lockstep_timeout_s) <= 0 \
                or self.distractors < 0:
            raise ValueError(f"rates, real_time_factor and cmd_timeout_s must be > 0 and distractors >= 0, "
                             f"got {self}")
        if self.camera_rate_hz > self.physics_rate_hz:
            raise ValueError(f"camera_rate_hz ({self.camera_rate_hz}) must be <= physics_rate_hz "
                             f"({self.physics_rate_hz}): frames are rendered on physics ticks")


PARAMETER_CONFIGS = (SimConfig,)


def sim_world(config: SimConfig) -> tuple[World, str]:
    """The room of ``config`` and its target, with the start pose overridden where the config says so."""
    world, target = episode_world(config.seed, Task(config.target, config.distractors))
    p = world.pose
    world.pose = Pose(*(p if math.isnan(v) else v for p, v in
                        ((p.x, config.start_x), (p.y, config.start_y), (p.theta, config.start_theta))))
    return world, target


class SimNode(Node):
    def __init__(self) -> None:
        super().__init__("sim")
        self.config = c = declare_config(self, SimConfig)
        self.world, self.target = sim_world(c)
        self.sim = Simulation(self.world, 1.0 / c.physics_rate_hz, c.cmd_timeout_s)
        self.frame_every = max(1, round(c.physics_rate_hz / c.camera_rate_hz))
        self.reached = self.world.reached(self.target)
        self.clock = self.create_publisher(ClockMsg, "/clock", CLOCK_QOS)
        self.camera = self.create_publisher(Image, "camera/image_raw", qos_profile_sensor_data)
        self.odom = self.create_publisher(Odometry, "odom", 10)
        self.pose_pub = self.create_publisher(PoseStamped, "sim/pose", 10)
        self.goal = self.create_publisher(Bool, "sim/goal_reached", LATCHED)
        self.create_subscription(CMD_VEL_TYPES[c.cmd_vel_type], "cmd_vel", self.on_cmd, 10)
        self.steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._commanded = False  # a cmd_vel arrived since the last tick
        self._last_tick_ns = self.steady.now().nanoseconds
        self.create_timer(1.0 / (c.physics_rate_hz * c.real_time_factor), self.tick, clock=self.steady)
        self.goal.publish(Bool(data=self.reached))
        self._publish_state()
        self.get_logger().info(f"room {c.seed} with {[o.name for o in self.world.objects]}; target {self.target}; "
                               f"simulated time at {c.physics_rate_hz:g} Hz × {c.real_time_factor:g}")

    def on_cmd(self, msg) -> None:
        self.sim.command(*velocity_values(msg))
        self._commanded = True

    def tick(self) -> None:
        now_ns = self.steady.now().nanoseconds
        if self.config.lockstep and self.sim.cmd != (0.0, 0.0) and not self._commanded \
                and now_ns - self._last_tick_ns < self.config.lockstep_timeout_s * 1e9:
            return  # lockstep: the controller has not answered the last odometry yet
        self._commanded = False
        self._last_tick_ns = now_ns
        self.sim.tick()
        self._publish_state()
        reached = self.world.reached(self.target)
        if reached != self.reached:
            self.reached = reached
            self.goal.publish(Bool(data=reached))
            self.get_logger().info(f"{'at' if reached else 'left'} the {self.target}")

    def _publish_state(self) -> None:
        stamp = Time(nanoseconds=self.sim.time_ns).to_msg()
        self.clock.publish(ClockMsg(clock=stamp))
        o = self.sim.odometry
        odom = Odometry()
        odom.header.stamp, odom.header.frame_id, odom.child_frame_id = stamp, "odom", "base_link"
        _set_pose(odom.pose.pose, o.pose)
        odom.twist.twist.linear.x, odom.twist.twist.angular.z = o.linear_x, o.angular_z
        self.odom.publish(odom)
        pose = PoseStamped()
        pose.header.stamp, pose.header.frame_id = stamp, "room"
        _set_pose(pose.pose, self.world.pose)
        self.pose_pub.publish(pose)
        if self.sim.ticks % self.frame_every == 0:
            self.camera.publish(rgb_to_image(self.world.render(), stamp, self.config.frame_id))


def _set_pose(msg, pose: Pose) -> None:
    """geometry_msgs/Pose from a planar pose (yaw as a quaternion about z)."""
    msg.position.x, msg.position.y = pose.x, pose.y
    msg.orientation.z, msg.orientation.w = math.sin(pose.theta / 2), math.cos(pose.theta / 2)


def main(args: list[str] | None = None) -> int:
    return main_for(SimNode, args=args)


if __name__ == "__main__":
    raise SystemExit(main())
