"""A scripted expert for the simulated room: what a good navigation model should say.

``expert_text`` looks at the world (not the image) and writes the reasoning + action the trained
model is meant to produce: first the objects in view, left to right ("I see the … and the …"), then
turn towards the target when it is off-centre, walk when it is ahead, stop when it is reached;
distractors are named as such. When the target is not in view the expert always
searches to the left: the side it is hidden on cannot be seen in the image, so a label that named it
would teach a model to guess, and a guessing model oscillates left-right. ``run_episode`` closes the loop
through the same action grammar and motion planner as the action node, so it checks that the sim,
the grammar and the planner can reach the target at all, and it generates training episodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from edge_spec_ros.nav import NavConfig, parse_action, plan_motion
from edge_spec_ros.sim.simulation import PHYSICS_DT_S, Simulation, execute
from edge_spec_ros.sim.world import Pose, World

ALIGN_RAD = math.radians(10)  # turn first when the target is further off-centre than this
MAX_STEP_CM = 100
STOP_M = 0.85  # centre to centre: inside World.reached's success distance, so a model that stops a
# step early or late still counts as arrived
SEARCH_DEG = 45  # < the 70° field of view, so consecutive search views overlap


def _in_view(world: World) -> list[tuple[float, float, str]]:
    """(bearing, distance, name) of the objects whose centre is in the field of view (and not under
    the robot)."""
    half_fov = world.config.fov_rad / 2
    return [(bearing, distance, o.name) for o in world.objects
            for distance, bearing in [world.relative(o)] if abs(bearing) < half_fov and distance > 0.15]


def seen_text(world: World) -> str:
    """'I see the A, the B and the C. ' for the objects whose centre is in the field of view, left to
    right ('' when none is): the reply names what the image shows before it compares it with the
    instruction, so the model learns to read colour and kind before it decides."""
    names = [f"the {name}" for _, _, name in sorted(_in_view(world), reverse=True)]
    if not names:
        return ""
    return "I see " + (", ".join(names[:-1]) + " and " if len(names) > 1 else "") + names[-1] + ". "


def compare_text(world: World, target: str) -> str:
    """The nearest object in view compared with the instruction, before the decision: 'the orange ball
    is the target. ' or 'the silver ball is not the orange ball. ' ('' when nothing is in view). The
    nearest object is the one a stop would be about, so the reply states whether it is the target
    right after naming it, and the decision follows from that statement."""
    seen = _in_view(world)
    if not seen:
        return ""
    nearest = min(seen, key=lambda s: s[1])[2]
    return f"the {target} is the target. " if nearest == target else f"the {nearest} is not the {target}. "


def expert_text(world: World, target: str, compare: bool = True) -> str:
    """'Reasoning: … Action: …' for the current pose: what is in view (``seen_text``), the nearest object
    in view compared with the instruction (``compare_text``), then where the target is and the action.

    ``compare=False``: the earlier labels (no comparison; a look-alike in view while the target is
    off-centre or ahead is named after the target's position: "The blue bottle is not the target."),
    which the base stage of the shipped pair is trained on."""
    obj = world.target(target)
    distance, bearing = world.relative(obj)
    seen = seen_text(world) + (compare_text(world, target) if compare else "")
    if distance <= STOP_M and abs(bearing) < world.config.fov_rad / 2:
        return f"Reasoning: {seen}I reached the {target}. Action: stop"
    side = "left" if bearing > 0 else "right"
    if abs(bearing) > world.config.fov_rad / 2:
        return f"Reasoning: {seen}the {target} is not in view. Action: turn left {SEARCH_DEG} degrees"
    half_fov = world.config.fov_rad / 2
    others = [o.name for o in world.objects if o.name != target and abs(world.relative(o)[1]) < half_fov]
    note = f" The {others[0]} is not the target." if others and not compare else ""
    if abs(bearing) > ALIGN_RAD:
        degrees = max(5, min(90, int(round(math.degrees(abs(bearing)) / 5) * 5)))
        return f"Reasoning: {seen}the {target} is to the {side}.{note} Action: turn {side} {degrees} degrees"
    gap = distance - STOP_M + 0.1
    cm = max(25, min(MAX_STEP_CM, int(round(gap * 100 / 25)) * 25))
    return f"Reasoning: {seen}the {target} is ahead.{note} Action: move forward {cm} cm"


@dataclass
class Episode:
    target: str
    steps: list[tuple[np.ndarray, str]] = field(default_factory=list)  # (image, expert text) per decision
    poses: list[Pose] = field(default_factory=list)  # the pose at each decision, then the final pose
    reached: bool = False


Policy = Callable[[World, str], str]  # (world, target name) → "Reasoning: … Action: …"


def run_episode(world: World, target: str, max_decisions: int = 30, nav: NavConfig | None = None,
                dt: float = PHYSICS_DT_S, keep_images: bool = True, policy: Policy = expert_text) -> Episode:
    """Decide with ``policy`` (default: the expert), execute with the action node's grammar and
    planner in simulated time (``sim_node``'s physics step ``dt``), until it says stop or
    ``max_decisions``; text without an action ends the episode, as the action node would stop the robot."""
    nav = nav or NavConfig()
    episode = Episode(target)
    sim = Simulation(world, dt, cmd_timeout_s=1.0)
    for _ in range(max_decisions):
        text = policy(world, target)
        episode.poses.append(world.pose)
        episode.steps.append((world.render() if keep_images else np.zeros(0, np.uint8), text))
        action = parse_action(text, nav).action
        if action is None or action.kind == "stop":
            break
        execute(sim, plan_motion(action, nav))
    episode.poses.append(world.pose)
    episode.reached = world.reached(target)
    return episode


def write_episode_bag(episode: Episode, path, rate_hz: float = 1.0):
    """One episode as a rosbag2: per decision a camera frame, then the expert's text as a Decision,
    after the instruction — the data a navigation model is trained and replayed on."""
    import time

    from edge_spec_ros.bags import BagWriter

    with BagWriter(path) as bag:
        String, Decision = bag.store.types["std_msgs/msg/String"], bag.store.types["edge_spec_ros/msg/Decision"]
        t0 = time.time_ns()
        instruction = f"find the {episode.target}"
        bag.write_message("/instruction", String(data=instruction), t0)
        for i, (rgb, text) in enumerate(episode.steps):
            ns = t0 + int((i + 0.5) / rate_hz * 1e9)
            bag.write_image("/camera/image_raw", rgb, ns)
            bag.write_message("/edge_spec/decision", Decision(header=bag.header(ns), decision=i + 1,
                                                              instruction=instruction, mode="expert", text=text),
                              ns + 1000)
