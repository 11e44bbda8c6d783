"""The simulated room: kinematics, walls, look-alike distractors, the camera and the goal test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge_spec_ros.sim.world import COLOURS_RGB, Pose, World, WorldObject


def test_random_rooms_have_the_target_and_look_alikes():
    """The target is there once; every distractor shares its colour or its kind; objects are apart."""
    for seed in range(20):
        world = World.random(seed, "silver bottle", distractors=3)
        names = [o.name for o in world.objects]
        assert names.count("silver bottle") == 1 and len(set(names)) == 4
        for o in world.objects[1:]:
            assert o.colour == "silver" or o.kind == "bottle"
        for a in world.objects:
            for b in world.objects:
                assert a is b or math.hypot(a.x - b.x, a.y - b.y) > 1.0
    assert World.random(3).objects == World.random(3).objects  # seeded
    with pytest.raises(KeyError, match="no 'gold ring'"):
        World.random(0).target("gold ring")


def test_unicycle_kinematics_and_walls():
    """Forward along the heading, turning in place, stopped by a wall, non-finite commands ignored."""
    world = World([], Pose(1.0, 1.0, 0.0))
    world.step(0.5, 0.0, 1.0)
    assert world.pose.x == pytest.approx(1.5) and world.pose.y == pytest.approx(1.0)
    world.step(0.0, math.pi / 2, 1.0)
    assert world.pose.theta == pytest.approx(math.pi / 2)
    world.step(0.5, 0.0, 2.0)
    assert world.pose.y == pytest.approx(2.0)
    for _ in range(100):
        world.step(1.0, 0.0, 0.1)
    assert world.pose.y <= world.config.depth_m - world.config.robot_radius_m
    before = world.pose
    world.step(float("nan"), 0.0, 0.1)
    assert world.pose == before


def test_objects_block_the_robot():
    world = World([WorldObject("red", "box", 2.0, 1.0)], Pose(1.0, 1.0, 0.0))
    for _ in range(50):
        world.step(0.5, 0.0, 0.1)
    assert world.pose.x < 2.0 - world.objects[0].size[0] / 2


def test_camera_sees_the_object_ahead_and_not_behind():
    """Facing the target its colour is at the image centre; facing away it is not in the image."""
    world = World([WorldObject("red", "box", 3.0, 2.0)], Pose(1.0, 2.0, 0.0))
    img = world.render()
    assert img.shape == (168, 224, 3) and img.dtype == np.uint8
    centre = img[:, 112]
    assert any(tuple(px) == COLOURS_RGB["red"] for px in centre)
    world.pose = Pose(1.0, 2.0, math.pi)
    assert not (world.render() == np.array(COLOURS_RGB["red"], np.uint8)).all(-1).any()
    world.pose = Pose(1.0, 2.0, math.radians(25))  # target 25° to the right: right half of the image
    cols = np.where((world.render() == np.array(COLOURS_RGB["red"], np.uint8)).all(-1).any(0))[0]
    assert cols.min() > 112


def test_reaching_the_target():
    world = World([WorldObject("silver", "bottle", 3.0, 2.0)], Pose(1.0, 2.0, 0.0))
    assert not world.reached("silver bottle")
    for _ in range(60):
        world.step(0.5, 0.0, 0.1)
    assert world.reached("silver bottle")
