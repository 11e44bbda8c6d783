"""action_node: turns the decoded reasoning + action into velocity commands under safety limits.

Subscribes  edge_spec/decision (Decision), instruction (std_msgs/String: any new instruction, "stop",
            "cancel" or an empty one ends the current motion at once), odom (nav_msgs/Odometry, when
            ``odom_topic`` is set: motions end on pose feedback), edge_spec/exit_result (ExitResult:
            signs of life of the decision being decoded), edge_spec/bridge_status (LINK_LOST stops)
Publishes   cmd_vel (geometry_msgs/Twist, or TwistStamped with ``cmd_vel_type``: header.frame_id
            ``frame_id``, stamped with the node's clock; the launch file remaps it to the twist_mux
            input cmd_vel_vlm), edge_spec/action (NavAction: STARTED when a decision arrives, DONE or
            CANCELLED when its motion is over), edge_spec/reasoning (std_msgs/String)

In doubt the robot stops: unparseable or non-finite text gives zero velocity and a warning quoting
it; every command is clamped (|v|, |ω|, duration); the watchdog zeroes the command when the decision
pipeline has been silent for ``watchdog_timeout_s`` (a motion on odometry: or its tracker's own
timeout, when longer) or the verifier is lost. With ``odom_topic`` set
a motion ends when odometry says the distance or angle is covered (``nav/motion.MotionTracker``), or
that the robot is blocked (an object in the way), and stops if odometry goes stale; without it the
command is held for its planned duration on the node's clock (simulated time under ``use_sim_time``).
Nothing is published before the first motion. While a motion runs, the command goes out at least
``rate_hz`` times a second: on every odometry sample (so a simulation in lockstep integrates the
answer to each sample) and again on a control tick when the last one went out
``RESEND_AFTER_PERIODS`` control periods ago or more (odometry slower than ``rate_hz``: a Go2 driver
expects 20 Hz); timed motions on every tick. After a motion ends, zero is published for
``hold_zero_s`` and then nothing, so a twist_mux input times out and leaves the robot to other
inputs.

A managed node (nodes/managed.py): decisions move the robot only while it is active. Deactivate (and
shutdown, on SIGINT or SIGTERM, before the context goes down) ends a motion in progress with a final
zero (NavAction CANCELLED, ``deactivated`` or ``shutdown``), or sends one more zero while zero is
held; then nothing until it is activated again. An idle node publishes nothing (another twist_mux
input may be driving).
/diagnostics: ``action: motion``: the motion in progress, the watchdog (its timeout, the time since
the last sign of life of the decision pipeline, how many motions it ended) and the clamp (whether the
last command was clamped and why), the age of the last odometry sample (with ``odom_topic``); WARN
while the last motion ended by the watchdog or stale odometry, and while an active node with
``odom_topic`` has no fresh odometry (a decision then does not move the robot: "no odometry").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nav_msgs.msg import Odometry
from rcl_interfaces.msg import SetParametersResult
from rclpy.qos import qos_profile_sensor_data
from std_msgs.msg import String

from edge_spec_ros.edge.cycle import is_stop
from edge_spec_ros.msg import BridgeStatus, Decision, ExitResult as ExitResultMsg, NavAction as NavActionMsg
from edge_spec_ros.nav import NavConfig, Watchdog, parse_action, plan_motion
from edge_spec_ros.nav.motion import MotionCommand, MotionTracker, PlanarPose
from edge_spec_ros.nodes.diagnostics import OK, WARN, Diagnostics, Report
from edge_spec_ros.nodes.lifecycle import main_for
from edge_spec_ros.nodes.managed import FINALIZED, ManagedConfig, ManagedNode
from edge_spec_ros.nodes.params import declare_config, doc, watch_config
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.nodes.velocity import CMD_VEL_TYPES, check_cmd_vel_type, velocity_message


@dataclass(frozen=True)
class ActionNodeConfig:
    rate_hz: float = field(default=20.0, metadata=doc("control rate: cmd_vel at least this often while moving, "
                                                      "and while holding zero (Hz)", 0.0, 200.0))
    hold_zero_s: float = field(default=1.0, metadata=doc("after a motion ends, publish zero this long, then "
                                                         "nothing (s)", 0.0, 60.0))
    odom_topic: str = field(default="", metadata=doc("nav_msgs/Odometry topic; set: motions end on pose "
                                                     "feedback; empty: on their planned duration"))
    odom_timeout_s: float = field(default=0.5, metadata=doc("with odometry: stop when it is older than this "
                                                            "(s)", 0.0, 10.0))
    cmd_vel_type: str = field(default="Twist", metadata=doc(
        "message type of cmd_vel: Twist (go2_ros2_sdk's twist_mux, nav2 up to Jazzy) or TwistStamped (stamped "
        "with the node's clock, so a consumer can drop a stale command; read at start-up)"))
    frame_id: str = field(default="base_link", metadata=doc("TwistStamped: header.frame_id of the commands "
                                                            "(the robot's body frame)"))

    def __post_init__(self) -> None:
        check_cmd_vel_type(self.cmd_vel_type)
        for name in ("rate_hz", "odom_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value!r}")
        if not (math.isfinite(self.hold_zero_s) and self.hold_zero_s >= 0):
            raise ValueError(f"hold_zero_s must be finite and >= 0, got {self.hold_zero_s!r}")


PARAMETER_CONFIGS = (ActionNodeConfig, NavConfig, ManagedConfig)
START_UP_PARAMETERS = ("odom_topic", "cmd_vel_type")  # read once: the subscription and the publisher's type
# With odometry, a control tick sends the motion's command again when the last one is this many control
# periods old. Below 1, so the rate stays above rate_hz whatever the odometry's rate; at 0.5 a simulation
# in lockstep at a physics step under half a period (sim_node: 20 ms against 50 ms) always answers first.
RESEND_AFTER_PERIODS = 0.5


@dataclass
class _Motion:
    """The motion of one decision in progress."""

    msg: NavActionMsg  # its STARTED message (copied into the end message)
    tracker: MotionTracker | None  # with odometry; without, a one-shot timer ends it on its planned end
    command: MotionCommand


class ActionNode(ManagedNode):
    def __init__(self) -> None:
        super().__init__("action")
        self.config = declare_config(self, ActionNodeConfig, live=True)
        self.nav = declare_config(self, NavConfig, live=True)
        watch_config(self, lambda: self.config, self._set_config)
        watch_config(self, lambda: self.nav, self._set_nav)
        self.add_on_set_parameters_callback(self._refuse_start_up_parameters)
        self.watchdog = Watchdog.from_config(self.nav)
        self.motion: _Motion | None = None
        self.decision = 0  # the latest decision: exit results of older ones are no sign of life
        self.odom: tuple[PlanarPose, float, float] | None = None  # pose, its stamp, received (node clock, s)
        self.hold_until = -math.inf  # node clock (s): zero is held until then; nothing before the first motion
        self._sent_at = -math.inf  # node clock (s) of the last command
        self.cmd_vel = self.create_publisher(CMD_VEL_TYPES[self.config.cmd_vel_type], "cmd_vel", 10)
        self.actions = self.create_publisher(NavActionMsg, "edge_spec/action", RELIABLE)
        self.reasoning = self.create_publisher(String, "edge_spec/reasoning", RELIABLE)
        self.create_subscription(Decision, "edge_spec/decision", self.on_decision, RELIABLE)
        self.create_subscription(String, "instruction", self.on_instruction, RELIABLE)
        self.create_subscription(ExitResultMsg, "edge_spec/exit_result", self.on_alive, RELIABLE)
        self.create_subscription(BridgeStatus, "edge_spec/bridge_status", self.on_status, RELIABLE)
        if self.config.odom_topic:
            self.create_subscription(Odometry, self.config.odom_topic, self.on_odom, qos_profile_sensor_data)
        self._timer = self.create_timer(1.0 / self.config.rate_hz, self.tick)
        self._end_timer = None  # timed motions: fires at the planned end
        self.last_plan = None  # the last decision's MotionPlan (clamped or not, and why)
        self.last_end = ""  # how the last motion ended
        self.stopped_in_doubt = 0  # motions ended by the watchdog or stale odometry
        self.diagnostics = Diagnostics(self)
        self.diagnostics.add("motion", self.report)

    def now(self) -> float:
        """Seconds on the node's clock (simulated time under use_sim_time)."""
        return self.get_clock().now().nanoseconds * 1e-9

    # --- parameters -------------------------------------------------------------------------------
    def _set_config(self, config: ActionNodeConfig) -> None:
        if config.rate_hz != self.config.rate_hz:
            self._timer.timer_period_ns = round(1e9 / config.rate_hz)
            self._timer.reset()
        self.config = config

    @staticmethod
    def _refuse_start_up_parameters(params) -> SetParametersResult:
        fixed = [p.name for p in params if p.name in START_UP_PARAMETERS]
        if fixed:
            return SetParametersResult(successful=False, reason=f"{', '.join(fixed)}: read at start-up; restart "
                                                                "the node to change it")
        return SetParametersResult(successful=True)

    def _set_nav(self, nav: NavConfig) -> None:
        self.nav = nav  # the next decision is planned with it
        self.watchdog.timeout_s = nav.watchdog_timeout_s

    # --- callbacks ----------------------------------------------------------------------------------
    def on_decision(self, msg: Decision) -> None:
        if not self.active:
            self.get_logger().warning(f"decision {msg.decision} ignored: the node is {self.lifecycle_state}")
            return
        self.decision = max(self.decision, msg.decision)
        self._end("CANCELLED", "superseded by a new decision")
        result = parse_action(msg.text, self.nav)
        out = NavActionMsg()
        out.header.stamp = self.get_clock().now().to_msg()
        out.decision = msg.decision
        if result.action is None:
            self.get_logger().warning(f"decision {msg.decision}: no motion: {result.error}")
            out.kind, out.error = "invalid", result.error or ""
            self._publish_end(out, NavActionMsg.DONE, "invalid action")
            return
        action = result.action
        plan = self.last_plan = plan_motion(action, self.nav)
        if plan.clamped:
            self.get_logger().warning(f"decision {msg.decision}: command clamped: {'; '.join(plan.reasons)}")
        out.kind, out.text = action.kind, action.text
        out.distance_m, out.angle_rad = action.distance_m, action.angle_rad
        out.linear_x, out.angular_z, out.duration_s = plan.linear_x, plan.angular_z, plan.duration_s
        out.clamped = plan.clamped
        self.reasoning.publish(String(data=action.reasoning))
        if plan.is_stop:
            self._publish_end(out, NavActionMsg.DONE, "stop")
            self.tick()
            return
        out.status = NavActionMsg.STARTED
        self.actions.publish(out)
        tracker = None
        if self.config.odom_topic:
            if not self._odom_fresh():
                self.get_logger().error(f"decision {msg.decision}: no fresh odometry on "
                                        f"{self.config.odom_topic}: not moving")
                self._publish_end(out, NavActionMsg.CANCELLED, "no odometry")
                return
            pose, stamp, _ = self.odom
            tracker = MotionTracker(plan, pose, stamp)
        self.watchdog.feed(self.now())
        self.motion = _Motion(out, tracker, MotionCommand(plan.linear_x, plan.angular_z))
        if tracker is None:  # timed: end on the planned duration itself, not on the next control tick
            self._end_timer = self.create_timer(plan.duration_s, self._on_duration)
        self._publish(plan.linear_x, plan.angular_z)

    def _on_duration(self) -> None:
        if self.motion is not None and self.motion.tracker is None:
            self._end("DONE", "duration")
            self.tick()

    def on_instruction(self, msg: String) -> None:
        self._end("CANCELLED", "stop" if is_stop(msg.data) else "new instruction")
        self.tick()

    def on_odom(self, msg: Odometry) -> None:
        q = msg.pose.pose.orientation
        yaw = math.atan2(2 * (q.w * q.z + q.x * q.y), 1 - 2 * (q.y * q.y + q.z * q.z))
        pose = PlanarPose(msg.pose.pose.position.x, msg.pose.pose.position.y, yaw)
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        if not all(map(math.isfinite, (pose.x, pose.y, pose.theta, stamp))):
            self.get_logger().warning("odometry with non-finite values ignored", throttle_duration_sec=5.0)
            return
        self.odom = (pose, stamp, self.now())
        m = self.motion
        if m is not None and m.tracker is not None:
            m.command = m.tracker.update(pose, stamp)
            if m.command.done:
                self._end("DONE", m.command.reason)
            else:
                self._publish(m.command.linear_x, m.command.angular_z)

    def on_alive(self, msg: ExitResultMsg) -> None:
        if msg.decision >= self.decision:  # the decision being decoded now, not an old one
            self.watchdog.feed(self.now())

    def on_status(self, msg: BridgeStatus) -> None:
        if msg.state == BridgeStatus.LINK_LOST:
            self.get_logger().error(f"verifier lost ({msg.message}): stopping")
            self._end("CANCELLED", "verifier lost")
            self.tick()
        elif msg.state == BridgeStatus.OPENED and msg.decision >= self.decision:
            self.watchdog.feed(self.now())

    # --- control ------------------------------------------------------------------------------------
    def _odom_fresh(self) -> bool:
        return self.odom is not None and self.now() - self.odom[2] <= self.config.odom_timeout_s

    def tick(self) -> None:
        """Publish what the robot should do now: the motion's command, zero while holding, else nothing.
        With odometry the command goes out on each sample (``on_odom``); a tick sends it again when the
        last one is ``RESEND_AFTER_PERIODS`` control periods old."""
        if not self.active:
            return
        now = self.now()
        m = self.motion
        if m is not None:
            # a motion on odometry is bounded by its tracker (``timeout`` at 2T + 1 s): a robot slower than
            # commanded may take longer than the watchdog, and the link's loss stops it anyway (LINK_LOST)
            bound = m.tracker.timeout_s if m.tracker is not None else 0.0
            if self.watchdog.expired(now, bound):
                silent = max(self.watchdog.timeout_s, bound)
                self._end("CANCELLED", f"watchdog expired: no sign of life for {silent:g} s")
            elif m.tracker is not None and not self._odom_fresh():
                self._end("CANCELLED", f"odometry older than {self.config.odom_timeout_s:g} s")
        if self.motion is not None:
            if self.motion.tracker is None or now - self._sent_at >= RESEND_AFTER_PERIODS / self.config.rate_hz:
                self._publish(self.motion.command.linear_x, self.motion.command.angular_z)
        elif now <= self.hold_until:
            self._publish(0.0, 0.0)

    def _publish(self, linear_x: float, angular_z: float) -> None:
        c, now = self.config, self.get_clock().now()
        self.cmd_vel.publish(velocity_message(c.cmd_vel_type, linear_x, angular_z, now.to_msg(), c.frame_id))
        self._sent_at = now.nanoseconds * 1e-9

    def _end(self, status: str, reason: str) -> None:
        """End the motion in progress (if any): zero now, hold zero, report how it ended."""
        m, self.motion = self.motion, None
        if self._end_timer is not None:
            self.destroy_timer(self._end_timer)
            self._end_timer = None
        if m is None:
            return
        self.last_end = f"decision {m.msg.decision} {m.msg.kind}: {status.lower()}: {reason}"
        if reason.startswith(("watchdog", "odometry older")):
            self.stopped_in_doubt += 1
        self.hold_until = self.now() + self.config.hold_zero_s
        self._publish(0.0, 0.0)
        self._publish_end(m.msg, getattr(NavActionMsg, status), reason, m.tracker)

    def _publish_end(self, started: NavActionMsg, status: int, reason: str,
                     tracker: MotionTracker | None = None) -> None:
        out = NavActionMsg()
        for name in ("decision", "kind", "distance_m", "angle_rad", "linear_x", "angular_z", "duration_s",
                     "clamped", "text", "error"):
            setattr(out, name, getattr(started, name))
        out.header.stamp = self.get_clock().now().to_msg()
        out.status, out.end_reason = status, reason
        if tracker is not None:
            out.travelled_m, out.turned_rad = (0.0, tracker.covered) if tracker.turn else (tracker.covered, 0.0)
        else:  # no odometry: not measured
            out.travelled_m = out.turned_rad = math.nan
        self.actions.publish(out)

    # --- lifecycle (nodes/managed.py) --------------------------------------------------------------------
    def activate(self) -> None:
        self.hold_until = -math.inf  # nothing until the first motion

    def deactivate(self) -> None:
        """Stop: end any motion with a final zero, or send one more while zero is held (on shutdown the
        context is still valid here); then nothing until activated again."""
        self._end("CANCELLED", "shutdown" if self.lifecycle_state == FINALIZED else "deactivated")
        if self.now() <= self.hold_until:
            self._publish(0.0, 0.0)
        self.hold_until = -math.inf

    # --- /diagnostics ---------------------------------------------------------------------------------
    def report(self) -> Report:
        now, m, plan = self.now(), self.motion, self.last_plan
        fed = self.watchdog.last_feed
        values = {
            "lifecycle": self.lifecycle_state,
            "motion": f"decision {m.msg.decision} {m.msg.kind}" if m is not None else "",
            "linear_x": f"{m.command.linear_x:.3f}" if m is not None else "",
            "angular_z": f"{m.command.angular_z:.3f}" if m is not None else "",
            "watchdog_timeout_s": f"{self.watchdog.timeout_s:g}",
            "since_sign_of_life_s": f"{now - fed:.2f}" if fed is not None else "",
            "stopped_in_doubt": self.stopped_in_doubt,
            "clamped": plan.clamped if plan is not None else "",
            "clamp_reasons": "; ".join(plan.reasons) if plan is not None else "",
            "last_end": self.last_end,
            "odometry_age_s": self._odom_age(now),
        }
        if m is not None:
            message = f"moving: decision {m.msg.decision} {m.msg.kind}"
        else:
            message = "idle" if self.active else self.lifecycle_state
        if self.last_end and ("watchdog" in self.last_end or "odometry older" in self.last_end) and m is None:
            return Report(WARN, f"{message}; last motion stopped in doubt: {self.last_end}", values)
        if self.config.odom_topic and self.active and not self._odom_fresh():
            return Report(WARN, f"{message}; no fresh odometry on {self.config.odom_topic}: decisions do not "
                          "move the robot", values)
        return Report(OK, message, values)

    def _odom_age(self, now: float) -> str:
        """Seconds since the last odometry sample on the node's clock; "none" before the first; "" without."""
        if not self.config.odom_topic:
            return ""
        return "none" if self.odom is None else f"{now - self.odom[2]:.2f}"


def main(args: list[str] | None = None) -> int:
    return main_for(ActionNode, args=args)


if __name__ == "__main__":
    raise SystemExit(main())
