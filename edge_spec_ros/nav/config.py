"""Navigation settings: the magnitudes of the mid-level actions and the safety limits, in SI units.

The word actions of the FSD paper's Go2 case study ("move forward small", "turn left large", ...)
map to the distances and angles below; NaVILA-style numeric actions ("move forward 75 cm", "turn
left 30 degrees") carry their own magnitude. Either way the planner (``nav/planner.py``) turns an
action into a velocity command held for a duration, clamped to the safety limits.

Units: metres, radians, seconds, m/s, rad/s. Angles are given in radians; the defaults are written
with ``math.radians`` so that the degrees they stand for stay readable.

Three tiers of magnitude, from small to large:

* the word magnitudes (small / medium / large), well inside the limits;
* the safety limits (``max_*``): a larger action is not an error, it is clamped by the planner,
  which records that it did so;
* the sanity bounds (``absurd_*``): a numeric action beyond them ("move forward 5 km") means the
  model's output is garbage, and the parser rejects it instead of clamping it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

SIZES = ("small", "medium", "large")


@dataclass(frozen=True)
class NavConfig:
    """Magnitudes, cruise speeds, safety limits and the watchdog timeout (all finite and > 0)."""

    # Word-action magnitudes ("move forward small|medium|large", "turn left|right small|medium|large").
    forward_small_m: float = 0.25
    forward_medium_m: float = 0.5
    forward_large_m: float = 1.0
    turn_small_rad: float = math.radians(15.0)
    turn_medium_rad: float = math.radians(30.0)
    turn_large_rad: float = math.radians(60.0)

    # Cruise speeds the planner commands (clamped to the max speeds if set above them).
    cruise_linear_speed: float = 0.3  # m/s
    cruise_angular_speed: float = 0.6  # rad/s

    # Safety limits: every motion plan stays within them.
    max_linear_speed: float = 0.5  # m/s, |linear_x|
    max_angular_speed: float = 1.0  # rad/s, |angular_z|
    max_duration_s: float = 5.0  # s, one command is held at most this long
    max_distance_m: float = 2.0  # m, |distance| of one forward/backward action
    max_angle_rad: float = math.pi  # rad, |angle| of one turn

    # Watchdog: without a sign of life for this long, the robot stops.
    watchdog_timeout_s: float = 0.5

    # Sanity bounds for numeric actions: beyond them the parser reports an error (not a clamp).
    absurd_distance_m: float = 100.0
    absurd_angle_rad: float = 4.0 * math.pi  # two full turns

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"NavConfig.{f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"NavConfig.{f.name} must be finite and > 0, got {value!r}")
        for kind in ("forward", "turn"):
            unit = "m" if kind == "forward" else "rad"
            small, medium, large = (getattr(self, f"{kind}_{s}_{unit}") for s in SIZES)
            if not small <= medium <= large:
                raise ValueError(f"NavConfig: {kind} magnitudes must satisfy small <= medium <= large, "
                                 f"got {small!r}, {medium!r}, {large!r}")
        if self.absurd_distance_m < self.max_distance_m:
            raise ValueError(f"NavConfig.absurd_distance_m ({self.absurd_distance_m!r}) must be >= "
                             f"max_distance_m ({self.max_distance_m!r})")
        if self.absurd_angle_rad < self.max_angle_rad:
            raise ValueError(f"NavConfig.absurd_angle_rad ({self.absurd_angle_rad!r}) must be >= "
                             f"max_angle_rad ({self.max_angle_rad!r})")

    def forward_distance(self, size: str) -> float:
        """The unsigned distance (m) of "move forward <size>"; ``size`` is small, medium or large."""
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; expected one of {', '.join(SIZES)}")
        return float(getattr(self, f"forward_{size}_m"))

    def turn_angle(self, size: str) -> float:
        """The unsigned angle (rad) of "turn left|right <size>"; ``size`` is small, medium or large."""
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; expected one of {', '.join(SIZES)}")
        return float(getattr(self, f"turn_{size}_rad"))
