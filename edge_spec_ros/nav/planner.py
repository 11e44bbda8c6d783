"""Turn a ``NavAction`` into a velocity command held for a duration, within the safety limits.

A move is driven at the cruise linear speed, a turn at the cruise angular speed, for
``|distance| / speed`` or ``|angle| / speed`` seconds; a stop is all zeros. Before that:

* the distance is clamped to ``max_distance_m`` and the angle to ``max_angle_rad``;
* the cruise speed is clamped to ``max_linear_speed`` / ``max_angular_speed``;
* the duration is clamped to ``max_duration_s`` (the robot then covers less than asked).

Each limit applied adds a reason, starting with the limit's name (``"max_distance_m: ..."``), and
sets ``clamped``. Every plan returned is finite and within the limits, whatever the action: values
are checked, not asserted, and anything non-finite or out of range gives a zero plan (stop).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.grammar import NavAction


@dataclass(frozen=True)
class MotionPlan:
    """Hold ``(linear_x, angular_z)`` (m/s, rad/s; REP 103) for ``duration_s`` seconds, then stop.

    clamped: whether a limit changed the action; reasons: one line per limit applied.
    """

    linear_x: float = 0.0
    angular_z: float = 0.0
    duration_s: float = 0.0
    clamped: bool = False
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "reasons", tuple(self.reasons))
        for name in ("linear_x", "angular_z", "duration_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"MotionPlan.{name} must be a finite number, got {value!r}")
        if self.duration_s < 0:
            raise ValueError(f"MotionPlan.duration_s must be >= 0, got {self.duration_s!r}")

    @property
    def is_stop(self) -> bool:
        """True when the plan commands no motion."""
        return self.duration_s == 0 or (self.linear_x == 0 and self.angular_z == 0)


def zero_plan(reason: str | None = None) -> MotionPlan:
    """A stop: zero velocities for zero seconds; with a ``reason``, marked as clamped by it."""
    return MotionPlan(clamped=reason is not None, reasons=() if reason is None else (reason,))


def plan_motion(action: NavAction, config: NavConfig) -> MotionPlan:
    """The velocity command and duration of ``action``, clamped to ``config``'s safety limits."""
    if action.kind == "stop":
        return zero_plan()
    if action.kind == "forward":
        amount, speed = action.distance_m, config.cruise_linear_speed
        names = ("distance", "m", "max_distance_m", config.max_distance_m, "max_linear_speed",
                 config.max_linear_speed)
    elif action.kind == "turn":
        amount, speed = action.angle_rad, config.cruise_angular_speed
        names = ("angle", "rad", "max_angle_rad", config.max_angle_rad, "max_angular_speed",
                 config.max_angular_speed)
    else:
        return zero_plan(f"unknown action kind {action.kind!r}: stopping")
    what, unit, amount_limit_name, amount_limit, speed_limit_name, speed_limit = names

    if not (_finite(amount) and _finite(speed) and _finite(amount_limit) and _finite(speed_limit)
            and _finite(config.max_duration_s)):
        return zero_plan(f"non-finite {what} or limits in {action!r}: stopping")

    if amount == 0:
        return zero_plan()
    if speed <= 0 or amount_limit <= 0 or speed_limit <= 0 or config.max_duration_s <= 0:
        return zero_plan(f"non-positive speed or limits for {action!r}: stopping")

    reasons: list[str] = []
    if abs(amount) > amount_limit:
        reasons.append(f"{amount_limit_name}: {what} {abs(amount):.4g} {unit} clamped to "
                       f"{amount_limit:.4g} {unit}")
        amount = math.copysign(amount_limit, amount)
    if speed > speed_limit:
        reasons.append(f"{speed_limit_name}: cruise speed {speed:.4g} {unit}/s clamped to "
                       f"{speed_limit:.4g} {unit}/s")
        speed = speed_limit

    duration = abs(amount) / speed
    if not duration <= config.max_duration_s:  # also catches an overflow to inf
        reasons.append(f"max_duration_s: duration {duration:.4g} s clamped to {config.max_duration_s:.4g} s "
                       f"({what} covered {speed * config.max_duration_s:.4g} of {abs(amount):.4g} {unit})")
        duration = config.max_duration_s
    velocity = math.copysign(speed, amount)
    linear_x, angular_z = (velocity, 0.0) if action.kind == "forward" else (0.0, velocity)

    if not (_finite(linear_x) and _finite(angular_z) and _finite(duration)
            and abs(linear_x) <= config.max_linear_speed and abs(angular_z) <= config.max_angular_speed
            and 0 <= duration <= config.max_duration_s):
        return zero_plan(f"plan for {action!r} out of limits: stopping")
    return MotionPlan(linear_x, angular_z, duration, clamped=bool(reasons), reasons=tuple(reasons))


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
