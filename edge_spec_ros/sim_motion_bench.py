"""``edge-spec-ros sim-motion-bench``: commanded vs travelled distance and angle in the simulated room.

``sim_node`` runs in its own process and owns simulated time (/clock). A driver node in this process,
on ``use_sim_time``, holds a Twist for the commanded amount's duration in simulated time (the
``cmd_vel`` an action node sends for "move forward 100 cm" or "turn left 45 degrees" at cruise speed),
then zero, and reads what the robot travelled from ``odom``. The same motions run idle and with
``busy`` busy-loop processes beside them, side by side in one run; the table gives the travelled
amount and its error per repetition.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import rclpy
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock

from edge_spec_ros.cloud.process import stop
from edge_spec_ros.nav import NavConfig

# a free lane of every room: x = 0.6 m is the start column, objects stand at x >= 2 m
START = {"start_x": 0.6, "start_y": 1.5, "start_theta": math.pi / 2}
SIM_START_TIMEOUT_S = 30.0  # wall seconds for sim_node to come up
MOTION_TIMEOUT_S = 60.0  # wall seconds for one motion (in simulated time it takes a few seconds)
SETTLE_S = 0.5  # simulated seconds after a motion before odometry is read


@dataclass(frozen=True)
class Motion:
    kind: str  # "forward" (m) or "turn" (rad)
    commanded: float
    travelled: float
    real_time_factor: float  # simulated seconds per wall second while the command was held

    @property
    def error_pct(self) -> float:
        return 100 * (self.travelled - self.commanded) / self.commanded


def yaw(msg: Odometry) -> float:
    q = msg.pose.pose.orientation
    return 2 * math.atan2(q.z, q.w)


class MotionDriver(Node):
    """Holds a Twist for a duration of simulated time, measured on every /clock tick."""

    def __init__(self) -> None:
        super().__init__("motion_bench", parameter_overrides=[Parameter("use_sim_time", value=True)])
        self.odom: Odometry | None = None
        self.cmd = self.create_publisher(Twist, "cmd_vel", 10)
        self._lock = threading.Lock()
        self._hold: tuple[Twist, int] | None = None  # (twist, end time ns)
        self._done = threading.Event()
        self.create_subscription(Odometry, "odom", self._on_odom, 10)
        self.create_subscription(Clock, "/clock", self._on_clock, 10)

    def _on_odom(self, msg: Odometry) -> None:
        self.odom = msg

    def _on_clock(self, msg: Clock) -> None:
        now = msg.clock.sec * 1_000_000_000 + msg.clock.nanosec
        with self._lock:
            if self._hold is None:
                return
            twist, end = self._hold
            if now >= end:
                self._hold = None
                self.cmd.publish(Twist())
                self._done.set()
            else:
                self.cmd.publish(twist)

    def now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def hold(self, linear_x: float, angular_z: float, duration_s: float) -> None:
        """Publish (linear_x, angular_z) until ``duration_s`` of simulated time has passed, then zero.

        The end is the first tick at or after start + duration - dt/2: the nearest tick."""
        twist = Twist()
        twist.linear.x, twist.angular.z = linear_x, angular_z
        self._done.clear()
        start = self.now_ns()
        with self._lock:
            self._hold = (twist, start + round(duration_s * 1e9) - 10_000_000)
        self.cmd.publish(twist)
        if not self._done.wait(MOTION_TIMEOUT_S):
            raise RuntimeError("the simulated motion did not end: is sim_node ticking?")

    def wait_sim(self, seconds: float) -> None:
        end = self.now_ns() + seconds * 1e9
        deadline = time.monotonic() + MOTION_TIMEOUT_S
        while self.now_ns() < end and time.monotonic() < deadline:
            time.sleep(0.01)


def measure(driver: MotionDriver, nav: NavConfig, metres: float, degrees: float) -> list[Motion]:
    """Drive ``metres`` forward, then turn ``degrees`` left, at the action node's cruise speeds."""
    out = []
    for kind, amount, speed in (("forward", metres, nav.cruise_linear_speed),
                                ("turn", math.radians(degrees), nav.cruise_angular_speed)):
        before = driver.odom
        wall0, sim0 = time.monotonic(), driver.now_ns()
        driver.hold(speed if kind == "forward" else 0.0, speed if kind == "turn" else 0.0, amount / speed)
        rtf = (driver.now_ns() - sim0) / 1e9 / (time.monotonic() - wall0)
        driver.wait_sim(SETTLE_S)
        after = driver.odom
        if kind == "forward":
            p, q = before.pose.pose.position, after.pose.pose.position
            travelled = math.hypot(q.x - p.x, q.y - p.y)
        else:
            turned = yaw(after) - yaw(before)
            travelled = math.atan2(math.sin(turned), math.cos(turned))
        out.append(Motion(kind, amount, travelled, rtf))
    return out


def busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def run(repeats: int = 3, busy: int = 2, metres: float = 1.0, degrees: float = 45.0,
        physics_rate_hz: float = 50.0) -> dict[str, list[Motion]]:
    """{"idle": motions, "busy": motions}: ``repeats`` × (forward, turn) per condition, each repetition
    in a fresh sim_node process started at the same free pose."""
    nav = NavConfig()
    results: dict[str, list[Motion]] = {"idle": [], f"{busy} busy loops": []}
    rclpy.init()
    driver = MotionDriver()
    executor = SingleThreadedExecutor()
    executor.add_node(driver)
    spinner = threading.Thread(target=executor.spin, name="executor", daemon=True)
    spinner.start()
    try:
        for condition in results:
            loads = busy_loops(busy) if condition != "idle" else []
            try:
                for _ in range(repeats):
                    args = [f"{k}:={v}" for k, v in {**START, "physics_rate_hz": physics_rate_hz}.items()]
                    cmd = [sys.executable, "-m", "edge_spec_ros.nodes.sim_node", "--ros-args",
                           *[a for kv in args for a in ("-p", kv)]]
                    sim = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
                    try:
                        driver.odom = None
                        deadline = time.monotonic() + SIM_START_TIMEOUT_S
                        while (driver.odom is None or driver.cmd.get_subscription_count() == 0) \
                                and time.monotonic() < deadline:
                            time.sleep(0.05)
                        if driver.odom is None:
                            raise RuntimeError("sim_node did not start")
                        driver.wait_sim(0.2)
                        results[condition] += measure(driver, nav, metres, degrees)
                    finally:
                        stop(sim)
            finally:
                for p in loads:
                    stop(p)
    finally:
        executor.shutdown()
        spinner.join(timeout=MOTION_TIMEOUT_S)
        driver.destroy_node()
        rclpy.try_shutdown()
    return results


def table(results: dict[str, list[Motion]]) -> str:
    lines = ["| condition | motion | commanded | travelled (per run) | worst error | sim s per wall s |",
             "|---|---|---|---|---|---|"]
    for condition, motions in results.items():
        for kind, unit, scale in (("forward", "m", 1.0), ("turn", "°", 180 / math.pi)):
            ms = [m for m in motions if m.kind == kind]
            if not ms:
                continue
            worst = max((m.error_pct for m in ms), key=abs)
            lines.append(f"| {condition} | {kind} | {ms[0].commanded * scale:.3f} {unit} | "
                         + ", ".join(f"{m.travelled * scale:.3f}" for m in ms) + f" {unit} | {worst:+.2f} % | "
                         + f"{min(m.real_time_factor for m in ms):.2f}-{max(m.real_time_factor for m in ms):.2f} |")
    return "\n".join(lines)
