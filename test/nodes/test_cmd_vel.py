"""The action node's velocity output as a twist_mux input and a Go2 driver see it, with the node in its own
process: nothing before the first motion; while moving at least rate_hz (20 Hz) commands a second, even
with odometry slower than that; TwistStamped carries frame_id and the node clock's stamp (simulated time
here); and after a SIGKILL mid-motion the last command stays the last message (0.3 m/s), while the
stamp of a TwistStamped ages past a consumer's timeout."""

from __future__ import annotations

import math
import signal
import threading
import time

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Twist, TwistStamped
from nav_msgs.msg import Odometry
from rclpy.qos import qos_profile_sensor_data
from rosgraph_msgs.msg import Clock

from edge_spec_ros.msg import Decision, NavAction as NavActionMsg
from edge_spec_ros.nodes.ros_link import RELIABLE
from rosharness import node_command, odometry_fresh, process, wait_for

DISCOVERY_S = 20.0
NS = 1_000_000_000
GO2_RATE_HZ = 20.0  # what Go2 drivers expect while moving (the action node's default rate_hz)
RESEND_S = 2.0  # a first decision not answered within this is sent again
CONSUMER_TIMEOUT_S = 0.5  # a stamped consumer's staleness bound (twist_mux's usual input timeout)


def send(pub, decision: int, text: str) -> None:
    msg = Decision()
    msg.decision, msg.text, msg.mode = decision, text, "fsd"
    pub.publish(msg)


def send_first(pub, actions: list, decision: int, text: str) -> None:
    """A node's first decision, sent again every ``RESEND_S`` until the action node answers it (a NavAction
    of that decision): the publisher may count the subscription before the subscription has matched the
    publisher back, and a message sent then can be lost."""
    deadline = time.monotonic() + DISCOVERY_S
    while True:
        send(pub, decision, text)
        try:
            wait_for(lambda: any(a.decision == decision for a in actions), min(RESEND_S, deadline - time.monotonic()),
                     f"the action node's answer to decision {decision}")
            return
        except AssertionError:
            if time.monotonic() >= deadline:
                raise


def stamp_s(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def test_nothing_before_the_first_motion(ros, tmp_path):
    """A node that has not moved the robot publishes nothing: a zero would take the twist_mux input
    from nav2 (priority) for its timeout. hold_zero_s 5 s: zeros held from start-up would show."""
    twists: list[tuple[float, float]] = []
    ros.node.create_subscription(Twist, "quiet/cmd_vel", lambda m: twists.append((time.monotonic(), m.linear.x)), 10)
    decisions = ros.node.create_publisher(Decision, "quiet/edge_spec/decision", RELIABLE)
    actions = ros.collect(NavActionMsg, "quiet/edge_spec/action", RELIABLE)
    cmd = node_command("action_node", "-r", "__ns:=/quiet", "-p", "rate_hz:=50.0", "-p", "hold_zero_s:=5.0")
    with process(cmd, tmp_path / "action.log") as proc:
        wait_for(lambda: decisions.get_subscription_count() > 0 and ros.node.count_publishers("quiet/cmd_vel") > 0,
                 DISCOVERY_S, "the action node")
        send_first(decisions, actions, 1, "Action: fly to the moon")  # an invalid action: answered, no motion
        time.sleep(0.5)  # an absence needs a window: 25 control periods
        assert twists == []
        sent = time.monotonic()
        send(decisions, 2, "Action: move forward 15 cm")
        wait_for(lambda: twists, 10, "the motion's first command")
        assert twists[0][1] == pytest.approx(0.3) and twists[0][0] > sent
        assert proc.poll() is None


class FollowingRobot:
    """A robot in the test process that does ``speed`` times what the last command on ``/<ns>/cmd_vel``
    says, its odometry on ``/<ns>/odom`` at ``hz``: ``received`` holds (monotonic time, linear.x)."""

    def __init__(self, ros, ns: str, hz: float, speed: float = 1.0) -> None:
        self.ros, self.speed = ros, speed
        self.received: list[tuple[float, float]] = []
        ros.node.create_subscription(Twist, f"{ns}/cmd_vel",
                                     lambda m: self.received.append((time.monotonic(), m.linear.x)), 10)
        self.odom = ros.node.create_publisher(Odometry, f"{ns}/odom", qos_profile_sensor_data)
        self.x, self.t = 0.0, time.monotonic()
        self.timer = ros.node.create_timer(1 / hz, self.sample)

    def sample(self) -> None:
        now = time.monotonic()
        self.x += self.speed * (self.received[-1][1] if self.received else 0.0) * (now - self.t)
        self.t = now
        msg = Odometry()
        msg.header.stamp = self.ros.node.get_clock().now().to_msg()
        msg.pose.pose.position.x, msg.pose.pose.orientation.w = self.x, 1.0
        self.odom.publish(msg)

    def drive(self, ns: str, text: str, tmp_path, timeout_s: float) -> NavActionMsg:
        """Run an action node on ``/<ns>`` with this odometry, send it decision 1 (``text``) once it has
        fresh odometry, and return the end of that motion."""
        ros = self.ros
        decisions = ros.node.create_publisher(Decision, f"{ns}/edge_spec/decision", RELIABLE)
        actions = ros.collect(NavActionMsg, f"{ns}/edge_spec/action", RELIABLE)
        diagnostics = ros.collect(DiagnosticArray, "/diagnostics")
        cmd = node_command("action_node", "-r", f"__ns:=/{ns}", "-p", "odom_topic:=odom")  # rate_hz: the default 20
        try:
            with process(cmd, tmp_path / "action.log") as proc:
                wait_for(lambda: decisions.get_subscription_count() > 0 and self.odom.get_subscription_count() > 0
                         and ros.node.count_publishers(f"{ns}/cmd_vel") > 0, DISCOVERY_S, "the action node")
                wait_for(lambda: odometry_fresh(diagnostics), DISCOVERY_S, "fresh odometry at the action node")
                send_first(decisions, actions, 1, text)
                wait_for(lambda: any(a.decision == 1 and a.status != NavActionMsg.STARTED for a in actions),
                         timeout_s, "the end of the motion")
                assert proc.poll() is None
        finally:
            ros.node.destroy_timer(self.timer)
        return next(a for a in actions if a.decision == 1 and a.status != NavActionMsg.STARTED)


def test_at_least_20_hz_while_moving_with_slower_odometry(ros, tmp_path):
    """Odometry at 8 Hz (a slow driver): the command still goes out at >= 20 Hz over the whole motion, and
    the motion ends on the odometry (reached)."""
    robot = FollowingRobot(ros, "rate", hz=8)
    end = robot.drive("rate", "Action: move forward 60 cm", tmp_path, 15)  # 2 s at 0.3 m/s
    assert end.status == NavActionMsg.DONE and end.end_reason == "reached", end.end_reason
    received = robot.received
    moving = [t for t, x in received if x > 0]
    rate = (len(moving) - 1) / (moving[-1] - moving[0])
    assert len(moving) > 30 and rate >= GO2_RATE_HZ, (len(moving), rate)


def test_a_robot_slower_than_commanded_reaches_its_goal_after_the_watchdogs_timeout(ros, tmp_path):
    """A robot at 70 % of the commanded speed: "move forward 150 cm" is planned at 5 s and takes 7.1 s,
    past the 6 s watchdog while the decision pipeline is silent. A motion on odometry is bounded by its
    tracker (2T + 1 s), so it ends reached, not cut short by the watchdog."""
    robot = FollowingRobot(ros, "slow", hz=20, speed=0.7)
    end = robot.drive("slow", "Action: move forward 150 cm", tmp_path, 30)
    assert end.status == NavActionMsg.DONE and end.end_reason == "reached", end.end_reason
    assert end.travelled_m == pytest.approx(1.5, abs=0.05)


class SimClock:
    """Simulated time published on ``pub`` every 10 ms of wall time from 1000 s on, 5 ms a tick (half the
    wall clock's pace: a motion timed on the wall clock would end early in its stamps) up to ``target``,
    where it stands (None: on and on). Where it stands the node's callbacks see that time however late
    they run, so a loaded machine cannot stretch what the stamps show."""

    STEP_NS = NS // 200

    def __init__(self, ros, pub) -> None:
        self.ns, self.target, self.pub = 1000 * NS, None, pub
        self.lock = threading.Lock()
        self.timer = ros.node.create_timer(0.01, self.tick)

    def tick(self) -> None:
        with self.lock:
            step = self.STEP_NS if self.target is None else max(0, min(self.STEP_NS, self.target - self.ns))
            self.ns += step
            msg = Clock()
            msg.clock.sec, msg.clock.nanosec = divmod(self.ns, NS)
        self.pub.publish(msg)

    def stand(self, at_ns: int | None = None) -> int:
        """Go on to ``at_ns`` and stand there (None: stand where it is now); returns where."""
        with self.lock:
            self.target = self.ns if at_ns is None else at_ns
            return self.target

    def at(self, ns: int) -> bool:
        with self.lock:
            return self.ns >= ns


def stamp_ns(stamp) -> int:
    return stamp.sec * NS + stamp.nanosec


def test_twist_stamped_carries_frame_id_and_the_node_clocks_stamp(ros, tmp_path):
    """cmd_vel_type TwistStamped under simulated time: header.frame_id is the parameter's, the stamps are
    the node's clock (the simulated time the test publishes, about 1000 s, not the wall clock), rising;
    the motion ends at its planned 0.5 s of that clock, then zero is held for hold_zero_s of it, then
    nothing. Simulated time stands still at each instant the test checks (the motion's start, its
    planned end, the hold's end), so the stamps are exact whatever the load."""
    stamped: list[TwistStamped] = []
    ros.node.create_subscription(TwistStamped, "stamped/cmd_vel", stamped.append, 10)
    clock_pub = ros.node.create_publisher(Clock, "stamped/clock", 10)
    decisions = ros.node.create_publisher(Decision, "stamped/edge_spec/decision", RELIABLE)
    actions = ros.collect(NavActionMsg, "stamped/edge_spec/action", RELIABLE)
    diagnostics = ros.collect(DiagnosticArray, "/diagnostics")
    clock = SimClock(ros, clock_pub)
    period = NS // round(GO2_RATE_HZ)
    cmd = node_command("action_node", "-r", "__ns:=/stamped", "-r", "/clock:=/stamped/clock",
                       "-p", "use_sim_time:=true", "-p", "cmd_vel_type:=TwistStamped", "-p", "frame_id:=go2/base_link",
                       "-p", "hold_zero_s:=0.5")
    try:
        with process(cmd, tmp_path / "action.log") as proc:
            wait_for(lambda: decisions.get_subscription_count() > 0 and clock_pub.get_subscription_count() > 0
                     and ros.node.count_publishers("stamped/cmd_vel") > 0, DISCOVERY_S, "the action node")
            start = clock.stand()  # the node's /diagnostics (every second of wall time) say when it is there
            wait_for(lambda: any(stamp_ns(d.header.stamp) == start for d in diagnostics), DISCOVERY_S,
                     "the action node's clock at the motion's start")
            send_first(decisions, actions, 1, "Action: move forward 15 cm")  # 0.5 s of simulated time
            planned_end = clock.stand(start + NS // 2)
            wait_for(lambda: any(a.decision == 1 and a.status == NavActionMsg.DONE for a in actions), 15, "DONE")
            done = next(a for a in actions if a.decision == 1 and a.status == NavActionMsg.DONE)
            hold_end = clock.stand(planned_end + NS // 2)
            wait_for(lambda: any(m.twist.linear.x == 0.0 and stamp_ns(m.header.stamp) > hold_end - period
                                 for m in stamped), 15, "zero held to the hold's end")  # its last control tick
            after = clock.stand(hold_end + NS)
            wait_for(lambda: clock.at(after), 15, "1 s more of simulated time")
            assert proc.poll() is None
    finally:
        ros.node.destroy_timer(clock.timer)
    assert stamped and all(m.header.frame_id == "go2/base_link" for m in stamped)
    stamps = [stamp_ns(m.header.stamp) for m in stamped]
    assert all(1000 * NS < s < 4600 * NS for s in stamps), stamps[:3]  # simulated time, not the wall clock
    assert stamps == sorted(stamps)
    moving = [s for m, s in zip(stamped, stamps) if m.twist.linear.x > 0]
    assert moving[0] == start and stamp_ns(done.header.stamp) == planned_end  # 0.5 s of the node's clock
    assert moving[-1] <= planned_end
    zeros = [s for m, s in zip(stamped, stamps) if m.twist.linear.x == 0.0 and s >= moving[-1]]
    assert hold_end - period < zeros[-1] <= hold_end  # zero held for hold_zero_s, then nothing
    assert stamped[-1].twist.linear.x == 0.0


@pytest.mark.parametrize("cmd_vel_type", ["Twist", "TwistStamped"])
def test_sigkill_mid_motion_leaves_the_last_command_and_a_stamp_that_ages(ros, tmp_path, cmd_vel_type):
    """SIGKILL (no handler runs, no final zero) while moving at 0.3 m/s: the last message on the topic is
    the 0.3 m/s command, and nothing follows it. A Twist has nothing a consumer could age it by; a
    TwistStamped's stamp (the node clock: the wall clock here) is older than a consumer's 0.5 s timeout
    once 0.5 s have passed since the kill, so a consumer that checks stamps stops."""
    ns = f"kill_{cmd_vel_type.lower()}"
    msg_type = TwistStamped if cmd_vel_type == "TwistStamped" else Twist
    received: list[tuple[float, object]] = []
    ros.node.create_subscription(msg_type, f"{ns}/cmd_vel", lambda m: received.append((time.time(), m)), 10)
    decisions = ros.node.create_publisher(Decision, f"{ns}/edge_spec/decision", RELIABLE)
    actions = ros.collect(NavActionMsg, f"{ns}/edge_spec/action", RELIABLE)
    cmd = node_command("action_node", "-r", f"__ns:=/{ns}", "-p", f"cmd_vel_type:={cmd_vel_type}")
    with process(cmd, tmp_path / "action.log") as proc:
        wait_for(lambda: decisions.get_subscription_count() > 0 and ros.node.count_publishers(f"{ns}/cmd_vel") > 0,
                 DISCOVERY_S, "the action node")
        send_first(decisions, actions, 1, "Action: move forward 100 cm")  # 3.3 s at 0.3 m/s
        wait_for(lambda: len(received) > 10, 10, "the motion")
        proc.send_signal(signal.SIGKILL)
        killed = time.time()
        assert proc.wait(timeout=10) == -signal.SIGKILL
    count = len(received)
    wait_for(lambda: time.time() > killed + CONSUMER_TIMEOUT_S + 0.2, 5, "a consumer's timeout after the kill")
    assert len(received) == count  # nothing after the kill: no final zero
    last_time, last = received[-1]
    twist = last.twist if cmd_vel_type == "TwistStamped" else last
    assert twist.linear.x == pytest.approx(0.3) and last_time <= killed + 0.1  # the last command stays 0.3 m/s
    if cmd_vel_type == "TwistStamped":
        age_at_kill = killed - stamp_s(last.header.stamp)
        assert 0.0 <= age_at_kill < 0.5, age_at_kill  # a fresh command when the node died ...
        assert time.time() - stamp_s(last.header.stamp) > CONSUMER_TIMEOUT_S  # ... and stale a timeout later
        assert math.isfinite(age_at_kill)
