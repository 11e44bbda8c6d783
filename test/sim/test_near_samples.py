"""The near-target samples: the target in view, 0.3-1.0 m from its surface, where the expert says a short
walk, a turn towards it or stop; off by default, so the mix the shipped pair was trained on is unchanged."""

from __future__ import annotations

import random

import pytest

from edge_spec_ros.nav import NavConfig, parse_action
from edge_spec_ros.sim.expert import expert_text
from edge_spec_ros.sim.samples import (NEAR_MAX_M, NEAR_MIN_M, SimDataConfig, near_target_pose, sim_sample)
from edge_spec_ros.sim.tasks import TRAINING_ROOM_SEEDS
from edge_spec_ros.sim.world import World

from mix_digest import DEFAULT_MIX_SHA256, mix_digest

SHORT_WALK_M = 0.5  # the longest walk the expert says from a near pose


def test_the_default_mix_is_unchanged_by_the_near_option():
    assert SimDataConfig().near_fraction == 0.0
    assert mix_digest(SimDataConfig(seed=3, near_fraction=0.0)) == DEFAULT_MIX_SHA256
    assert mix_digest(SimDataConfig(seed=3, near_fraction=0.3)) != DEFAULT_MIX_SHA256


def test_a_near_pose_has_the_target_close_and_in_view():
    rng = random.Random(0)
    for _ in range(50):
        world = World.random(rng.randrange(*TRAINING_ROOM_SEEDS), distractors=rng.randint(1, 3))
        target = world.objects[0].name
        world.pose = near_target_pose(world, target, rng)
        distance, bearing = world.relative(world.target(target))
        surface = distance - world.target(target).size[0] / 2
        assert NEAR_MIN_M <= surface <= NEAR_MAX_M
        assert abs(bearing) < world.config.fov_rad / 2
        text = expert_text(world, target)
        assert "not in view" not in text
        action = parse_action(text, NavConfig()).action
        assert action.kind in ("stop", "turn", "forward")
        if action.kind == "forward":
            assert action.distance_m <= SHORT_WALK_M + 1e-9


def test_near_samples_are_never_searches_and_often_stops():
    only_near = SimDataConfig(seed=5, random_pose_fraction=0, lookalike_fraction=0, detour_fraction=0,
                              near_fraction=1)
    texts = [sim_sample(only_near, i).text for i in range(30)]
    assert not any("not in view" in t for t in texts)
    assert sum(t.endswith("Action: stop") for t in texts) >= 10


def test_bad_near_options_are_refused():
    with pytest.raises(ValueError, match="sum to <= 1"):
        SimDataConfig(near_fraction=0.5)  # with the other fractions' 0.65
    with pytest.raises(ValueError, match="near distances"):
        near_target_pose(World.random(TRAINING_ROOM_SEEDS[0]), "x", random.Random(0), min_m=1.0, max_m=0.5)
