"""The simulated room in simulated time: the simulation owns the clock.

Each ``tick`` advances simulated time by a fixed step ``dt`` and integrates the velocity command in
effect over exactly that step, so the distance a command covers depends only on how long it was in
effect in simulated time, never on how often the host managed to tick (a loaded computer slows
simulated time down; it does not shorten motions). A command older than ``cmd_timeout_s`` of
simulated time stops the robot, as a robot's own velocity watchdog would. Odometry is the robot's
pose in the ``odom`` frame (its start pose is the origin) and the velocity it achieved over the last
tick (zero while a wall or an object blocks it).

No ROS here: ``nodes/sim_node.py`` publishes ``/clock``, the camera, ``odom`` and the pose from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edge_spec_ros.nav.motion import MotionTracker
from edge_spec_ros.nav.planner import MotionPlan
from edge_spec_ros.sim.world import Pose, World

NS_PER_S = 1_000_000_000
PHYSICS_DT_S = 0.02  # sim_node's default physics step (physics_rate_hz 50)


@dataclass(frozen=True)
class Odometry:
    """Pose in the odom frame (x, y m; theta rad, REP 103) and the achieved body velocity over the
    last tick (linear_x m/s, angular_z rad/s), at simulated time ``time_ns``."""

    time_ns: int
    pose: Pose
    linear_x: float
    angular_z: float


def odom_pose(origin: Pose, pose: Pose) -> Pose:
    """``pose`` (room frame) expressed in the frame whose origin is ``origin``."""
    dx, dy = pose.x - origin.x, pose.y - origin.y
    c, s = math.cos(origin.theta), math.sin(origin.theta)
    theta = pose.theta - origin.theta
    return Pose(c * dx + s * dy, -s * dx + c * dy, math.atan2(math.sin(theta), math.cos(theta)))


class Simulation:
    """A ``World`` stepped in simulated time; ``command`` sets the velocity, ``tick`` advances."""

    def __init__(self, world: World, dt_s: float, cmd_timeout_s: float) -> None:
        if not (dt_s > 0 and cmd_timeout_s > 0):
            raise ValueError(f"dt_s and cmd_timeout_s must be > 0, got {dt_s!r}, {cmd_timeout_s!r}")
        self.world = world
        self.dt_ns = round(dt_s * NS_PER_S)
        self.timeout_ns = round(cmd_timeout_s * NS_PER_S)
        self.time_ns = 0
        self.ticks = 0
        self.origin = world.pose
        self.cmd = (0.0, 0.0)
        self._cmd_ns: int | None = None
        self.odometry = Odometry(0, Pose(0.0, 0.0, 0.0), 0.0, 0.0)

    @property
    def dt_s(self) -> float:
        return self.dt_ns / NS_PER_S

    def command(self, linear_x: float, angular_z: float) -> None:
        """The velocity held from now on (non-finite values stop the robot)."""
        finite = math.isfinite(linear_x) and math.isfinite(angular_z)
        self.cmd = (float(linear_x), float(angular_z)) if finite else (0.0, 0.0)
        self._cmd_ns = self.time_ns

    def tick(self) -> Odometry:
        """Advance simulated time by dt, integrating the command in effect over it."""
        if self._cmd_ns is None or self.time_ns - self._cmd_ns >= self.timeout_ns:
            self.cmd = (0.0, 0.0)
        before = self.world.pose
        self.world.step(*self.cmd, self.dt_s)
        after = self.world.pose
        self.time_ns += self.dt_ns
        self.ticks += 1
        turned = math.atan2(math.sin(after.theta - before.theta), math.cos(after.theta - before.theta))
        moved = math.hypot(after.x - before.x, after.y - before.y)
        forward = moved if (after.x - before.x) * math.cos(after.theta) + (after.y - before.y) * math.sin(
            after.theta) >= 0 else -moved
        self.odometry = Odometry(self.time_ns, odom_pose(self.origin, after), forward / self.dt_s,
                                 turned / self.dt_s)
        return self.odometry


def execute(sim: Simulation, plan: MotionPlan) -> str:
    """Carry out ``plan`` as the action node does on odometry (``nav/motion.MotionTracker``): one
    command per simulated tick until the distance or angle is covered (or the tracker gives up), then
    zero. Returns why the motion ended."""
    tracker = MotionTracker(plan, sim.world.pose, sim.time_ns / NS_PER_S)
    while not (cmd := tracker.update(sim.world.pose, sim.time_ns / NS_PER_S)).done:
        sim.command(cmd.linear_x, cmd.angular_z)
        sim.tick()
    sim.command(0.0, 0.0)
    return cmd.reason
