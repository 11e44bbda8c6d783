"""The robot's nodes composed in one process, as bringup composes them (``main_for``), with
go2_nav.yaml's parameters and a camera that replays one frame of simulated room 48 from a folder."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
import yaml

from edge_spec_ros.nav.motion import PlanarPose as Pose
from edge_spec_ros.sim.world import World

ROOT = Path(__file__).resolve().parents[2]
NODES = {"drafter": "drafter_node.DrafterNode", "bridge": "bridge_node.BridgeNode",
         "action": "action_node.ActionNode", "camera": "camera_node.CameraNode"}


def room_frame() -> np.ndarray:
    """The camera's frame (H, W, 3) RGB: simulated room 48, the robot facing the green box it has
    reached, the grey box about 2 m beyond it."""
    world = World.random(48, distractors=3)
    world.pose = Pose(2.91, 1.53, 1.74)
    return world.render()


def stack_params(tmp_path: Path, endpoint: str, ns: str = "", nodes: tuple[str, ...] = tuple(NODES),
                 **overrides: dict) -> Path:
    """A parameter file for ``nodes`` (names of ``NODES``) under namespace ``ns``: go2_nav.yaml's,
    the camera replaying ``room_frame()`` from a folder, the bridge on ``endpoint``, then
    ``overrides`` per node (``drafter={"mode": "fsd"}``)."""
    config = yaml.safe_load((ROOT / "config" / "go2_nav.yaml").read_text())
    frames = tmp_path / "frames"
    frames.mkdir()
    cv2.imwrite(str(frames / "room48.png"), cv2.cvtColor(room_frame(), cv2.COLOR_RGB2BGR))  # lossless
    params = {name: config[name]["ros__parameters"] for name in nodes}
    params["camera"].update(source=str(frames))
    params["bridge"].update(verifier_endpoint=endpoint)
    for name, values in overrides.items():
        params[name].update(values)
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump({f"/{ns}/{name}" if ns else name: {"ros__parameters": p}
                                    for name, p in params.items()}))
    return path


def stack_command(params: Path, ns: str = "", nodes: tuple[str, ...] = tuple(NODES)) -> list[str]:
    """The process running ``nodes`` until stopped, with the parameter file ``params``."""
    imports = "".join(f"from edge_spec_ros.nodes.{NODES[n].split('.')[0]} import {NODES[n].split('.')[1]}\n"
                      for n in nodes)
    script = ("import sys\nfrom edge_spec_ros.nodes.lifecycle import main_for\n" + imports
              + f"raise SystemExit(main_for({', '.join(NODES[n].split('.')[1] for n in nodes)}, args=sys.argv))\n")
    remap = ["-r", f"__ns:=/{ns}"] if ns else []
    return [sys.executable, "-c", script, "--ros-args", *remap, "--params-file", str(params)]
