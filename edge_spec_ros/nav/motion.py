"""Ending a motion on pose feedback: how far the robot has gone, not how long it has been commanded.

A ``MotionPlan`` says "hold (v, ω) for d seconds", which asks for the distance s = |v| d (a move) or
the angle φ = |ω| d (a turn). A timed command covers s only if every control period is honoured; on a
loaded computer or a slipping robot it is not. ``MotionTracker`` closes the loop on odometry instead:
at every odometry sample it measures the progress p along the plan (signed distance along the start
heading, or the turned angle accumulated sample by sample, so a turn beyond ±π is counted whole) and
commands

    u = sign · min(cruise, (target − p) / Δt)

where Δt is the odometry period: the cruise speed while far from the target, and on the last sample
exactly the speed that covers what is left in one period (a dead-beat approach), so the robot stops
on the target instead of up to one period past it. The motion ends when the remaining progress is
below ``tolerance`` ("reached"); when the robot is blocked (a wall or an object in the way): over the
last ``STALL_WINDOW_S`` of sample time it covered less than ``STALL_FRACTION`` of what the commands
in effect asked for ("blocked", within about that window of the robot stopping); or, as the last
safety net (a robot that moves, but far too slowly), when ``timeout_s`` of the clock the samples carry
has passed since the start ("timeout").

Nothing here reads a clock or a topic: the caller feeds (pose, time) samples, from the simulation
(``sim/simulation.execute``) or from ``nav_msgs/Odometry`` (``nodes/action_node``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from edge_spec_ros.nav.planner import MotionPlan

LINEAR_TOLERANCE_M = 1e-3
ANGULAR_TOLERANCE_RAD = math.radians(0.1)
TIMEOUT_FACTOR = 2.0  # a motion is abandoned after this many times its planned duration ...
TIMEOUT_MARGIN_S = 1.0  # ... plus this margin (the robot is far slower than commanded)
STALL_WINDOW_S = 1.0  # a motion is blocked when, over this much sample time, the robot covered ...
STALL_FRACTION = 0.2  # ... less than this share of what the commands in effect asked for


@dataclass(frozen=True)
class PlanarPose:
    """x, y (m) and heading theta (rad) in one fixed frame (odom or room)."""

    x: float
    y: float
    theta: float


@dataclass(frozen=True)
class MotionCommand:
    """The velocity to send now; ``done`` once the motion is over (then both are 0), ``reason`` why."""

    linear_x: float
    angular_z: float
    done: bool = False
    reason: str = ""


def _wrap(angle: float) -> float:
    return math.atan2(math.sin(angle), math.cos(angle))


class MotionTracker:
    """Drive one ``MotionPlan`` to its distance or angle on pose samples (see module docstring)."""

    def __init__(self, plan: MotionPlan, start: PlanarPose, start_time_s: float) -> None:
        self.plan = plan
        self.turn = plan.linear_x == 0.0
        speed = abs(plan.angular_z if self.turn else plan.linear_x)
        self.cruise = speed
        self.sign = math.copysign(1.0, plan.angular_z if self.turn else plan.linear_x)
        self.target = speed * plan.duration_s  # s or φ, unsigned
        self.tolerance = ANGULAR_TOLERANCE_RAD if self.turn else LINEAR_TOLERANCE_M
        self.timeout_s = TIMEOUT_FACTOR * plan.duration_s + TIMEOUT_MARGIN_S
        self.start, self.start_time_s = start, start_time_s
        self._last, self._last_time = start, start_time_s
        self._turned = 0.0
        self.covered = 0.0  # signed distance along the start heading (m) or angle turned (rad) so far
        self.done = plan.is_stop
        self._speed = speed  # the command in effect (unsigned): the caller sends the cruise one at the start
        self._asked = 0.0  # progress the commands in effect have asked for so far (unsigned, m or rad)
        self._window: deque[tuple[float, float, float]] = deque([(start_time_s, 0.0, 0.0)])  # (t, p, asked)

    def progress(self, pose: PlanarPose) -> float:
        """Unsigned-direction progress p along the plan at ``pose`` (updates the turn accumulator)."""
        if self.turn:
            self._turned += _wrap(pose.theta - self._last.theta)
            self.covered = self._turned
        else:
            self.covered = (pose.x - self.start.x) * math.cos(self.start.theta) + (
                pose.y - self.start.y) * math.sin(self.start.theta)
        return self.covered * self.sign

    def update(self, pose: PlanarPose, now_s: float) -> MotionCommand:
        """The command after the sample (``pose`` at ``now_s``)."""
        if self.done:
            return MotionCommand(0.0, 0.0, True, "done")
        dt = now_s - self._last_time
        progress = self.progress(pose)
        remaining = self.target - progress
        self._last, self._last_time = pose, now_s
        self._asked += self._speed * max(dt, 0.0)
        unit, covered = "rad" if self.turn else "m", progress + 0.0  # (no "-0.000")
        if remaining <= self.tolerance:
            return self._finish("reached")
        if self._blocked(now_s, progress):
            return self._finish(f"blocked: {covered:.3f} of {self.target:.3f} {unit}, less than "
                                f"{STALL_FRACTION:.0%} of the commanded travel in the last {STALL_WINDOW_S:g} s")
        if now_s - self.start_time_s >= self.timeout_s:
            return self._finish(f"timeout: {covered:.3f} of {self.target:.3f} {unit} after "
                                f"{now_s - self.start_time_s:.1f} s")
        self._speed = self.cruise if dt <= 0 else min(self.cruise, remaining / dt)
        u = self.sign * self._speed
        return MotionCommand(0.0, u) if self.turn else MotionCommand(u, 0.0)

    def _blocked(self, now_s: float, progress: float) -> bool:
        """Whether, over the last ``STALL_WINDOW_S`` of samples, the robot covered less than
        ``STALL_FRACTION`` of what the commands asked for (the sample ``now_s`` is recorded)."""
        window = self._window
        window.append((now_s, progress, self._asked))
        while len(window) > 2 and window[1][0] <= now_s - STALL_WINDOW_S:
            window.popleft()  # keep the newest sample at least a window old as the window's start
        start, start_progress, start_asked = window[0]
        asked = self._asked - start_asked
        return now_s - start >= STALL_WINDOW_S and asked > 0 and progress - start_progress < STALL_FRACTION * asked

    def _finish(self, reason: str) -> MotionCommand:
        self.done = True
        return MotionCommand(0.0, 0.0, True, reason)
