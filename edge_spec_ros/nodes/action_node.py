"""action_node: turns the decoded reasoning + action into velocity commands under safety limits.

Subscribes  edge_spec/decision (Decision), edge_spec/exit_result (ExitResult: the link is alive),
            edge_spec/bridge_status (BridgeStatus: LINK_LOST stops the robot at once)
Publishes   cmd_vel (geometry_msgs/Twist, at ``rate_hz``; remap it to a twist_mux input),
            edge_spec/action (NavAction), edge_spec/reasoning (std_msgs/String)

In doubt the robot stops: unparseable or non-finite text gives zero velocity and a warning quoting
it; every command is clamped (|v|, |ω|, duration); the watchdog zeroes the command when the decision
pipeline has been silent for ``watchdog_timeout_s`` or the verifier is lost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import rclpy
from geometry_msgs.msg import Twist
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from std_msgs.msg import String

from edge_spec_ros.msg import BridgeStatus, Decision, ExitResult, NavAction as NavActionMsg
from edge_spec_ros.nav import MotionTimer, NavConfig, Watchdog, parse_action, plan_motion
from edge_spec_ros.nodes.params import declare_config, doc
from edge_spec_ros.nodes.ros_link import RELIABLE


@dataclass(frozen=True)
class ActionNodeConfig:
    rate_hz: float = field(default=20.0, metadata=doc("cmd_vel publishing rate"))

    def __post_init__(self) -> None:
        if not self.rate_hz > 0:
            raise ValueError(f"rate_hz must be > 0, got {self.rate_hz}")


PARAMETER_CONFIGS = (ActionNodeConfig, NavConfig)


class ActionNode(Node):
    def __init__(self) -> None:
        super().__init__("action")
        self.config = declare_config(self, ActionNodeConfig)
        self.nav = declare_config(self, NavConfig)
        self.timer_ = MotionTimer(Watchdog.from_config(self.nav))
        self.cmd_vel = self.create_publisher(Twist, "cmd_vel", 10)
        self.actions = self.create_publisher(NavActionMsg, "edge_spec/action", RELIABLE)
        self.reasoning = self.create_publisher(String, "edge_spec/reasoning", RELIABLE)
        self.create_subscription(Decision, "edge_spec/decision", self.on_decision, RELIABLE)
        self.create_subscription(ExitResult, "edge_spec/exit_result", self.on_alive, RELIABLE)
        self.create_subscription(BridgeStatus, "edge_spec/bridge_status", self.on_status, RELIABLE)
        self.create_timer(1.0 / self.config.rate_hz, self.tick)

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def on_decision(self, msg: Decision) -> None:
        result = parse_action(msg.text, self.nav)
        out = NavActionMsg()
        out.header.stamp = self.get_clock().now().to_msg()
        out.decision = msg.decision
        if result.action is None:
            self.timer_.cancel()
            self.get_logger().warning(f"decision {msg.decision}: no motion: {result.error}")
            out.kind, out.error = "invalid", result.error or ""
        else:
            action = result.action
            plan = plan_motion(action, self.nav)
            self.timer_.start(plan, self.now())
            if plan.clamped:
                self.get_logger().warning(f"decision {msg.decision}: command clamped: {'; '.join(plan.reasons)}")
            out.kind, out.text = action.kind, action.text
            out.distance_m, out.angle_rad = action.distance_m, action.angle_rad
            out.linear_x, out.angular_z, out.duration_s = plan.linear_x, plan.angular_z, plan.duration_s
            out.clamped = plan.clamped
            self.reasoning.publish(String(data=action.reasoning))
        self.actions.publish(out)
        self.tick()

    def on_alive(self, _msg: ExitResult) -> None:
        self.timer_.watchdog.feed(self.now())

    def on_status(self, msg: BridgeStatus) -> None:
        if msg.state == BridgeStatus.LINK_LOST:
            self.timer_.cancel()
            self.get_logger().error(f"verifier lost ({msg.message}): stopping")
            self.tick()
        elif msg.state == BridgeStatus.OPENED:
            self.timer_.watchdog.feed(self.now())

    def tick(self) -> None:
        plan = self.timer_.active_command(self.now())
        cmd = Twist()
        cmd.linear.x, cmd.angular.z = plan.linear_x, plan.angular_z
        self.cmd_vel.publish(cmd)

    def destroy_node(self) -> None:
        self.cmd_vel.publish(Twist())  # leave the robot standing
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    rclpy.init(args=args)
    node = None
    try:
        node = ActionNode()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
