"""Simulated time: motion is integrated per fixed step of simulated time, odometry starts at the
origin and reports the achieved velocity, an old command stops the robot."""

from __future__ import annotations

import math

import pytest

from edge_spec_ros.sim.simulation import Simulation, odom_pose
from edge_spec_ros.sim.world import Pose, World, WorldObject

DT = 0.02


def empty_room(pose: Pose = Pose(1.0, 1.0, 0.0)) -> World:
    return World([WorldObject("red", "box", 5.5, 5.5)], pose)


def test_a_command_covers_speed_times_simulated_time():
    sim = Simulation(empty_room(), DT, cmd_timeout_s=0.5)
    for _ in range(50):  # 1 s of simulated time at 0.3 m/s, the command renewed every tick
        sim.command(0.3, 0.0)
        odom = sim.tick()
    assert sim.time_ns == 1_000_000_000 and sim.ticks == 50
    assert odom.pose.x == pytest.approx(0.3, abs=1e-9) and odom.pose.y == pytest.approx(0.0, abs=1e-9)
    assert odom.linear_x == pytest.approx(0.3) and odom.angular_z == pytest.approx(0.0)
    assert sim.world.pose.x == pytest.approx(1.3)


def test_odometry_is_in_the_start_frame_and_turns_count():
    sim = Simulation(empty_room(Pose(2.0, 3.0, math.pi / 2)), DT, cmd_timeout_s=0.5)
    sim.command(0.0, 0.5)
    for _ in range(25):
        odom = sim.tick()
    assert odom.pose.theta == pytest.approx(0.25) and odom.angular_z == pytest.approx(0.5)
    assert sim.world.pose.theta == pytest.approx(math.pi / 2 + 0.25)
    ahead = odom_pose(Pose(2.0, 3.0, math.pi / 2), Pose(2.0, 4.0, math.pi / 2))  # 1 m along the start heading
    assert (ahead.x, ahead.y, ahead.theta) == pytest.approx((1.0, 0.0, 0.0), abs=1e-12)


def test_a_command_older_than_the_timeout_stops_the_robot():
    sim = Simulation(empty_room(), DT, cmd_timeout_s=0.1)
    sim.command(0.3, 0.0)
    for _ in range(20):
        sim.tick()
    assert sim.world.pose.x == pytest.approx(1.0 + 0.3 * 0.1)  # 5 ticks, then the command expired
    assert sim.odometry.linear_x == 0.0
    sim.command(float("nan"), 1.0)  # a non-finite command is a stop
    sim.tick()
    assert sim.cmd == (0.0, 0.0)


def test_blocked_motion_reports_zero_velocity():
    sim = Simulation(empty_room(Pose(0.25, 1.0, math.pi)), DT, cmd_timeout_s=0.5)  # at the wall
    sim.command(0.3, 0.0)
    odom = sim.tick()
    assert odom.linear_x == 0.0 and sim.world.pose.x == 0.25


def test_bad_steps_are_refused():
    with pytest.raises(ValueError, match="dt_s"):
        Simulation(empty_room(), 0.0, 0.5)
