"""The clock-injected Watchdog and MotionTimer (edge_spec_ros/nav/watchdog.py)."""

from __future__ import annotations

import math

import pytest

from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.planner import MotionPlan, zero_plan
from edge_spec_ros.nav.watchdog import MotionTimer, Watchdog

FORWARD = MotionPlan(linear_x=0.3, duration_s=2.0)
TURN = MotionPlan(angular_z=-0.6, duration_s=1.0)


class FakeClock:
    """A monotonic clock the test advances by hand."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> float:
        self.t += dt
        return self.t


def make(timeout_s: float = 0.5) -> tuple[Watchdog, MotionTimer]:
    watchdog = Watchdog(timeout_s)
    return watchdog, MotionTimer(watchdog)


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


def test_feed_resets_timeout():
    """Each feed restarts the timeout."""
    clock = FakeClock(0.0)
    watchdog = Watchdog(0.5)
    for _ in range(40):  # fed every 0.25 s (exact in binary) for 10 s: never expires
        watchdog.feed(clock())
        assert not watchdog.expired(clock.advance(0.25))
    assert watchdog.expired(clock.advance(0.25))  # 0.5 s since the last feed


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


# --- MotionTimer ---------------------------------------------------------------------------------------

def test_no_plan_is_stop():
    """Before any plan the command is a plain zero plan."""
    _, timer = make()
    assert timer.active_command(0.0) == zero_plan()
    assert timer.remaining_s(0.0) == 0.0


def test_plan_runs_for_its_duration_while_fed():
    """With the watchdog fed, the plan is active on [start, start + duration) and a stop after."""
    clock = FakeClock(50.0)
    watchdog, timer = make(0.5)
    timer.start(FORWARD, clock())
    commands = []
    for _ in range(24):  # 3 s at 8 Hz (exact in binary), with a heartbeat every tick
        watchdog.feed(clock())
        commands.append(timer.active_command(clock()))
        clock.advance(0.125)
    assert commands[:16] == [FORWARD] * 16
    assert commands[16:] == [zero_plan()] * 8


def test_plan_boundaries():
    """The plan holds just before start + duration and stops exactly at it."""
    watchdog, timer = make(10.0)
    timer.start(TURN, 5.0)
    assert timer.active_command(5.0) is TURN
    assert timer.active_command(5.999) is TURN
    assert timer.remaining_s(5.25) == pytest.approx(0.75)
    assert timer.active_command(6.0) == zero_plan()
    assert timer.active_command(5.5) == zero_plan()  # an ended plan does not come back
    assert timer.remaining_s(5.5) == 0.0


def test_start_feeds_watchdog():
    """Starting a plan is a sign of life: it feeds the watchdog."""
    watchdog, timer = make(0.5)
    timer.start(FORWARD, 3.0)
    assert watchdog.last_feed == 3.0 and not watchdog.expired(3.1)


def test_watchdog_expiry_stops_and_latches():
    """Without feeds the plan stops at the timeout, with a reason, and a late feed does not resume it."""
    watchdog, timer = make(0.5)
    timer.start(FORWARD, 0.0)
    assert timer.active_command(0.4) is FORWARD
    stopped = timer.active_command(0.5)
    assert stopped.is_stop and stopped.clamped and "watchdog" in stopped.reasons[0]
    watchdog.feed(0.6)
    assert timer.active_command(0.7) == zero_plan()
    timer.start(TURN, 0.8)  # only a new plan moves the robot again
    assert timer.active_command(0.9) is TURN


def test_new_start_replaces_plan():
    """A new start replaces the running plan and restarts the timing."""
    watchdog, timer = make(10.0)
    timer.start(FORWARD, 0.0)
    timer.start(TURN, 1.5)
    assert timer.active_command(1.6) is TURN
    assert timer.active_command(2.4) is TURN  # FORWARD would have run until 2.0, TURN runs until 2.5
    assert timer.active_command(2.5) == zero_plan()


def test_cancel_stops():
    """cancel() drops the plan at once."""
    _, timer = make(10.0)
    timer.start(FORWARD, 0.0)
    timer.cancel()
    assert timer.active_command(0.1) == zero_plan()


def test_zero_duration_and_clock_anomalies_are_stops():
    """A zero-duration plan, a time before the start and a non-finite time all give a stop."""
    _, timer = make(10.0)
    timer.start(zero_plan(), 1.0)
    assert timer.active_command(1.0) == zero_plan()
    timer.start(FORWARD, 1.0)
    assert timer.active_command(0.5).is_stop  # clock went backwards
    timer.start(FORWARD, 1.0)
    assert timer.active_command(math.nan).is_stop
    with pytest.raises(ValueError):
        timer.start(FORWARD, math.inf)
