"""The stack's life cycle: started and stopped repeatedly (SIGTERM and SIGINT mid-episode), it exits
0 every time with no exception from a thread still running during teardown, and the robot's last
command is zero."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from rosharness import process, wait_for

ROOT = Path(__file__).resolve().parents[2]
SYMPTOMS = ("Traceback", "never retrieved", "terminate called", "context is invalid", "Destroyable")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_start_and_stop_mid_episode(server_endpoint, tmp_path, signum):
    config = yaml.safe_load((ROOT / "config" / "go2_nav.yaml").read_text())
    config["bridge"]["ros__parameters"]["verifier_endpoint"] = server_endpoint
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "bringup", "--params", str(params), "--sim",
           "--instruction", "find the silver bottle", "--trajectory", ""]
    log = tmp_path / "bringup.log"
    with process(cmd, log) as proc:
        wait_for(lambda: "[action 1]" in log.read_text() or proc.poll() is not None, 120, "the first action")
        time.sleep(0.5)  # mid-motion
        proc.send_signal(signum)
        assert proc.wait(timeout=15) == 0, log.read_text()[-3000:]
    out = log.read_text()
    assert not [s for s in SYMPTOMS if s in out], out[-3000:]
    twists = [line for line in out.splitlines() if line.startswith("[cmd_vel]")]
    assert twists and twists[-1] == "[cmd_vel] linear.x=0.000 angular.z=0.000", out[-2000:]
