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
    assert text == ("Reasoning: I see the blue bottle. the blue bottle is not the silver bottle. "
                    "the silver bottle is not in view. Action: turn left 45 degrees")


def test_nothing_in_view_names_nothing():
    world = _world(math.pi)
    world.pose = PlanarPose(1.0, 3.0, -math.pi / 2)  # facing the near wall
    assert seen_text(world) == ""
    assert expert_text(world, "silver bottle").startswith("Reasoning: the silver bottle is not in view.")


def test_the_nearest_object_in_view_is_compared_with_the_instruction_before_the_decision():
    world = _world()  # the blue bottle (bearing +) and the silver bottle (bearing −), both 2.06 m away
    world.objects[1] = WorldObject("blue", "bottle", 2.2, 3.4)  # now the blue bottle is the nearest in view
    text = expert_text(world, "silver bottle")
    assert text.startswith("Reasoning: I see the blue bottle and the silver bottle. "
                           "the blue bottle is not the silver bottle. the silver bottle is to the right.")
    assert text.endswith("Action: turn right 15 degrees")
    world.objects[1] = WorldObject("blue", "bottle", 3.0, 3.5)
    world.objects[0] = WorldObject("silver", "bottle", 1.8, 2.9)  # the target, 0.81 m away, ahead: reached
    assert expert_text(world, "silver bottle") == ("Reasoning: I see the blue bottle and the silver bottle. "
                                                   "the silver bottle is the target. I reached the silver bottle. "
                                                   "Action: stop")


def test_in_front_of_a_look_alike_the_reply_says_it_is_not_the_target():
    world = World([WorldObject("orange", "ball", 1.0, 5.5), WorldObject("silver", "ball", 1.8, 3.0)],
                  PlanarPose(1.0, 3.0, 0.0))  # 0.8 m from the silver ball, facing it; the orange one on the left, out of view
    text = expert_text(world, "orange ball")
    assert text == ("Reasoning: I see the silver ball. the silver ball is not the orange ball. "
                    "the orange ball is not in view. Action: turn left 45 degrees")
    assert parse_action(text, NavConfig()).action.kind != "stop"


def test_the_earlier_labels_stay_available_for_the_base_stage():
    world = _world(math.radians(-15))  # both bottles in view, the silver one nearly ahead
    earlier, now = expert_text(world, "silver bottle", compare=False), expert_text(world, "silver bottle")
    assert "is not the silver bottle" not in earlier and "The blue bottle is not the target." in earlier
    assert "The blue bottle is not the target." not in now
    assert parse_action(earlier, NavConfig()).action.kind == parse_action(now, NavConfig()).action.kind == "forward"
    assert earlier.split("Action:")[1] == now.split("Action:")[1]  # the same decision, other reasoning
