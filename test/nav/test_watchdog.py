"""The clock-injected Watchdog (edge_spec_ros/nav/watchdog.py)."""

from __future__ import annotations

import math

import pytest

from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.watchdog import Watchdog


# --- Watchdog ------------------------------------------------------------------------------------------

def test_expired_until_first_feed():
    """A new watchdog is expired at any time until it is fed."""
    watchdog = Watchdog(0.5)
    assert watchdog.expired(0.0) and watchdog.expired(1e9) and watchdog.last_feed is None


def test_expiry_timing():
    """Fed at t, it holds for t <= now < t + timeout_s and is expired from t + timeout_s on."""
    watchdog = Watchdog(0.5)
    watchdog.feed(10.0)
    assert watchdog.last_feed == 10.0
    assert not watchdog.expired(10.0) and not watchdog.expired(10.25) and not watchdog.expired(10.499)
    assert watchdog.expired(10.5) and watchdog.expired(11.0)


def test_a_longer_bound_of_the_motion_in_progress_holds_it_longer():
    """``at_least_s`` (a tracked motion's own timeout) only ever lengthens the timeout."""
    watchdog = Watchdog(6.0)
    watchdog.feed(0.0)
    assert watchdog.expired(6.0) and not watchdog.expired(6.0, at_least_s=11.0)
    assert not watchdog.expired(10.9, at_least_s=11.0) and watchdog.expired(11.0, at_least_s=11.0)
    assert watchdog.expired(6.0, at_least_s=2.0)  # a shorter bound does not shorten it


def test_feed_resets_timeout():
    """Each feed restarts the timeout."""
    watchdog = Watchdog(0.5)
    t = 0.0
    for _ in range(40):  # fed every 0.25 s (exact in binary) for 10 s: never expires
        watchdog.feed(t)
        t += 0.25
        assert not watchdog.expired(t)
    assert watchdog.expired(t + 0.25)  # 0.5 s since the last feed


def test_time_going_backwards_or_non_finite_is_expired():
    """A time before the last feed or a non-finite time counts as expired (in doubt, stop)."""
    watchdog = Watchdog(0.5)
    watchdog.feed(10.0)
    assert watchdog.expired(9.9)
    assert watchdog.expired(math.nan) and watchdog.expired(math.inf) and watchdog.expired(-math.inf)


@pytest.mark.parametrize("now", [math.nan, math.inf, None, "1"])
def test_feed_rejects_bad_time(now):
    """Feeding a non-finite or non-numeric time raises ValueError and leaves the watchdog unfed."""
    watchdog = Watchdog(0.5)
    with pytest.raises(ValueError, match="finite"):
        watchdog.feed(now)
    assert watchdog.last_feed is None


@pytest.mark.parametrize("timeout", [0.0, -1.0, math.nan, math.inf, True])
def test_timeout_validated(timeout):
    """The timeout must be a finite number > 0."""
    with pytest.raises(ValueError, match="timeout_s"):
        Watchdog(timeout)


def test_from_config():
    """Watchdog.from_config uses NavConfig.watchdog_timeout_s."""
    assert Watchdog.from_config(NavConfig(watchdog_timeout_s=0.2)).timeout_s == 0.2
    assert Watchdog.from_config(NavConfig()).timeout_s == 6.0
