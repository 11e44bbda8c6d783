"""The expert's reply names what is in view, left to right, before it compares it with the
instruction: the label that teaches the model to read colour and kind before it decides."""

from __future__ import annotations

import math

from edge_spec_ros.nav import NavConfig, parse_action
from edge_spec_ros.nav.motion import PlanarPose
from edge_spec_ros.sim.expert import expert_text, seen_text
from edge_spec_ros.sim.world import World, WorldObject


def _world(theta: float = 0.0) -> World:
    objects = [WorldObject("silver", "bottle", 3.0, 2.5), WorldObject("blue", "bottle", 3.0, 3.5),
               WorldObject("silver", "box", 0.5, 5.5)]
    return World(objects, PlanarPose(1.0, 3.0, theta))


def test_seen_objects_are_named_left_to_right():
    world = _world()
    assert seen_text(world) == "I see the blue bottle and the silver bottle. "  # the box is behind, out of view
    text = expert_text(world, "silver bottle")
    assert text.startswith("Reasoning: I see the blue bottle and the silver bottle. the silver bottle is ")
    assert parse_action(text, NavConfig()).action is not None


def test_a_look_alike_in_view_is_named_when_the_target_is_not():
    world = _world()
    world.pose = PlanarPose(1.0, 3.0, math.radians(40))  # the blue bottle on the right, the silver one out of view
    text = expert_text(world, "silver bottle")
    assert text == "Reasoning: I see the blue bottle. the silver bottle is not in view. Action: turn left 45 degrees"


def test_nothing_in_view_names_nothing():
    world = _world(math.pi)
    world.pose = PlanarPose(1.0, 3.0, -math.pi / 2)  # facing the near wall
    assert seen_text(world) == ""
    assert expert_text(world, "silver bottle").startswith("Reasoning: the silver bottle is not in view.")
