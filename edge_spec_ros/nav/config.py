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
from dataclasses import dataclass, field, fields

SIZES = ("small", "medium", "large")


# Hard caps: no configuration, file or runtime, may set a limit above these (a Go2 walks at up to
# ~3.7 m/s; an indoor robot driven by a language model never needs more than this).
HARD_MAX_LINEAR_SPEED = 1.5  # m/s
HARD_MAX_ANGULAR_SPEED = 2.0  # rad/s
HARD_MAX_DURATION_S = 30.0  # s
HARD_MAX_DISTANCE_M = 5.0  # m
HARD_MAX_ANGLE_RAD = 2.0 * math.pi  # rad
HARD_MAX_WATCHDOG_S = 60.0  # s
ABSURD_BOUND = 1e4  # the sanity bounds' own range (m, rad)


def _field(default: float, text: str, high: float):
    """A parameter field: its description and its valid range (0, high] for the node's descriptor."""
    return field(default=default, metadata={"doc": text, "range": (0.0, high)})


@dataclass(frozen=True)
class NavConfig:
    """Magnitudes, cruise speeds, safety limits and the watchdog timeout (all finite and > 0)."""

    # Word-action magnitudes ("move forward small|medium|large", "turn left|right small|medium|large").
    forward_small_m: float = _field(0.25, "distance of 'move forward small' (m)", HARD_MAX_DISTANCE_M)
    forward_medium_m: float = _field(0.5, "distance of 'move forward medium' (m)", HARD_MAX_DISTANCE_M)
    forward_large_m: float = _field(1.0, "distance of 'move forward large' (m)", HARD_MAX_DISTANCE_M)
    turn_small_rad: float = _field(math.radians(15.0), "angle of 'turn left/right small' (rad)", HARD_MAX_ANGLE_RAD)
    turn_medium_rad: float = _field(math.radians(30.0), "angle of 'turn left/right medium' (rad)",
                                    HARD_MAX_ANGLE_RAD)
    turn_large_rad: float = _field(math.radians(60.0), "angle of 'turn left/right large' (rad)", HARD_MAX_ANGLE_RAD)

    # Cruise speeds the planner commands (clamped to the max speeds if set above them, so their own
    # range is loose).
    cruise_linear_speed: float = _field(0.3, "speed of a move (m/s; clamped to max_linear_speed)",
                                        4 * HARD_MAX_LINEAR_SPEED)
    cruise_angular_speed: float = _field(0.6, "speed of a turn (rad/s; clamped to max_angular_speed)",
                                         4 * HARD_MAX_ANGULAR_SPEED)

    # Safety limits: every motion plan stays within them.
    max_linear_speed: float = _field(0.5, "safety limit on |linear.x| (m/s)", HARD_MAX_LINEAR_SPEED)
    max_angular_speed: float = _field(1.0, "safety limit on |angular.z| (rad/s)", HARD_MAX_ANGULAR_SPEED)
    max_duration_s: float = _field(5.0, "one command is held at most this long (s)", HARD_MAX_DURATION_S)
    max_distance_m: float = _field(2.0, "safety limit on one move's |distance| (m)", HARD_MAX_DISTANCE_M)
    max_angle_rad: float = _field(math.pi, "safety limit on one turn's |angle| (rad)", HARD_MAX_ANGLE_RAD)

    # Watchdog: without a sign of life for this long, the robot stops.
    watchdog_timeout_s: float = _field(6.0, "stop when the decision pipeline is silent this long (s; more "
                                       "than max_duration_s)",
                                       HARD_MAX_WATCHDOG_S)

    # Sanity bounds for numeric actions: beyond them the parser reports an error (not a clamp).
    absurd_distance_m: float = _field(100.0, "a numeric move beyond this is garbage, not clamped (m)", ABSURD_BOUND)
    absurd_angle_rad: float = _field(4.0 * math.pi, "a numeric turn beyond this is garbage, not clamped (rad)",
                                     ABSURD_BOUND)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"NavConfig.{f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"NavConfig.{f.name} must be finite and > 0, got {value!r}")
            if value > f.metadata["range"][1]:
                raise ValueError(f"NavConfig.{f.name} must be <= {f.metadata['range'][1]:g} (hard cap), got {value!r}")
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
