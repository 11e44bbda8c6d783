"""The closed loop through ROS 2: the instruction on /instruction makes the simulated robot reach the
named object among look-alikes — sim_node, camera frames, drafter, bridge, a real verifier process,
action node and /cmd_vel, as `make demo` runs it."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from rosharness import process

ROOT = Path(__file__).resolve().parents[2]


def test_the_robot_reaches_the_silver_bottle(server_endpoint, tmp_path):
    config = yaml.safe_load((ROOT / "config" / "go2_nav.yaml").read_text())
    config["bridge"]["ros__parameters"]["verifier_endpoint"] = server_endpoint
    config["drafter"]["ros__parameters"].update(mode="sd", predraft_threads=2)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(config))
    picture = tmp_path / "trajectory.png"
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "bringup", "--params", str(params), "--sim",
           "--instruction", "find the silver bottle", "--duration", "150", "--trajectory", str(picture)]
    log = tmp_path / "bringup.log"
    with process(cmd, log) as proc:
        proc.wait(timeout=200)
    out = log.read_text()
    assert "[sim] the robot is at the target" in out, out[-4000:]
    assert "simulated robot reached the target" in out
    assert "[action" in out and "] stop " in out, out[-4000:]  # it also knows it has arrived
    assert picture.read_bytes()[:4] == b"\x89PNG"
