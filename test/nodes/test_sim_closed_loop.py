"""The closed loop through ROS 2: the instruction on /instruction makes the simulated robot reach the
named object among look-alikes — sim_node, camera frames, drafter, bridge, a real verifier process,
action node and /cmd_vel, as `make demo` runs it — and the ROS loop is the evaluated loop: in rooms of
the evaluated distribution it takes exactly the decisions `sim-eval` takes in-process."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from edge_spec_ros.bench.demo_runs import parse_run
from edge_spec_ros.models.embedded import embedded_pair
from edge_spec_ros.sim.closed_loop import ModelPolicy, evaluate
from edge_spec_ros.sim.tasks import Task, episode_world
from rosharness import process

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (0, 1, 2)
# not anchored to line ends: another process's log line may land on the same line of the shared log
DECISION = re.compile(r"\[decision \d+ \w[\w-]*\] '([^']*)'")


def bringup(endpoint: str, tmp_path: Path, instruction: str, sim: dict | None = None, name: str = "run") -> str:
    """Run `edge-spec-ros bringup --sim` with the demo's YAML (sim parameters overridden); its output."""
    config = yaml.safe_load((ROOT / "config" / "go2_nav.yaml").read_text())
    config["bridge"]["ros__parameters"]["verifier_endpoint"] = endpoint
    config["drafter"]["ros__parameters"].update(mode="sd", predraft_threads=2)
    config["sim"]["ros__parameters"].update(sim or {})
    params = tmp_path / f"{name}.yaml"
    params.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "bringup", "--params", str(params), "--sim",
           "--instruction", instruction, "--timeout", "400", "--trajectory", str(tmp_path / f"{name}.png")]
    log = tmp_path / f"{name}.log"
    with process(cmd, log) as proc:
        proc.wait(timeout=450)
    return log.read_text()


def test_the_robot_reaches_the_silver_bottle(server_endpoint, tmp_path):
    out = bringup(server_endpoint, tmp_path, "find the silver bottle")
    assert "[sim] the robot is at the target" in out, out[-4000:]
    assert "simulated robot reached the target" in out
    assert "[action" in out and "] stop " in out, out[-4000:]  # it also knows it has arrived
    run = parse_run(out, "sd", 0, 0.0)  # every motion ends as planned (the bottle in the way: "blocked"), none
    assert len(run.endings) >= run.decisions - 1 and not run.unplanned, run.endings  # by the watchdog
    assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_ros_and_in_process_loops_take_the_same_decisions(server_endpoint, tmp_path):
    """K rooms of sim-eval's distribution: the texts the drafter publishes through ROS (sim time, JPEG
    frames, the action node executing) equal the in-process loop's, decision for decision, and both
    end in the same state."""
    pair = embedded_pair()
    policy = ModelPolicy(pair.verifier, pair.prompt_encoder())
    for seed in SEEDS:
        texts: list[str] = []

        def record(summary, episode, world, texts=texts):
            texts += [t for _, t in episode.steps]

        in_process = evaluate(policy, [seed], on_episode=record).episodes[0]
        target = episode_world(seed, Task())[1]
        out = bringup(server_endpoint, tmp_path, f"find the {target}", {"seed": seed, "target": "", "distractors": 0},
                      name=f"room{seed}")
        assert DECISION.findall(out) == texts, (seed, texts, "\n".join(l for l in out.splitlines()
                                                                      if not l.startswith("[cmd_vel]"))[-5000:])
        reached = "simulated robot reached the target" in out
        assert reached == in_process.reached, (seed, out[-2000:])
