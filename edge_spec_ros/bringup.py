"""One-process bringup: the robot-side nodes with the same YAML as the launch file.

Where no ``ros2 launch`` exists (this project's virtual environment), ``edge-spec-ros bringup``
composes camera, bridge, drafter and action nodes in one process with a multi-threaded executor,
optionally starts a verifier on loopback, publishes an instruction and prints what the stack does:
decisions (reasoning + action), parsed actions, /cmd_vel changes and decode statistics.
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass

import rclpy
from geometry_msgs.msg import PoseStamped, Twist
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import Bool, String

from edge_spec_ros.msg import Decision, DecodeStats, NavAction
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.nodes.sim_node import LATCHED
from edge_spec_ros.sim.closed_loop import plot_trajectory
from edge_spec_ros.sim.expert import Episode
from edge_spec_ros.sim.world import Pose, World


@dataclass(frozen=True)
class BringupConfig:
    params_file: str
    serve: bool = False  # start a verifier (embedded model) on loopback and point the bridge at it
    instruction: str = ""  # published once the stack is up
    duration_s: float = 120.0  # stop after this long at most
    until_stop: bool = True  # stop when an instruction cycle ends (stop / invalid action)
    camera_source: str = ""  # overrides the YAML's camera source when set
    bag: str = ""  # replay this bag instead of running the camera node
    sim: bool = False  # the simulated room (sim_node) instead of the camera node
    trajectory: str = ""  # with sim: write a top-down picture of the robot's path here


class Monitor(Node):
    """Prints the stack's outputs and notices the end of an instruction cycle."""

    def __init__(self, print_fn) -> None:
        super().__init__("bringup_monitor")
        self.print = print_fn
        self.instruction = self.create_publisher(String, "instruction", RELIABLE)
        self.done = threading.Event()
        self.decisions: list[Decision] = []
        self.actions: list[NavAction] = []
        self.twists: list[tuple[float, float]] = []
        self._last_twist = None
        self.pose: Pose | None = None  # the simulated robot's latest pose
        self.decision_poses: list[Pose] = []  # its pose when each decision was published
        self.goal_reached = False
        self.create_subscription(Decision, "edge_spec/decision", self.on_decision, RELIABLE)
        self.create_subscription(NavAction, "edge_spec/action", self.on_action, RELIABLE)
        self.create_subscription(DecodeStats, "edge_spec/stats", self.on_stats, RELIABLE)
        self.create_subscription(Twist, "cmd_vel", self.on_twist, 10)
        self.create_subscription(PoseStamped, "sim/pose", self.on_pose, 10)
        self.create_subscription(Bool, "sim/goal_reached", self.on_goal, LATCHED)

    def on_decision(self, msg: Decision) -> None:
        self.decisions.append(msg)
        if self.pose is not None:
            self.decision_poses.append(self.pose)
        self.print(f"[decision {msg.decision} {msg.mode}] {msg.text!r}")

    def on_action(self, msg: NavAction) -> None:
        self.actions.append(msg)
        if msg.kind == "invalid":
            self.print(f"[action {msg.decision}] none: {msg.error}")
        else:
            self.print(f"[action {msg.decision}] {msg.kind} {msg.text!r}: v={msg.linear_x:.2f} m/s "
                       f"ω={msg.angular_z:.2f} rad/s for {msg.duration_s:.2f} s{' (clamped)' if msg.clamped else ''}")
        if msg.kind in ("stop", "invalid"):
            self.done.set()

    def on_stats(self, msg: DecodeStats) -> None:
        self.print(f"[stats {msg.decision} {msg.mode}] {msg.tokens} tokens in {msg.rounds} rounds, "
                   f"τ={msg.tau:.2f} α={msg.alpha:.2f} r={msg.miss_rate:.0%} TTFT {msg.ttft_s * 1e3:.0f} ms, "
                   f"{msg.per_token_s * 1e3:.1f} ms/token, up {msg.bytes_up_per_round:.0f} B/round, "
                   f"down {msg.bytes_down_per_round:.0f} B/round")

    def on_pose(self, msg: PoseStamped) -> None:
        q = msg.pose.orientation
        self.pose = Pose(msg.pose.position.x, msg.pose.position.y, 2 * math.atan2(q.z, q.w))

    def on_goal(self, msg: Bool) -> None:  # the robot's state now: success is where it ends (end state)
        if msg.data != self.goal_reached:
            self.goal_reached = msg.data
            self.print("[sim] the robot is at the target" if msg.data else "[sim] the robot left the target")

    def on_twist(self, msg: Twist) -> None:
        twist = (round(msg.linear.x, 3), round(msg.angular.z, 3))
        self.twists.append(twist)
        if twist != self._last_twist:
            self._last_twist = twist
            self.print(f"[cmd_vel] linear.x={twist[0]:.3f} angular.z={twist[1]:.3f}")


def run(config: BringupConfig, print_fn=print) -> Monitor:
    """Run the stack until the instruction cycle ends or ``duration_s`` passes."""
    from edge_spec_ros.cloud.process import verifier_process

    server = verifier_process() if config.serve else nullcontext(None)
    with server as endpoint:
        args = ["--ros-args", "--params-file", config.params_file]
        if endpoint:
            args += ["-p", f"bridge:verifier_endpoint:={endpoint}"]
        if config.camera_source:
            args += ["-p", f"camera:source:={config.camera_source}"]
        if config.bag:
            args += ["-p", f"bag_replay:bag:={config.bag}"]
        rclpy.init(args=args)
        from edge_spec_ros.nodes.action_node import ActionNode
        from edge_spec_ros.nodes.bridge_node import BridgeNode
        from edge_spec_ros.nodes.drafter_node import DrafterNode

        nodes: list[Node] = [BridgeNode(), DrafterNode(), ActionNode()]
        if config.bag:
            from edge_spec_ros.nodes.bag_replay_node import BagReplayNode

            nodes.append(BagReplayNode())
        elif config.sim:
            from edge_spec_ros.nodes.sim_node import SimNode

            nodes.append(SimNode())
            start = World(nodes[-1].world.objects, nodes[-1].world.pose, nodes[-1].world.config)
        else:
            from edge_spec_ros.nodes.camera_node import CameraNode

            nodes.append(CameraNode())
        monitor = Monitor(print_fn)
        executor = MultiThreadedExecutor(num_threads=6)
        for node in (*nodes, monitor):
            executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, name="executor", daemon=True)
        spinner.start()
        try:
            if config.instruction:
                deadline = time.monotonic() + 10.0
                while monitor.instruction.get_subscription_count() == 0 and time.monotonic() < deadline:
                    time.sleep(0.05)
                print_fn(f"[instruction] {config.instruction!r}")
                monitor.instruction.publish(String(data=config.instruction))
            end = time.monotonic() + config.duration_s
            while time.monotonic() < end and not (config.until_stop and monitor.done.is_set()):
                time.sleep(0.1)
            time.sleep(0.3)  # let the last zero velocity go out
        except KeyboardInterrupt:
            pass
        finally:
            executor.shutdown()
            if config.sim and config.trajectory:
                sim = nodes[-1]
                episode = Episode(sim.config.target, steps=[(None, d.text) for d in monitor.decisions],
                                  poses=[*monitor.decision_poses, sim.world.pose], reached=sim.reached)
                path = plot_trajectory(start, episode, config.trajectory)
                print_fn(f"[sim] trajectory picture: {path}")
            for node in (*nodes, monitor):
                node.destroy_node()
            rclpy.try_shutdown()
    return monitor
