"""The evaluated task distribution: which room, which target, how many look-alikes.

``episode_world(seed, task)`` is the one place rooms come from: ``sim-eval`` draws its episodes with
it and ``sim_node`` builds its room with it from its ``seed``, ``target`` and ``distractors``
parameters, so a room the ROS loop runs is a room of the evaluated distribution. Training rooms come
from another range of seeds (``sim/samples.py``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from edge_spec_ros.sim.world import COLOURS_RGB, SHAPES, World

# Rooms of evaluation (and of sim_node) have seeds below TRAINING_ROOM_SEEDS[0]; training rooms are
# drawn from this range, so no evaluated room was trained on.
TRAINING_ROOM_SEEDS = (1 << 24, 1 << 31)


@dataclass(frozen=True)
class Task:
    """Which rooms: a target '<colour> <kind>' ('' : drawn per room, every colour and kind) and a
    number of look-alike distractors (0: drawn per room, 1-3)."""

    target: str = ""
    distractors: int = 0

    def __post_init__(self) -> None:
        if self.target:
            colour, _, kind = self.target.partition(" ")
            if colour not in COLOURS_RGB or kind not in SHAPES:
                raise ValueError(f"target must be '<colour> <kind>' with a colour of {sorted(COLOURS_RGB)} and a "
                                 f"kind of {sorted(SHAPES)}, got {self.target!r}")
        if not 0 <= self.distractors <= 3:
            raise ValueError(f"distractors must be 1-3 (0: drawn per room), got {self.distractors}")


def episode_world(seed: int, task: Task = Task()) -> tuple[World, str]:
    """The room of episode ``seed`` of ``task``; the target is its first object. ``sim_node`` builds its
    room with this function from its seed, target and distractors parameters."""
    if not 0 <= seed < TRAINING_ROOM_SEEDS[0]:
        raise ValueError(f"room seeds of evaluation are in [0, {TRAINING_ROOM_SEEDS[0]}), got {seed}: "
                         "the seeds above are training rooms")
    distractors = task.distractors or random.Random(seed).randint(1, 3)
    world = World.random(seed, task.target, distractors=distractors)
    return world, world.objects[0].name
