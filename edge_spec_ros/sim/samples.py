"""Samples of the simulated room: (camera image, instruction) → the expert's reasoning + action.

Sample ``i`` of a data seed is a pure function of (seed, i), so a batch never has to be stored and a
resumed run sees the same data. By default half of the samples are states on the expert's own way to
the target (the states a good policy visits); the other half are random poses, so that a model that
strays from the expert's way still has seen where it ends up (a one-shot substitute for DAgger's
on-policy data).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from edge_spec_ros.models.corpus import INSTRUCTION_VERBS
from edge_spec_ros.sim.expert import expert_text, run_episode
from edge_spec_ros.sim.world import Pose, World


@dataclass(frozen=True)
class SimSample:
    image: np.ndarray  # (H, W, 3) uint8 first-person frame
    instruction: str
    text: str  # the expert's "Reasoning: … Action: …"


@dataclass(frozen=True)
class SimDataConfig:
    seed: int = 0
    min_distractors: int = 1
    max_distractors: int = 3
    random_pose_fraction: float = 0.5


def random_pose(world: World, rng: random.Random) -> Pose:
    """A free pose anywhere in the room, facing anywhere."""
    c = world.config
    while True:
        x, y = rng.uniform(0.4, c.width_m - 0.4), rng.uniform(0.4, c.depth_m - 0.4)
        if all(math.hypot(x - o.x, y - o.y) > c.robot_radius_m + o.size[0] / 2 + 0.1 for o in world.objects):
            return Pose(x, y, rng.uniform(-math.pi, math.pi))


def sim_sample(config: SimDataConfig, index: int) -> SimSample:
    rng = random.Random(config.seed * 1_000_003 + index)
    world = World.random(rng.randrange(2**31), distractors=rng.randint(config.min_distractors, config.max_distractors))
    target = world.objects[0].name
    if rng.random() < config.random_pose_fraction:
        world.pose = random_pose(world, rng)
    else:
        episode = run_episode(World(world.objects, world.pose, world.config), target, keep_images=False)
        world.pose = episode.poses[rng.randrange(len(episode.steps))]
    return SimSample(world.render(), f"{rng.choice(INSTRUCTION_VERBS)} {target}", expert_text(world, target))
