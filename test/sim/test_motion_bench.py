"""sim-motion-bench's arithmetic and report, without processes: travelled distance and angle from two
odometry messages, the error, the odometry mode's bound, the table and the CLI's options.

The bench itself (sim_node and action_node processes, idle and with two busy loops) runs in a slow
test of test/nodes/test_sim_node.py (test_the_motion_bench_drives_decisions_through_the_action_node_...).
"""

from __future__ import annotations

import math
import os

import pytest
from nav_msgs.msg import Odometry

from edge_spec_ros.cli import build_parser
from edge_spec_ros.sim_motion_bench import (
    BenchResult, Sample, cpu_seconds, cpu_table, motions, table, travelled,
)


def odom(x: float, y: float, theta: float) -> Odometry:
    msg = Odometry()
    msg.pose.pose.position.x, msg.pose.pose.position.y = x, y
    msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(theta / 2), math.cos(theta / 2)
    return msg


def sample(mode: str, load: str, kind: str, commanded: float, travelled_: float, status: str = "DONE") -> Sample:
    return Sample(mode, load, kind, "move forward 100 cm" if kind == "forward" else "turn left 45 degrees",
                  commanded, travelled_, travelled_ if mode == "odometry" else None, status,
                  "reached" if mode == "odometry" else "duration", 1.0)


def test_travelled_is_along_the_start_heading_and_turns_are_signed():
    start = odom(0.6, 2.5, math.pi / 2)
    assert travelled("forward", start, odom(0.6, 3.5, math.pi / 2)) == pytest.approx(1.0)
    assert travelled("forward", start, odom(0.7, 1.5, math.pi / 2)) == pytest.approx(-1.0)  # sideways slip ignored
    assert travelled("turn", start, odom(0.6, 2.5, math.pi / 2 + math.radians(45))) == pytest.approx(math.radians(45))
    assert travelled("turn", odom(0, 0, 3.0), odom(0, 0, -3.0)) == pytest.approx(2 * math.pi - 6.0)  # across ±π


def test_one_repetition_goes_and_comes_back():
    assert motions(1.0, 45.0) == [("forward", "move forward 100 cm", 1.0), ("forward", "move backward 100 cm", -1.0),
                                  ("turn", "turn left 45 degrees", math.radians(45)),
                                  ("turn", "turn right 45 degrees", -math.radians(45))]


def test_the_odometry_mode_is_held_to_its_bound_and_the_timed_mode_only_reported():
    result = BenchResult([sample("odometry", "idle", "forward", 1.0, 1.0),
                          sample("odometry", "2 busy loops", "forward", -1.0, -1.015),
                          sample("odometry", "2 busy loops", "turn", math.radians(45), math.radians(45.5)),
                          sample("timed", "2 busy loops", "turn", math.radians(45), math.radians(48))])
    assert result.samples[1].error_pct == pytest.approx(1.5)
    assert result.worst("odometry", "2 busy loops", "turn").error_pct == pytest.approx(100 * 0.5 / 45)
    assert result.failures(2.0) == []  # the timed mode's 6.7 % is reported, not held to the bound
    assert len(result.failures(1.0)) == 2
    result.samples.append(sample("odometry", "idle", "turn", math.radians(45), math.radians(10), "CANCELLED"))
    assert any("CANCELLED" in f for f in result.failures(2.0))
    assert BenchResult().failures() == ["no odometry-mode motion was measured"]


def test_the_table_has_one_row_per_mode_load_and_motion():
    result = BenchResult([sample("timed", "idle", "turn", math.radians(45), math.radians(46.75)),
                          sample("odometry", "idle", "forward", 1.0, 1.0),
                          sample("odometry", "idle", "forward", -1.0, -1.002)],
                         {"idle, action_node (odometry mode)": 0.05}, ["drafter + bridge + action skipped"])
    rows = table(result).splitlines()
    assert len(rows) == 4 and rows[0].startswith("| mode | load | motion |")
    assert rows[2].startswith("| odometry | idle | move | ±1.000 m | +1.000, -1.002 m | +1.000, -1.002 m | +0.20 % |")
    assert rows[3].startswith("| timed | idle | turn | ±45.00° | +46.75° | - | +3.89 % |")
    assert cpu_table(result) == ("idle CPU: idle, action_node (odometry mode): 0.050 cores\n"
                                 "drafter + bridge + action skipped")


def test_cpu_seconds_reads_this_process():
    t = os.times()
    assert cpu_seconds(os.getpid()) == pytest.approx(t.user + t.system, abs=0.1)


def test_the_cli_defaults_are_the_target_conditions():
    args = build_parser().parse_args(["sim-motion-bench"])
    assert (args.repeats, args.busy, args.metres, args.degrees, args.max_error_pct) == (3, 2, 1.0, 45.0, 2.0)
    assert args.cpu_s == 10.0 and not args.no_stack
