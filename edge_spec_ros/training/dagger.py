"""DAgger for the simulated room (Ross et al., 2011): the states the model's own policy visits,
labelled by the expert.

A policy trained on the expert's states drifts into states the expert never visits (walking at a
look-alike, overshooting, facing a wall) and has no label for them; DAgger rolls the trained model
out in training rooms, keeps every state it visited, and trains on those states with the expert's
reply. The states are stored (``states.json``: room seed, distractors, pose, instruction verb, a few
kB), so a round's data are fixed once collected and a resumed run trains on the same data.

Departure: the paper aggregates every round's data and retrains from scratch; here each round
fine-tunes the current model on its new states mixed with fresh expert-mix samples (same effect on
this small problem, a fraction of the CPU time).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from edge_spec_ros.models.corpus import INSTRUCTION_VERBS
from edge_spec_ros.models.prompt import decode_image, encode_image
from edge_spec_ros.sim.expert import Policy, expert_text, run_episode
from edge_spec_ros.sim.samples import FAR_MIN_M, SimSample, far_in_view
from edge_spec_ros.sim.tasks import TRAINING_ROOM_SEEDS
from edge_spec_ros.sim.world import Pose, World

STATES_FILE = "states.json"


@dataclass(frozen=True)
class VisitedState:
    """A decision state of a rollout: the room (``World.random(room_seed, distractors=...)``, target its
    first object), the robot's pose, and the instruction verb it was given."""

    room_seed: int
    distractors: int
    x: float
    y: float
    theta: float
    verb: str
    final: bool = False  # the episode's last pose: where the policy stopped (or ran out of decisions)

    def world(self) -> tuple[World, str]:
        world = World.random(self.room_seed, distractors=self.distractors)
        world.pose = Pose(self.x, self.y, self.theta)
        return world, world.objects[0].name


def rollout_states(make_policy: Callable[[str], Policy], seed: int, rooms: int, max_decisions: int,
                   progress: Callable[[int, int], None] = lambda done, total: None) -> list[VisitedState]:
    """Roll the policy made by ``make_policy(verb)`` out in ``rooms`` training rooms of ``seed``; every
    decision state (and the final one) of every episode."""
    rng = random.Random(seed * 1_000_003 + 7)
    states: list[VisitedState] = []
    for i in range(rooms):
        room_seed, distractors = rng.randrange(*TRAINING_ROOM_SEEDS), rng.randint(1, 3)
        verb = rng.choice(INSTRUCTION_VERBS)
        world = World.random(room_seed, distractors=distractors)
        episode = run_episode(world, world.objects[0].name, max_decisions, keep_images=False,
                              policy=make_policy(verb))
        last = len(episode.poses) - 1
        states += [VisitedState(room_seed, distractors, p.x, p.y, p.theta, verb, final=j == last)
                   for j, p in enumerate(episode.poses)]
        progress(i + 1, rooms)
    return states


def save_states(states: list[VisitedState], directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / STATES_FILE).write_text(json.dumps([asdict(s) for s in states]) + "\n")


def load_states(directory: Path) -> list[VisitedState] | None:
    path = directory / STATES_FILE
    return [VisitedState(**s) for s in json.loads(path.read_text())] if path.is_file() else None


def far_states(states: Sequence[VisitedState], min_m: float = FAR_MIN_M) -> list[VisitedState]:
    """The visited states with the target in view at least ``min_m`` away (``far_in_view``): where a
    policy that takes a far, small target for nothing in view turns away from it."""
    if min_m <= 0:
        raise ValueError(f"min_m must be > 0, got {min_m}")
    return [s for s in states if far_in_view(*s.world(), min_m)]


def check_fractions(final_fraction: float, far_fraction: float, prefix: str = "") -> None:
    """ValueError unless the shares of a DAgger draw taken from final and from far states are >= 0 and
    sum to <= 1 (``prefix``: of the caller's option names)."""
    if not (0 <= final_fraction and 0 <= far_fraction and final_fraction + far_fraction <= 1):
        raise ValueError(f"{prefix}final_fraction and {prefix}far_fraction must be >= 0 and sum to <= 1, got "
                         f"{final_fraction}, {far_fraction}")


def dagger_sample(states: list[VisitedState], seed: int, index: int, jpeg_quality: int,
                  compare: bool = True, final_fraction: float = 0.0,
                  far: Sequence[VisitedState] = (), far_fraction: float = 0.0) -> SimSample:
    """Sample ``index``: a visited state drawn by (seed, index), rendered, labelled by the expert
    (``expert_text(..., compare)``). With probability ``final_fraction`` the state is drawn among the
    episodes' final states: where the policy stopped, right or wrong (a stop in front of a look-alike
    is one state of a whole episode, the one that decides it). With probability ``far_fraction`` it is
    drawn among ``far`` (``far_states`` of the same states: the target in view but far). With both
    fractions 0 (or their pools empty) every state is equally likely, and the draw is the one it
    always was."""
    check_fractions(final_fraction, far_fraction)
    rng = random.Random(seed * 1_000_003 + index)
    finals = [s for s in states if s.final] if final_fraction > 0 else []
    far = list(far) if far_fraction > 0 else []
    pool = states
    if finals or far:
        draw = rng.random()
        if finals and draw < final_fraction:
            pool = finals
        elif far and draw < final_fraction + far_fraction:
            pool = far
    state = pool[rng.randrange(len(pool))]
    world, target = state.world()
    image = world.render()
    if jpeg_quality:
        image = decode_image(encode_image(image, quality=jpeg_quality))
    return SimSample(image, f"{state.verb} {target}", expert_text(world, target, compare))
