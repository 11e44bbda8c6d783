"""The far-target samples: the target in view, far and small in the image, labelled by the expert; off
by default, so the mix the shipped pair was trained on is unchanged."""

from __future__ import annotations

import math
import random

import pytest

from edge_spec_ros.nav import NavConfig, parse_action
from edge_spec_ros.nav.motion import PlanarPose
from edge_spec_ros.sim.expert import expert_text
from edge_spec_ros.sim.samples import FAR_MAX_M, FAR_MIN_M, SimDataConfig, far_in_view, far_target_pose, sim_sample
from edge_spec_ros.sim.tasks import TRAINING_ROOM_SEEDS
from edge_spec_ros.sim.world import World, WorldObject

from mix_digest import DEFAULT_MIX_SHA256, mix_digest


def test_the_default_mix_is_the_one_the_shipped_pair_saw():
    assert SimDataConfig().far_fraction == 0.0
    assert mix_digest(SimDataConfig(seed=3)) == DEFAULT_MIX_SHA256
    assert mix_digest(SimDataConfig(seed=3, far_fraction=0.3)) != DEFAULT_MIX_SHA256


def test_a_far_pose_has_the_target_in_view_between_the_far_distances():
    rng = random.Random(0)
    for _ in range(50):
        world = World.random(rng.randrange(*TRAINING_ROOM_SEEDS), distractors=rng.randint(1, 3))
        target = world.objects[0].name
        world.pose = far_target_pose(world, target, rng)
        distance, _ = world.relative(world.target(target))
        assert FAR_MIN_M <= distance <= FAR_MAX_M and far_in_view(world, target)
        text = expert_text(world, target)
        assert "not in view" not in text and "reached" not in text  # a turn towards it or a walk at it
        assert parse_action(text, NavConfig()).action.kind in ("turn", "forward")


def test_far_samples_ahead_are_all_walks():
    ahead = SimDataConfig(seed=6, random_pose_fraction=0, lookalike_fraction=0, detour_fraction=0, far_fraction=1,
                          far_max_bearing_deg=10.0)
    actions = [parse_action(sim_sample(ahead, i).text, NavConfig()).action for i in range(20)]
    assert all(a.kind == "forward" for a in actions)
    with pytest.raises(ValueError, match="far_max_bearing_deg"):
        SimDataConfig(far_max_bearing_deg=40.0)  # out of view


def test_far_samples_are_drawn_at_the_far_fraction():
    only_far = SimDataConfig(seed=5, random_pose_fraction=0, lookalike_fraction=0, detour_fraction=0, far_fraction=1)
    texts = [sim_sample(only_far, i).text for i in range(30)]
    assert not any("not in view" in t or "reached" in t for t in texts)  # never a search, never a stop
    default = [sim_sample(SimDataConfig(seed=5), i).text for i in range(30)]
    assert sum("not in view" in t for t in default) > 0  # the default mix does search


def test_far_in_view_needs_the_target_both_far_and_in_view():
    world = World([WorldObject("silver", "bottle", 5.0, 3.0), WorldObject("blue", "bottle", 5.0, 4.5)],
                  PlanarPose(1.0, 3.0, 0.0))  # 4 m away, facing it
    assert far_in_view(world, "silver bottle") and not far_in_view(world, "silver bottle", min_m=4.5)
    world.pose = PlanarPose(1.0, 3.0, math.pi)  # 4 m away, its back to it
    assert not far_in_view(world, "silver bottle")
    world.pose = PlanarPose(3.0, 3.0, 0.0)  # 2 m away, facing it
    assert not far_in_view(world, "silver bottle")


def test_bad_far_options_are_refused():
    with pytest.raises(ValueError, match="sum to <= 1"):
        SimDataConfig(far_fraction=0.5)  # with the other fractions' 0.65
    with pytest.raises(ValueError, match="far_min_m < far_max_m"):
        SimDataConfig(far_min_m=4.0, far_max_m=3.0)
