"""Samples of the simulated room: (camera image, instruction) → the expert's reasoning + action.

Sample ``i`` of a data seed is a pure function of (seed, i), so a batch never has to be stored and a
resumed run sees the same data. The image goes through the robot's image path (JPEG at the drafter's
quality, decoded), so the model trains on the frames it will be given. A sample's state is drawn from
a mix:

* ``path``: a state on the expert's own way to the target (the states a good policy visits);
* ``random``: a free pose anywhere, facing anywhere (where a model that strays ends up);
* ``lookalike``: on the way to a look-alike distractor, facing it (where a model that took the
  look-alike for the target ends up: close to it, the label says it is not the target);
* ``detour``: a state of an episode in which the expert's action is, with probability
  ``detour_noise``, replaced by a random one (overshoots, half-turns, approaches from odd angles);
* ``far`` (``far_fraction``, none by default): the target in view but far, ``far_min_m``-``far_max_m``
  from the robot, so a few pixels wide in the image (where a model that takes a small target for
  nothing in view keeps searching instead of walking to it);
* ``near`` (``near_fraction``, none by default): the target in view and close, ``NEAR_MIN_M``-``NEAR_MAX_M``
  from the robot to its surface (``near_target_pose``), where the expert's label is a short walk or a stop
  (where a model that overshoots ends up, and where the target fills much of the frame);
* ``synthetic`` (``synthetic_fraction``, none by default): not a room at all but the camera node's
  default frame (``camera/synthetic.py``) at one of the sizes and seeds it is drawn with, labelled with
  the expert's search reply (``synthetic_sample``), so a frame without a known room still gets a
  parseable answer.

``detour`` and ``far`` stand in for DAgger's on-policy data (states the model's own policy visits, labelled by
the expert) without a model in the loop, so sample i stays a pure function of (seed, i).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.models.corpus import INSTRUCTION_VERBS
from edge_spec_ros.models.prompt import decode_image, encode_image
from edge_spec_ros.sim.expert import SEARCH_DEG, expert_text, run_episode
from edge_spec_ros.sim.tasks import TRAINING_ROOM_SEEDS
from edge_spec_ros.sim.world import COLOURS_RGB, SHAPES, Pose, World

JPEG_QUALITY = 90  # the drafter node's jpeg_quality: frames travel as JPEG once per decision
FAR_MIN_M = 3.0  # centre to centre: from here a bottle (0.25 m) is under 14 px, half an image patch, wide
FAR_MAX_M = 6.0  # about the farthest a target can be in view in the 6 m room
FAR_MAX_BEARING_DEG = 30.0  # a far pose's target bearing: within the 70° field of view less 5° a side
NEAR_MIN_M = 0.3  # robot centre to the target's surface: a near pose's closest (the robot's radius is 0.2 m)
NEAR_MAX_M = 1.0  # its farthest: the expert's label is a walk of at most about 50 cm, or a stop
NEAR_MAX_BEARING_DEG = 30.0  # a near pose's target bearing: within the 70° field of view less 5° a side
POSE_TRIES = 100  # draws of a constrained pose before falling back to a random one
SYNTHETIC_SIZES = ((224, 168), (320, 240), (160, 120), (640, 480))  # (width, height): the camera node's
# default frame first, then other sizes its width/height parameters are commonly set to
SYNTHETIC_SEEDS = 8  # the synthetic frame's seeds drawn from (0: the camera node's; others swap the bottles)


@dataclass(frozen=True)
class SimSample:
    image: np.ndarray  # (H, W, 3) uint8 first-person frame, after the JPEG round trip
    instruction: str
    text: str  # the expert's "Reasoning: … Action: …"


@dataclass(frozen=True)
class SimDataConfig:
    seed: int = 0
    min_distractors: int = 1
    max_distractors: int = 3
    random_pose_fraction: float = 0.2
    lookalike_fraction: float = 0.25
    detour_fraction: float = 0.2  # the rest are states on the expert's way
    detour_noise: float = 0.3
    far_fraction: float = 0.0  # the target in view, far_min_m-far_max_m away (``far_target_pose``), out of
    # the expert's-way share; drawn before the others, so 0 leaves every sample as it was
    far_min_m: float = FAR_MIN_M
    far_max_m: float = FAR_MAX_M
    far_max_bearing_deg: float = FAR_MAX_BEARING_DEG  # 10 or less: the target ahead, every label a walk at it
    synthetic_fraction: float = 0.0  # the camera node's synthetic frame, not a room (``synthetic_sample``);
    # drawn before the others, so 0 leaves every sample as it was
    near_fraction: float = 0.0  # the target in view, NEAR_MIN_M-NEAR_MAX_M from its surface (``near_target_pose``),
    # out of the expert's-way share; drawn after the synthetic frame and before far, so 0 leaves every sample as it was
    jpeg_quality: int = JPEG_QUALITY  # 0: raw frames
    compare: bool = True  # the expert's reply compares the nearest object in view with the instruction
    # (``expert_text``); False: the earlier labels, the shipped pair's base stage

    def __post_init__(self) -> None:
        fractions = (self.random_pose_fraction, self.lookalike_fraction, self.detour_fraction, self.far_fraction,
                     self.synthetic_fraction, self.near_fraction, self.detour_noise)
        if min(fractions) < 0 or sum(fractions[:6]) > 1 or self.detour_noise > 1:
            raise ValueError(f"sample fractions must be >= 0 and sum to <= 1, got {self}")
        if not 0 < self.far_min_m < self.far_max_m:
            raise ValueError(f"far distances must satisfy 0 < far_min_m < far_max_m, got {self.far_min_m}, "
                             f"{self.far_max_m}")
        if not 0 <= self.far_max_bearing_deg <= FAR_MAX_BEARING_DEG:
            raise ValueError(f"far_max_bearing_deg must be in [0, {FAR_MAX_BEARING_DEG}] (the target in view), "
                             f"got {self.far_max_bearing_deg}")


def free(world: World, x: float, y: float, margin: float = 0.1) -> bool:
    c = world.config
    inside = c.robot_radius_m + margin <= x <= c.width_m - c.robot_radius_m - margin and \
        c.robot_radius_m + margin <= y <= c.depth_m - c.robot_radius_m - margin
    return inside and all(math.hypot(x - o.x, y - o.y) > c.robot_radius_m + o.size[0] / 2 + margin
                          for o in world.objects)


def random_pose(world: World, rng: random.Random) -> Pose:
    """A free pose anywhere in the room, facing anywhere."""
    c = world.config
    while True:
        x, y = rng.uniform(0.4, c.width_m - 0.4), rng.uniform(0.4, c.depth_m - 0.4)
        if free(world, x, y):
            return Pose(x, y, rng.uniform(-math.pi, math.pi))


def lookalike_pose(world: World, rng: random.Random) -> Pose:
    """A free pose 0.5-3.5 m from a look-alike distractor's surface, facing it within ±25°."""
    obj = rng.choice(world.objects[1:])
    for _ in range(100):
        distance = obj.size[0] / 2 + rng.uniform(0.5, 3.5)
        around = rng.uniform(-math.pi, math.pi)
        x, y = obj.x + distance * math.cos(around), obj.y + distance * math.sin(around)
        if free(world, x, y):
            return Pose(x, y, around + math.pi + rng.uniform(-math.radians(25), math.radians(25)))
    return random_pose(world, rng)


def far_in_view(world: World, target: str, min_m: float = FAR_MIN_M) -> bool:
    """The target's centre in the field of view and at least ``min_m`` from the robot: a far, small target."""
    distance, bearing = world.relative(world.target(target))
    return distance >= min_m and abs(bearing) < world.config.fov_rad / 2


def _facing_pose(world: World, obj, rng: random.Random, offset: float, min_m: float, max_m: float,
                 max_bearing_deg: float) -> Pose:
    """A free pose ``offset`` + [``min_m``, ``max_m``] from ``obj``'s centre, facing it to within
    ±``max_bearing_deg``; a random pose when none is found in POSE_TRIES draws."""
    half = math.radians(max_bearing_deg)
    for _ in range(POSE_TRIES):
        distance, around = offset + rng.uniform(min_m, max_m), rng.uniform(-math.pi, math.pi)
        x, y = obj.x + distance * math.cos(around), obj.y + distance * math.sin(around)
        if free(world, x, y):
            theta = around + math.pi + rng.uniform(-half, half)
            return Pose(x, y, math.atan2(math.sin(theta), math.cos(theta)))
    return random_pose(world, rng)


def far_target_pose(world: World, target: str, rng: random.Random, min_m: float = FAR_MIN_M,
                    max_m: float = FAR_MAX_M, max_bearing_deg: float = FAR_MAX_BEARING_DEG) -> Pose:
    """A free pose ``min_m``-``max_m`` from the target's centre with the target in view: its bearing
    uniform within ±``max_bearing_deg`` (inside the field of view, so the expert says turn towards it
    or walk at it, never search). Falls back to a random pose when none is found."""
    return _facing_pose(world, world.target(target), rng, 0.0, min_m, max_m, max_bearing_deg)


def near_target_pose(world: World, target: str, rng: random.Random, min_m: float = NEAR_MIN_M,
                     max_m: float = NEAR_MAX_M, max_bearing_deg: float = NEAR_MAX_BEARING_DEG) -> Pose:
    """A free pose ``min_m``-``max_m`` from the target's surface (robot centre to surface) with the target in
    view: its bearing uniform within ±``max_bearing_deg``, so the expert says a short walk, a turn towards it
    or stop, never search. Falls back to a random pose when none is found."""
    if not 0 < min_m < max_m:
        raise ValueError(f"near distances must satisfy 0 < min_m < max_m, got {min_m}, {max_m}")
    if not 0 <= max_bearing_deg <= NEAR_MAX_BEARING_DEG:
        raise ValueError(f"max_bearing_deg must be in [0, {NEAR_MAX_BEARING_DEG}], got {max_bearing_deg}")
    obj = world.target(target)
    return _facing_pose(world, obj, rng, obj.size[0] / 2, min_m, max_m, max_bearing_deg)


def detour_pose(world: World, target: str, rng: random.Random, noise: float) -> Pose:
    """A state of an episode where each of the expert's actions is, with probability ``noise``, a
    random move or turn instead."""

    def noisy(w: World, t: str) -> str:
        if rng.random() >= noise:
            return expert_text(w, t)
        if rng.random() < 0.5:
            return f"Action: move forward {rng.choice((25, 50, 75, 100))} cm"
        return f"Action: turn {rng.choice(('left', 'right'))} {rng.choice(range(15, 181, 15))} degrees"

    episode = run_episode(World(world.objects, world.pose, world.config), target, max_decisions=20,
                          keep_images=False, policy=noisy)
    return rng.choice(episode.poses)


def synthetic_text(target: str) -> str:
    """The reply for a frame that shows no known room: the expert's reply when nothing is in view, a search
    turn to the left. Not a stop: "I reached" would be a claim the frame cannot support, and a model taught
    to stop on unfamiliar frames learns to stop early in rooms too. Not a walk: forward into a scene it
    cannot place may hit something, a turn in place cannot. Not the objects the frame draws: they are not
    the simulation's objects, and naming their colours would teach colours from another renderer. The
    left turn is the one search the expert ever makes, so the model is never taught to guess a side."""
    return f"Reasoning: the {target} is not in view. Action: turn left {SEARCH_DEG} degrees"


def synthetic_sample(rng: random.Random, jpeg_quality: int = JPEG_QUALITY) -> SimSample:
    """The camera node's synthetic frame (a size of ``SYNTHETIC_SIZES``, a seed below ``SYNTHETIC_SEEDS``)
    with an instruction for a random object of the simulation and the search reply (``synthetic_text``)."""
    width, height = rng.choice(SYNTHETIC_SIZES)
    image = synthetic_camera_image(width, height, seed=rng.randrange(SYNTHETIC_SEEDS))
    if jpeg_quality:
        image = decode_image(encode_image(image, quality=jpeg_quality))
    target = f"{rng.choice(sorted(COLOURS_RGB))} {rng.choice(sorted(SHAPES))}"
    return SimSample(image, f"{rng.choice(INSTRUCTION_VERBS)} {target}", synthetic_text(target))


def sim_sample(config: SimDataConfig, index: int) -> SimSample:
    rng = random.Random(config.seed * 1_000_003 + index)
    world = World.random(rng.randrange(*TRAINING_ROOM_SEEDS),
                         distractors=rng.randint(config.min_distractors, config.max_distractors))
    target = world.objects[0].name
    draw = rng.random()
    if draw < config.synthetic_fraction:  # 0 by default: never taken, and the draw below is the one it was
        return synthetic_sample(rng, config.jpeg_quality)
    draw -= config.synthetic_fraction  # the kinds below keep their shares; the expert's way gives it up
    near = config.near_fraction  # 0 by default: never taken, and the thresholds below are the ones they were
    draw -= near
    far = config.far_fraction  # 0 by default: every threshold below is then the one it always was
    if draw < 0:
        world.pose = near_target_pose(world, target, rng)
    elif draw < far:
        world.pose = far_target_pose(world, target, rng, config.far_min_m, config.far_max_m,
                                     config.far_max_bearing_deg)
    elif draw < far + config.random_pose_fraction:
        world.pose = random_pose(world, rng)
    elif draw < far + config.random_pose_fraction + config.lookalike_fraction:
        world.pose = lookalike_pose(world, rng)
    elif draw < far + config.random_pose_fraction + config.lookalike_fraction + config.detour_fraction:
        world.pose = detour_pose(world, target, rng, config.detour_noise)
    else:
        episode = run_episode(World(world.objects, world.pose, world.config), target, keep_images=False)
        world.pose = episode.poses[rng.randrange(len(episode.steps))]
    image = world.render()
    if config.jpeg_quality:
        image = decode_image(encode_image(image, quality=config.jpeg_quality))
    return SimSample(image, f"{rng.choice(INSTRUCTION_VERBS)} {target}", expert_text(world, target, config.compare))
