"""A clock-injected watchdog: in doubt, the robot stops.

Nothing here reads a clock or sleeps: every call takes ``now`` (seconds, from one monotonic clock,
e.g. ``time.monotonic()`` or the ROS steady clock), so the logic is testable without waiting.

* ``Watchdog``: expired until the first ``feed``, and again once ``timeout_s`` has passed without
  one. Feed it on every sign of life of whatever drives the robot (a new action, a heartbeat of the
  decoding link); starting a motion feeds it too.

The action node feeds it when a decision arrives and on each sign of life of the decision being
decoded, and ends the motion in progress when it has expired.
"""

from __future__ import annotations

import math

from edge_spec_ros.nav.config import NavConfig


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

    def expired(self, now: float, at_least_s: float = 0.0) -> bool:
        """True before the first feed, once ``now - last_feed >= max(timeout_s, at_least_s)``, and for
        a time that is not finite or earlier than the last feed (a clock that went backwards cannot be
        trusted). ``at_least_s``: a longer bound of the motion in progress (its tracker's timeout)."""
        if self._last_feed is None or not isinstance(now, (int, float)) or not math.isfinite(now):
            return True
        elapsed = now - self._last_feed
        return elapsed < 0 or elapsed >= max(self.timeout_s, at_least_s)
