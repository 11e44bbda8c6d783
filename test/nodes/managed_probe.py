"""A small managed node for test_managed.py, run as a process: ``python managed_probe.py --ros-args ...``.

configure: logs "configured" (``fail_configure``: raises instead); activate: its timer publishes a
count on ``probe/count`` every 50 ms while active; deactivate: publishes -1 once, then nothing.
Every transition writes a library log line (Python ``logging``, ``edge_spec_ros.probe``), which
must reach /rosout; /diagnostics carries its ``probe: ticks`` task.
"""

from __future__ import annotations

import logging

from std_msgs.msg import Int32

from edge_spec_ros.nodes.diagnostics import OK, Diagnostics, Report
from edge_spec_ros.nodes.lifecycle import main_for
from edge_spec_ros.nodes.managed import ManagedNode

TICK_S = 0.05
log = logging.getLogger("edge_spec_ros.probe")


class Probe(ManagedNode):
    def __init__(self) -> None:
        super().__init__("probe")
        self.fail = self.declare_parameter("fail_configure", False).value
        self.count = 0
        self.publisher = self.create_publisher(Int32, "probe/count", 10)
        self.create_timer(TICK_S, self.tick)
        self.diagnostics = Diagnostics(self, hardware_id="probe", period_s=0.2)
        self.diagnostics.add("ticks", lambda: Report(OK, self.lifecycle_state, {"count": self.count}))

    def configure(self) -> None:
        if self.fail:
            raise RuntimeError("the probe was told to fail")
        log.warning("library line: probe configured")

    def activate(self) -> None:
        log.info("library line: probe activated")

    def deactivate(self) -> None:
        self.publisher.publish(Int32(data=-1))
        log.warning("library line: probe deactivated")

    def tick(self) -> None:
        if self.active:
            self.count += 1
            self.publisher.publish(Int32(data=self.count))


if __name__ == "__main__":
    raise SystemExit(main_for(Probe))
