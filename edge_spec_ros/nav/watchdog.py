"""A clock-injected watchdog and motion timer: in doubt, the robot stops.

Nothing here reads a clock or sleeps: every call takes ``now`` (seconds, from one monotonic clock,
e.g. ``time.monotonic()`` or the ROS steady clock), so the logic is testable without waiting.

* ``Watchdog``: expired until the first ``feed``, and again once ``timeout_s`` has passed without
  one. Feed it on every sign of life of whatever drives the robot (a new action, a heartbeat of the
  decoding link); starting a motion feeds it too.
* ``MotionTimer``: holds the current ``MotionPlan`` and says, at any ``now``, which velocity to
  publish: the plan while ``now < start + duration_s``, a zero plan afterwards, before any plan, or
  as soon as the watchdog has expired. An expiry cancels the plan for good: a late feed does not
  resume a stale motion, only a new ``start`` moves the robot again.

Call ``active_command(now)`` at the control rate and publish what it returns.
"""

from __future__ import annotations

import math

from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.planner import MotionPlan, zero_plan


def _check_time(now: float, what: str) -> float:
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ValueError(f"{what}: time must be a finite number of seconds, got {now!r}")
    return float(now)


class Watchdog:
    """Expired until fed, then again after ``timeout_s`` seconds without a feed."""

    def __init__(self, timeout_s: float) -> None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
                or not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError(f"Watchdog timeout_s must be finite and > 0, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self._last_feed: float | None = None

    @classmethod
    def from_config(cls, config: NavConfig) -> Watchdog:
        """A watchdog with ``config.watchdog_timeout_s``."""
        return cls(config.watchdog_timeout_s)

    @property
    def last_feed(self) -> float | None:
        """The time of the last feed, or None before the first."""
        return self._last_feed

    def feed(self, now: float) -> None:
        """Record a sign of life at ``now``; a non-finite time raises ValueError."""
        self._last_feed = _check_time(now, "Watchdog.feed")

    def expired(self, now: float) -> bool:
        """True before the first feed, once ``now - last_feed >= timeout_s``, and for a time that is
        not finite or earlier than the last feed (a clock that went backwards cannot be trusted)."""
        if self._last_feed is None or not isinstance(now, (int, float)) or not math.isfinite(now):
            return True
        elapsed = now - self._last_feed
        return elapsed < 0 or elapsed >= self.timeout_s


class MotionTimer:
    """The velocity to publish now: the current plan until it ends or the watchdog expires."""

    def __init__(self, watchdog: Watchdog) -> None:
        self.watchdog = watchdog
        self._plan: MotionPlan | None = None
        self._start = 0.0

    def start(self, plan: MotionPlan, now: float) -> None:
        """Replace the current plan by ``plan``, starting at ``now``; also feeds the watchdog."""
        now = _check_time(now, "MotionTimer.start")
        self.watchdog.feed(now)
        self._plan, self._start = plan, now

    def cancel(self) -> None:
        """Drop the current plan: the robot stops."""
        self._plan = None

    def remaining_s(self, now: float) -> float:
        """Seconds left of the current plan at ``now`` (0 without one or once it has ended)."""
        if self._plan is None or not isinstance(now, (int, float)) or not math.isfinite(now):
            return 0.0
        return max(0.0, min(self._plan.duration_s, self._start + self._plan.duration_s - now))

    def active_command(self, now: float) -> MotionPlan:
        """The plan while ``start <= now < start + duration_s`` and the watchdog holds, else a stop.

        The zero plan returned because of the watchdog carries the reason (and ``clamped`` set);
        the watchdog's expiry and the end of the plan both drop it.
        """
        if self._plan is None:
            return zero_plan()
        if self.watchdog.expired(now):
            self._plan = None
            return zero_plan(f"watchdog expired: no sign of life for {self.watchdog.timeout_s:g} s")
        if now < self._start or now >= self._start + self._plan.duration_s:
            self._plan = None
            return zero_plan()
        return self._plan
