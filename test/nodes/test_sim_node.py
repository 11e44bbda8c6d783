"""sim_node in its own process: it owns simulated time (/clock), renders camera frames on simulated
time, integrates /cmd_vel over simulated time, publishes odometry, and stops when commands stop."""

from __future__ import annotations

import math
import threading

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, Twist
from nav_msgs.msg import Odometry
from rclpy.qos import qos_profile_sensor_data
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image
from std_msgs.msg import Bool

from edge_spec_ros.msg import Decision, NavAction as NavActionMsg
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.nodes.sim_node import CLOCK_QOS, LATCHED, SimConfig, sim_world
from rosharness import node_command, odometry_fresh, process, wait_for

NS = 1_000_000_000


def yaw(q) -> float:
    return 2 * math.atan2(q.z, q.w)


def stamp_ns(stamp) -> int:
    return stamp.sec * NS + stamp.nanosec


def test_sim_node_owns_time_and_integrates_commands_over_it(ros, tmp_path):
    images = ros.collect(Image, "camera/image_raw", qos_profile_sensor_data)
    poses = ros.collect(PoseStamped, "sim/pose", 10)
    odom = ros.collect(Odometry, "odom", 10)
    goal = ros.collect(Bool, "sim/goal_reached", LATCHED)
    cmd = ros.node.create_publisher(Twist, "cmd_vel", 10)
    turn = Twist()
    turn.angular.z = 0.5
    window: dict[str, int] = {}  # simulated time: when the test starts and stops commanding
    done = threading.Event()

    def on_clock(msg: Clock) -> None:  # command a turn for exactly 1 s of simulated time
        now = stamp_ns(msg.clock)
        if "start" in window and not done.is_set():
            if now - window["start"] < NS - NS // 100:
                cmd.publish(turn)
            else:
                cmd.publish(Twist())
                window["end"] = now
                done.set()

    clocks = []
    ros.node.create_subscription(Clock, "/clock", lambda m: (clocks.append(m), on_clock(m)), CLOCK_QOS)
    with process(node_command("sim_node", "-p", "seed:=4", "-p", "camera_rate_hz:=10.0"), tmp_path / "sim.log") as proc:
        wait_for(lambda: images and odom and goal and clocks and cmd.get_subscription_count() > 0, 20, "the sim")
        assert images[-1].encoding == "rgb8" and (images[-1].height, images[-1].width) == (168, 224)
        assert goal[-1].data is False
        assert odom[0].header.frame_id == "odom" and odom[0].child_frame_id == "base_link"
        assert odom[0].pose.pose.position.x == 0.0 and yaw(odom[0].pose.pose.orientation) == 0.0
        ticks = [stamp_ns(c.clock) for c in clocks[-5:]]
        assert all(b - a == NS // 50 for a, b in zip(ticks, ticks[1:], strict=False))  # fixed 20 ms steps
        frames = [stamp_ns(i.header.stamp) for i in images[-3:]]
        assert all((b - a) == NS // 10 for a, b in zip(frames, frames[1:], strict=False))  # 10 Hz of sim time
        start = odom[-1]
        window["start"] = stamp_ns(start.header.stamp)
        wait_for(done.is_set, 30, "1 s of simulated time")
        wait_for(lambda: stamp_ns(odom[-1].header.stamp) > window["end"] + NS, 30, "the robot to settle")
        turned = yaw(odom[-1].pose.pose.orientation) - yaw(start.pose.pose.orientation)
        # 0.5 rad in 1 s of simulated time; the command reaches the sim within a tick or two
        assert abs(turned - 0.5) < 0.03, turned
        assert odom[-1].twist.twist.angular.z == 0.0  # stopped
        still = poses[-1]
        wait_for(lambda: stamp_ns(poses[-1].header.stamp) > stamp_ns(still.header.stamp) + NS // 2, 10, "time")
        assert yaw(poses[-1].pose.orientation) == yaw(still.pose.orientation)
        assert poses[-1].pose.position.x == still.pose.position.x  # turning in place, then still
        assert proc.poll() is None


def test_a_command_stream_that_stops_is_a_stop(ros, tmp_path):
    """The last command expires after cmd_timeout_s of simulated time, as the robot's own watchdog."""
    odom = ros.collect(Odometry, "odom", 10)
    cmd = ros.node.create_publisher(Twist, "cmd_vel", 10)
    forward = Twist()
    forward.linear.x = 0.3
    args = ("-p", "seed:=4", "-p", "cmd_timeout_s:=0.2", "-p", "start_x:=0.6", "-p", "start_y:=1.5",
            "-p", f"start_theta:={math.pi / 2}")
    with process(node_command("sim_node", *args), tmp_path / "sim.log"):
        wait_for(lambda: odom and cmd.get_subscription_count() > 0, 20, "the sim")
        cmd.publish(forward)  # once, then nothing
        wait_for(lambda: odom[-1].twist.twist.linear.x > 0, 10, "motion")
        t0 = stamp_ns(odom[-1].header.stamp)
        wait_for(lambda: stamp_ns(odom[-1].header.stamp) > t0 + NS, 10, "simulated time")
        assert odom[-1].twist.twist.linear.x == 0.0
        assert 0.03 <= odom[-1].pose.pose.position.x <= 0.3 * 0.2 + 0.013  # 0.2 s at 0.3 m/s, give or take a tick


@pytest.mark.slow
def test_the_motion_bench_drives_decisions_through_the_action_node_within_2_percent_on_odometry(tmp_path):
    """sim_node and action_node processes on simulated time; decisions from the bench; two busy loops."""
    from edge_spec_ros.sim_motion_bench import cpu_table, run, table

    result = run(repeats=1, busy=2, cpu_s=2.0, log_dir=tmp_path)
    report = table(result) + "\n" + cpu_table(result)
    assert result.loads == ["idle", "2 busy loops"], report
    for mode in ("odometry", "timed"):
        for load in result.loads:
            ms = [s for s in result.samples if (s.mode, s.load) == (mode, load)]
            assert [s.kind for s in ms] == ["forward", "forward", "turn", "turn"], report
            assert all(s.status == "DONE" for s in ms), report
            assert {s.end_reason for s in ms} == ({"reached"} if mode == "odometry" else {"duration"}), report
    for load in result.loads:  # the bound holds idle and with two busy loops beside the nodes
        for kind in ("forward", "turn"):
            assert abs(result.worst("odometry", load, kind).error_pct) < 2.0, report
    assert not result.failures(2.0), report
    assert all(s.reported is not None for s in result.samples if s.mode == "odometry"), report
    assert sorted(result.idle_cpu) == sorted(f"idle, {name} ({mode} mode)" for name in ("sim_node", "action_node")
                                             for mode in ("odometry", "timed")), report
    assert all(0 <= cores < 2 for cores in result.idle_cpu.values()), report


def test_a_motion_into_an_object_ends_blocked_not_by_the_watchdog(ros, tmp_path):
    """The demo's action 14 through the nodes: in room 12, 1.06 m before the silver bottle and facing it,
    "move forward 100 cm" (3.3 s) meets the bottle after 0.684 m. The action node ends the motion
    "blocked" about a second after the robot stopped (in simulated time), not by its 6 s watchdog
    (which ended it when the motion tracker knew no blocked robot), touching the bottle. Both nodes on
    TwistStamped: the room follows the action node's type."""
    world, target = sim_world(SimConfig(seed=12))
    bottle = world.target(target)
    heading = math.pi / 2  # walk at the bottle along +y from 1.06 m away (centre to centre)
    start = (bottle.x, bottle.y - 1.06)
    remap = ("-r", "__ns:=/blocked", "-r", "/clock:=/blocked/clock", "-p", "use_sim_time:=true",
             "-p", "cmd_vel_type:=TwistStamped")
    sim_cmd = node_command("sim_node", *remap, "-p", "seed:=12", "-p", "lockstep:=true", "-p", f"start_x:={start[0]}",
                           "-p", f"start_y:={start[1]}", "-p", f"start_theta:={heading}")
    action_cmd = node_command("action_node", *remap, "-p", "odom_topic:=odom")
    decisions = ros.node.create_publisher(Decision, "blocked/edge_spec/decision", RELIABLE)
    actions = ros.collect(NavActionMsg, "blocked/edge_spec/action", RELIABLE)
    poses = ros.collect(PoseStamped, "blocked/sim/pose", 10)
    diagnostics = ros.collect(DiagnosticArray, "/diagnostics")
    with process(sim_cmd, tmp_path / "sim.log"), process(action_cmd, tmp_path / "action.log") as action:
        wait_for(lambda: decisions.get_subscription_count() > 0 and len(poses) > 10, 30, "the sim and the action node")
        wait_for(lambda: stamp_ns(poses[-1].header.stamp) > NS, 30, "a second of simulated time")
        wait_for(lambda: odometry_fresh(diagnostics), 30, "fresh odometry at the action node")
        msg = Decision()
        msg.decision, msg.mode, msg.text = 14, "fsd", "Action: move forward 100 cm"
        decisions.publish(msg)
        wait_for(lambda: any(a.decision == 14 and a.status != NavActionMsg.STARTED for a in actions), 60,
                 lambda: "the end of the motion: " + (tmp_path / "action.log").read_text()[-2000:])
        end = next(a for a in actions if a.decision == 14 and a.status != NavActionMsg.STARTED)
        started = next(a for a in actions if a.decision == 14 and a.status == NavActionMsg.STARTED)
        assert action.poll() is None
    assert end.status == NavActionMsg.DONE and end.end_reason.startswith("blocked: 0.68"), end.end_reason
    assert end.travelled_m == pytest.approx(0.684, abs=0.01)
    took_s = (stamp_ns(end.header.stamp) - stamp_ns(started.header.stamp)) / NS
    assert 0.684 / 0.3 < took_s < 0.684 / 0.3 + 1.5 < 6.0, took_s  # a stall window after it stopped
    assert math.hypot(poses[-1].pose.position.x - bottle.x, poses[-1].pose.position.y - bottle.y) == pytest.approx(
        0.375, abs=0.01)  # robot radius 0.25 + half the bottle's 0.25 m width: touching it
