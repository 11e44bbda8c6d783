"""NavConfig validation and NavAction → MotionPlan with the safety limits (edge_spec_ros/nav/planner.py)."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.grammar import NavAction, parse_action
from edge_spec_ros.nav.planner import MotionPlan, plan_motion, zero_plan

CONFIG = NavConfig()
ROOMY = NavConfig(max_duration_s=30.0)  # isolates the distance/angle/speed clamps from the duration clamp


def limited(plan: MotionPlan, config: NavConfig) -> bool:
    """Finite and within the config's limits."""
    return (all(math.isfinite(v) for v in (plan.linear_x, plan.angular_z, plan.duration_s))
            and abs(plan.linear_x) <= config.max_linear_speed
            and abs(plan.angular_z) <= config.max_angular_speed
            and 0 <= plan.duration_s <= config.max_duration_s)


def names(plan: MotionPlan) -> set[str]:
    """The limit names the plan's reasons start with."""
    return {reason.split(":", 1)[0] for reason in plan.reasons}


def bypass(action: NavAction, **values: float) -> NavAction:
    """An action with values its constructor would reject (what a buggy caller could hand over)."""
    for name, value in values.items():
        object.__setattr__(action, name, value)
    return action


# --- NavConfig ---------------------------------------------------------------------------------------

def test_config_defaults():
    """The defaults are the documented magnitudes and limits, in SI units (angles in radians)."""
    c = NavConfig()
    assert (c.forward_small_m, c.forward_medium_m, c.forward_large_m) == (0.25, 0.5, 1.0)
    assert (c.turn_small_rad, c.turn_medium_rad, c.turn_large_rad) == pytest.approx(
        (math.radians(15), math.radians(30), math.radians(60)))
    assert (c.cruise_linear_speed, c.cruise_angular_speed) == (0.3, 0.6)
    assert (c.max_linear_speed, c.max_angular_speed, c.max_duration_s, c.max_distance_m) == (0.5, 1.0, 5.0, 2.0)
    assert c.max_angle_rad == math.pi and c.watchdog_timeout_s == 6.0 > c.max_duration_s
    assert c.forward_distance("medium") == 0.5 and c.turn_angle("large") == pytest.approx(math.radians(60))


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(NavConfig)])
@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, -math.inf, "1", None, True])
def test_config_rejects_bad_values(field, value):
    """Every field must be a finite number > 0; the error names the field."""
    with pytest.raises(ValueError, match=f"NavConfig.{field}"):
        NavConfig(**{field: value})


def test_config_rejects_inconsistent_values():
    """Sizes must grow small → large and the sanity bounds must not be below the safety limits."""
    with pytest.raises(ValueError, match="small <= medium <= large"):
        NavConfig(forward_small_m=2.0)
    with pytest.raises(ValueError, match="small <= medium <= large"):
        NavConfig(turn_large_rad=0.1)
    with pytest.raises(ValueError, match="absurd_distance_m"):
        NavConfig(absurd_distance_m=1.0)
    with pytest.raises(ValueError, match="absurd_angle_rad"):
        NavConfig(absurd_angle_rad=3.0)
    with pytest.raises(ValueError, match="unknown size"):
        CONFIG.forward_distance("huge")


def test_config_is_frozen():
    """NavConfig is immutable."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        CONFIG.max_linear_speed = 10.0  # type: ignore[misc]


# --- plans within the limits -------------------------------------------------------------------------

def test_stop_is_zero_plan():
    """A stop is zero velocities for zero seconds, not clamped."""
    plan = plan_motion(NavAction("stop"), CONFIG)
    assert plan == MotionPlan(0.0, 0.0, 0.0, False, ()) and plan.is_stop


@pytest.mark.parametrize("metres", [0.25, 0.5, 1.0, -0.25, -1.0, 1.4])
def test_forward_plan(metres):
    """A move drives at ±cruise speed for |distance| / speed seconds, covering the distance."""
    plan = plan_motion(NavAction("forward", distance_m=metres), CONFIG)
    assert plan.linear_x == math.copysign(0.3, metres) and plan.angular_z == 0.0
    assert plan.duration_s == pytest.approx(abs(metres) / 0.3)
    assert plan.linear_x * plan.duration_s == pytest.approx(metres)
    assert not plan.clamped and plan.reasons == ()


@pytest.mark.parametrize("radians", [math.radians(15), math.radians(60), -math.radians(30), -2.5])
def test_turn_plan(radians):
    """A turn rotates at ±cruise angular speed, left positive, for |angle| / speed seconds."""
    plan = plan_motion(NavAction("turn", angle_rad=radians), CONFIG)
    assert plan.angular_z == math.copysign(0.6, radians) and plan.linear_x == 0.0
    assert plan.angular_z * plan.duration_s == pytest.approx(radians)
    assert not plan.clamped


def test_word_actions_end_to_end():
    """Parsed word actions give the expected signs: backward and right negative."""
    def plan(text: str) -> MotionPlan:
        return plan_motion(parse_action(f"Action: {text}", CONFIG).action, CONFIG)
    assert plan("move backward small").linear_x < 0 < plan("move forward small").linear_x
    assert plan("turn right small").angular_z < 0 < plan("turn left small").angular_z
    assert plan("move forward large").duration_s == pytest.approx(1.0 / 0.3)


@pytest.mark.parametrize("kind", ["forward", "turn"])
def test_zero_magnitude_is_zero_plan(kind):
    """A zero distance or angle is a stop, not a zero-length motion."""
    plan = plan_motion(NavAction(kind), CONFIG)
    assert plan == zero_plan() and plan.is_stop


# --- clamping ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("metres", [10.0, -10.0, 2.0001])
def test_distance_clamped(metres):
    """|distance| > max_distance_m is clamped to it, keeping the sign, with a max_distance_m reason."""
    plan = plan_motion(NavAction("forward", distance_m=metres), ROOMY)
    assert plan.clamped and names(plan) == {"max_distance_m"}
    assert plan.linear_x * plan.duration_s == pytest.approx(math.copysign(2.0, metres))


def test_distance_at_limit_not_clamped():
    """Exactly max_distance_m is not a clamp."""
    plan = plan_motion(NavAction("forward", distance_m=2.0), ROOMY)
    assert not plan.clamped and plan.duration_s == pytest.approx(2.0 / 0.3)


@pytest.mark.parametrize("radians", [4.0, -7.0])
def test_angle_clamped(radians):
    """|angle| > max_angle_rad is clamped to it, keeping the sign, with a max_angle_rad reason."""
    plan = plan_motion(NavAction("turn", angle_rad=radians), ROOMY)
    assert plan.clamped and names(plan) == {"max_angle_rad"}
    assert plan.angular_z * plan.duration_s == pytest.approx(math.copysign(math.pi, radians))


def test_linear_speed_clamped():
    """A cruise speed above max_linear_speed is clamped to it, with a max_linear_speed reason."""
    config = NavConfig(cruise_linear_speed=0.8, max_linear_speed=0.5)
    plan = plan_motion(NavAction("forward", distance_m=-1.0), config)
    assert plan.linear_x == -0.5 and plan.duration_s == pytest.approx(2.0)
    assert plan.clamped and names(plan) == {"max_linear_speed"}


def test_angular_speed_clamped():
    """A cruise angular speed above max_angular_speed is clamped to it, with a reason."""
    config = NavConfig(cruise_angular_speed=2.0, max_angular_speed=1.0)
    plan = plan_motion(NavAction("turn", angle_rad=1.0), config)
    assert plan.angular_z == 1.0 and plan.duration_s == pytest.approx(1.0)
    assert plan.clamped and names(plan) == {"max_angular_speed"}


def test_duration_clamped():
    """A motion longer than max_duration_s is cut to it, with a max_duration_s reason."""
    plan = plan_motion(NavAction("forward", distance_m=1.8), CONFIG)  # 6 s at 0.3 m/s
    assert plan.duration_s == 5.0 and plan.linear_x == 0.3
    assert plan.clamped and names(plan) == {"max_duration_s"}
    turn = plan_motion(NavAction("turn", angle_rad=-math.pi), CONFIG)  # 5.24 s at 0.6 rad/s
    assert turn.duration_s == 5.0 and names(turn) == {"max_duration_s"}


def test_all_clamps_together():
    """Distance, speed and duration limits can all apply at once, each with its reason."""
    config = NavConfig(cruise_linear_speed=1.0, max_linear_speed=0.2)
    plan = plan_motion(NavAction("forward", distance_m=50.0), config)
    assert names(plan) == {"max_distance_m", "max_linear_speed", "max_duration_s"}
    assert (plan.linear_x, plan.duration_s) == (0.2, 5.0)


# --- defensive computation ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_action_gives_stop(value):
    """An action carrying a non-finite value (bypassing validation) gives a clamped zero plan."""
    for action in (bypass(NavAction("forward", 1.0), distance_m=value),
                   bypass(NavAction("turn", angle_rad=1.0), angle_rad=value)):
        plan = plan_motion(action, CONFIG)
        assert plan.is_stop and plan.clamped and plan.duration_s == 0.0 and limited(plan, CONFIG)


def test_unknown_kind_and_broken_config_give_stop():
    """An unknown kind or a config with a broken limit (bypassing validation) gives a zero plan."""
    assert plan_motion(bypass(NavAction("stop"), kind="fly"), CONFIG).is_stop
    broken = NavConfig()
    object.__setattr__(broken, "max_duration_s", math.nan)
    plan = plan_motion(NavAction("forward", distance_m=1.0), broken)
    assert plan.is_stop and plan.clamped


def test_tiny_and_huge_magnitudes():
    """Denormal and huge (unvalidated) magnitudes still give finite plans within the limits."""
    for amount in (5e-324, 1e-300, 1e300, -1e308):
        for action in (bypass(NavAction("forward", 1.0), distance_m=amount),
                       bypass(NavAction("turn", angle_rad=1.0), angle_rad=amount)):
            assert limited(plan_motion(action, CONFIG), CONFIG)


def test_zero_plan_helper():
    """zero_plan() is an unclamped stop; zero_plan(reason) is a stop marked clamped with the reason."""
    assert zero_plan() == MotionPlan() and not zero_plan().clamped
    why = zero_plan("watchdog")
    assert why.is_stop and why.clamped and why.reasons == ("watchdog",)


def test_motion_plan_validates():
    """MotionPlan rejects non-finite values and a negative duration; reasons become a tuple."""
    for bad in (dict(linear_x=math.nan), dict(angular_z=math.inf), dict(duration_s=-1.0), dict(duration_s="1")):
        with pytest.raises(ValueError):
            MotionPlan(**bad)
    assert MotionPlan(reasons=["a"]).reasons == ("a",)  # type: ignore[arg-type]


# --- property-style ----------------------------------------------------------------------------------

def random_config(rng: random.Random) -> NavConfig:
    """A valid config with random limits, cruise speeds sometimes above the max speeds."""
    max_distance, max_angle = rng.uniform(0.05, 5.0), rng.uniform(0.05, 2 * math.pi)
    return NavConfig(cruise_linear_speed=rng.uniform(0.01, 2.0), cruise_angular_speed=rng.uniform(0.01, 3.0),
                     max_linear_speed=rng.uniform(0.01, 1.0), max_angular_speed=rng.uniform(0.01, 2.0),
                     max_duration_s=rng.uniform(0.1, 10.0), max_distance_m=max_distance, max_angle_rad=max_angle,
                     absurd_distance_m=max_distance * 10, absurd_angle_rad=max_angle * 10)


def test_random_actions_always_within_limits():
    """Thousands of random configs and actions: every plan is finite, within limits and consistent."""
    rng = random.Random(7)
    clamped = 0
    for _ in range(5000):
        config = random_config(rng)
        amount = rng.choice([0.0, 1.0, -1.0]) * 10 ** rng.uniform(-8, 8) if rng.random() < 0.9 else rng.uniform(-1, 1)
        kind = rng.choice(["forward", "turn", "stop"])
        action = NavAction(kind, distance_m=amount if kind == "forward" else 0.0,
                           angle_rad=amount if kind == "turn" else 0.0)
        plan = plan_motion(action, config)
        assert limited(plan, config), (action, config, plan)
        assert plan.clamped == bool(plan.reasons)
        assert plan.linear_x == 0.0 or plan.angular_z == 0.0
        if kind == "stop" or amount == 0:
            assert plan == zero_plan()
            continue
        velocity = plan.linear_x if kind == "forward" else plan.angular_z
        assert math.copysign(1.0, velocity) == math.copysign(1.0, amount)
        if not plan.clamped:
            assert velocity * plan.duration_s == pytest.approx(amount, rel=1e-9)
        clamped += plan.clamped
    assert 500 < clamped < 4500  # both branches exercised
