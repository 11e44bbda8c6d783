"""Managed nodes (nodes/managed.py) driven through lifecycle_msgs' services, with a small managed node
in its own process (managed_probe.py): autostart brings it up, deactivate stops it at once, autostart
false waits for a manager, a failed configure says why; its /diagnostics are named ``node: task`` and
its library log lines (Python ``logging``) reach /rosout."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State, Transition
from rcl_interfaces.msg import Log
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Int32

from lifecycle_client import DISCOVERY_S, Lifecycle
from rosharness import process, statuses, wait_for

PROBE = Path(__file__).resolve().parent / "managed_probe.py"
ROSOUT_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.TRANSIENT_LOCAL)  # also the lines logged before we matched


def probe_command(*params: str) -> list[str]:
    return [sys.executable, str(PROBE), "--ros-args", "-r", "__node:=probe", *params]


@pytest.fixture
def counts(ros):
    received: list[int] = []
    subscription = ros.node.create_subscription(Int32, "probe/count", lambda m: received.append(m.data), 100)
    yield received
    ros.node.destroy_subscription(subscription)



def test_autostart_activates_and_deactivate_stops_at_once(ros, counts, tmp_path):
    diagnostics = ros.collect(DiagnosticArray, "/diagnostics")
    log = tmp_path / "probe.log"
    with process(probe_command("-p", "autostart:=true"), log) as proc:
        wait_for(lambda: any(c > 0 for c in counts), DISCOVERY_S, lambda: f"counts while active\n{log.read_text()}")
        node = Lifecycle(ros, "probe")
        assert node.state() == State.PRIMARY_STATE_ACTIVE

        assert node.set(Transition.TRANSITION_DEACTIVATE)
        assert node.state() == State.PRIMARY_STATE_INACTIVE
        wait_for(lambda: -1 in counts, 5, "the deactivation's last message")
        after = len(counts)
        seen = len(statuses(diagnostics, "probe: ticks"))  # the diagnostics go on: a clock for "nothing more"
        wait_for(lambda: len(statuses(diagnostics, "probe: ticks")) >= seen + 3, 10, "three more diagnostics")
        assert len(counts) == after and counts[-1] == -1, counts[after - 3:]  # no more commands once inactive
        assert statuses(diagnostics, "probe: ticks")[-1].message == "inactive"

        assert node.set(Transition.TRANSITION_ACTIVATE)
        wait_for(lambda: len(counts) > after and counts[-1] > 0, 5, "counts again once active")

        proc.send_signal(signal.SIGTERM)  # shutdown from active: deactivate first
        assert proc.wait(timeout=15) == 0, log.read_text()
    wait_for(lambda: counts[-1] == -1, 5, "the last message of a shutdown: the deactivation's")
    text = log.read_text()
    assert "Traceback" not in text, text
    assert text.index("shut down") > text.rindex("library line: probe deactivated"), text


def test_autostart_false_waits_for_a_manager(ros, counts, tmp_path):
    diagnostics = ros.collect(DiagnosticArray, "/diagnostics")
    log = tmp_path / "probe.log"
    with process(probe_command("-p", "autostart:=false"), log) as proc:
        node = Lifecycle(ros, "probe")
        assert node.state() == State.PRIMARY_STATE_UNCONFIGURED
        wait_for(lambda: statuses(diagnostics, "probe: ticks"), DISCOVERY_S, "the probe's diagnostics")
        status = statuses(diagnostics, "probe: ticks")[-1]
        assert status.message == "unconfigured" and status.hardware_id == "probe" and not counts

        assert node.set(Transition.TRANSITION_CONFIGURE)
        assert node.state() == State.PRIMARY_STATE_INACTIVE and not counts
        assert node.set(Transition.TRANSITION_ACTIVATE)
        wait_for(lambda: any(c > 0 for c in counts), 10, "counts once a manager activated it")
        assert node.set(Transition.TRANSITION_DEACTIVATE)
        assert node.set(Transition.TRANSITION_CLEANUP)
        assert node.state() == State.PRIMARY_STATE_UNCONFIGURED
        assert proc.poll() is None, log.read_text()


def test_a_failed_configure_says_why(ros, tmp_path):
    log = tmp_path / "managed.log"
    with process(probe_command("-p", "autostart:=false", "-p", "fail_configure:=true"), log) as proc:
        node = Lifecycle(ros, "probe")
        assert not node.set(Transition.TRANSITION_CONFIGURE)
        assert node.state() == State.PRIMARY_STATE_UNCONFIGURED
        assert proc.poll() is None
    assert "configure failed: the probe was told to fail" in log.read_text()

    autostarted = tmp_path / "autostart.log"  # autostart: the process ends with status 1 and the reason
    with process(probe_command("-p", "fail_configure:=true"), autostarted) as proc:
        assert proc.wait(timeout=60) == 1, autostarted.read_text()
    assert "probe: configure failed: the probe was told to fail" in autostarted.read_text()


def test_library_log_lines_reach_rosout(ros, tmp_path):
    lines: list[Log] = []
    ros.node.create_subscription(Log, "/rosout", lines.append, ROSOUT_QOS)
    log = tmp_path / "probe.log"
    with process(probe_command(), log):
        wait_for(lambda: any("library line: probe activated" in m.msg for m in lines), DISCOVERY_S,
                 lambda: f"the library's line on /rosout\n{log.read_text()}")
    line = next(m for m in lines if "library line: probe configured" in m.msg)
    assert line.name == "probe" and line.level == Log.WARN, line
    assert line.msg == "[edge_spec_ros.probe] library line: probe configured"
