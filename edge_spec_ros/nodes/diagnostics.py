"""/diagnostics of a node, named as diagnostic_updater names them.

Every node of the package reports its health on ``/diagnostics`` (diagnostic_msgs/DiagnosticArray):
one ``DiagnosticStatus`` per task, named ``<node name>: <task>`` (diagnostic_updater's ``Updater``
names its tasks so; ``rqt_robot_monitor`` and the diagnostic aggregator group by it), every
``period_s`` on the steady clock (also while simulated time stands still), one array per node with
all its tasks. A task is a function returning a ``Report``; a task that raises is reported at ERROR
with the exception instead of ending the timer.

``RateMeter`` measures a stream's rate over a sliding window (the camera's frame rate), as
diagnostic_updater's ``FrequencyStatus`` does: within ``RATE_TOLERANCE`` of the target is OK.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.node import Node

TOPIC = "/diagnostics"  # absolute: a node in a namespace reports to the one topic the monitors read
PERIOD_S = 1.0  # diagnostic_updater's default period
QOS_DEPTH = 10
OK, WARN, ERROR, STALE = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR, DiagnosticStatus.STALE
RATE_WINDOW_S = 5.0  # a rate is measured over the events of the last this many seconds
RATE_TOLERANCE = 0.1  # |measured / target - 1| within this is OK (FrequencyStatus's default tolerance)
MISSED_PERIODS = 3  # no event for this many target periods: the stream has stalled (WARN)


def status_name(node_name: str, task: str) -> str:
    """diagnostic_updater's ``<node name>: <task>``."""
    return f"{node_name}: {task}"


@dataclass
class Report:
    """What one task says: a level (OK, WARN, ERROR, STALE), a message and key/values."""

    level: int
    message: str
    values: dict[str, object] = field(default_factory=dict)


class Diagnostics:
    """A node's /diagnostics: ``add(task, report)``; published every ``period_s`` and on ``publish()``."""

    def __init__(self, node: Node, hardware_id: str = "", period_s: float = PERIOD_S) -> None:
        self.node = node
        self.hardware_id = hardware_id
        self.tasks: list[tuple[str, Callable[[], Report]]] = []
        self.publisher = node.create_publisher(DiagnosticArray, TOPIC, QOS_DEPTH)
        self.timer = node.create_timer(period_s, self.publish, clock=Clock(clock_type=ClockType.STEADY_TIME))

    def add(self, task: str, report: Callable[[], Report]) -> None:
        self.tasks.append((task, report))

    def statuses(self) -> list[DiagnosticStatus]:
        out = []
        for task, report in self.tasks:
            try:
                r = report()
            except Exception as exc:  # noqa: BLE001 - a broken report is itself a diagnosis
                r = Report(ERROR, f"report failed: {exc!r}")
            out.append(DiagnosticStatus(
                level=r.level, name=status_name(self.node.get_name(), task), message=r.message,
                hardware_id=self.hardware_id, values=[KeyValue(key=k, value=str(v)) for k, v in r.values.items()]))
        return out

    def publish(self) -> None:
        if not self.tasks:
            return
        array = DiagnosticArray(status=self.statuses())
        array.header.stamp = self.node.get_clock().now().to_msg()
        self.publisher.publish(array)


class RateMeter:
    """Event times (steady clock) over the last ``window_s``: the measured rate and its verdict."""

    def __init__(self, target_hz: float, window_s: float = RATE_WINDOW_S, tolerance: float = RATE_TOLERANCE,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.target_hz = target_hz
        self.window_s = max(window_s, MISSED_PERIODS / target_hz)  # a slow stream: a few periods at least
        self.tolerance = tolerance
        self.now = now
        self.count = 0
        self.times: collections.deque[float] = collections.deque()

    def tick(self) -> None:
        self.count += 1
        self.times.append(self.now())
        self._trim()

    def _trim(self) -> None:
        horizon = self.now() - self.window_s
        while self.times and self.times[0] < horizon:
            self.times.popleft()

    def rate_hz(self) -> float | None:
        """Events per second between the window's first and last events (None below two events)."""
        self._trim()
        if len(self.times) < 2 or self.times[-1] <= self.times[0]:
            return None
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])

    def report(self, what: str) -> Report:
        rate = self.rate_hz()
        since = self.now() - self.times[-1] if self.times else None
        values = {"target_hz": f"{self.target_hz:g}", "measured_hz": "" if rate is None else f"{rate:.2f}",
                  "window_s": f"{self.window_s:g}", "events": self.count,
                  "since_last_s": "" if since is None else f"{since:.2f}"}
        if not self.count:
            return Report(STALE, f"no {what} yet", values)
        if since is None:
            return Report(ERROR, f"no {what} for {self.window_s:g} s", values)
        if since > MISSED_PERIODS / self.target_hz:
            return Report(WARN, f"no {what} for {since:.1f} s (target {self.target_hz:g} Hz)", values)
        if rate is None:
            return Report(OK, f"first {what}", values) if self.count == 1 else \
                Report(WARN, f"one {what} in {self.window_s:g} s, target {self.target_hz:g} Hz", values)
        if abs(rate / self.target_hz - 1.0) > self.tolerance:
            return Report(WARN, f"{what} at {rate:.2f} Hz, target {self.target_hz:g} Hz", values)
        return Report(OK, f"{what} at {rate:.2f} Hz", values)
