"""/diagnostics of every node, named as diagnostic_updater names them (``<node>: <task>``), with real
nodes in their own processes; the rate meter's verdicts on an injected clock."""

from __future__ import annotations

import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

from rosharness import node_command, process, wait_for
from edge_spec_ros.nodes.diagnostics import ERROR, OK, STALE, WARN, RateMeter, status_name

DISCOVERY_S = 20.0


def latest(arrays: list, name: str) -> DiagnosticStatus | None:
    found = [s for a in list(arrays) for s in a.status if s.name == name]
    return found[-1] if found else None


def values(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def test_camera_memory_and_navigate_report_their_tasks(ros, tmp_path):
    arrays = ros.collect(DiagnosticArray, "/diagnostics")
    memory_dir = tmp_path / "memory"
    with process(node_command("camera_node", "-p", "rate_hz:=5.0"), tmp_path / "camera.log"), \
            process(node_command("memory_node", "-p", f"memory_dir:={memory_dir}"), tmp_path / "memory.log"), \
            process(node_command("navigate_node"), tmp_path / "navigate.log"):
        def camera_ok() -> bool:
            s = latest(arrays, "camera: frame rate")
            return s is not None and s.level == OK and values(s)["measured_hz"] != ""

        wait_for(camera_ok, 60, lambda: f"the camera's rate, OK\n{latest(arrays, 'camera: frame rate')}")
        camera = latest(arrays, "camera: frame rate")
        assert camera.hardware_id == "synthetic" and float(values(camera)["measured_hz"]) == pytest.approx(5.0, rel=0.1)
        assert values(camera)["target_hz"] == "5"

        wait_for(lambda: latest(arrays, "memory: recording") and latest(arrays, "navigate: goal"), DISCOVERY_S,
                 "the memory's and navigate's diagnostics")
        memory = latest(arrays, "memory: recording")
        assert memory.level == OK and memory.message == "recording (0 entries)", memory
        assert memory.hardware_id == str(memory_dir)
        navigate = latest(arrays, "navigate: goal")
        assert navigate.level == OK and navigate.message == "idle", navigate


def test_a_second_memory_node_reports_an_error(ros, tmp_path):
    arrays = ros.collect(DiagnosticArray, "/diagnostics")
    memory_dir = tmp_path / "memory"
    with process(node_command("memory_node", "-p", f"memory_dir:={memory_dir}"), tmp_path / "first.log"):
        wait_for(lambda: latest(arrays, "memory: recording"), DISCOVERY_S, "the first memory node")
        with process(node_command("memory_node", "-p", f"memory_dir:={memory_dir}", "-r", "__node:=memory_2"),
                     tmp_path / "second.log"):
            wait_for(lambda: latest(arrays, "memory_2: recording"), DISCOVERY_S, "the second memory node")
    second = latest(arrays, "memory_2: recording")
    assert second.level == ERROR and "another memory node writes to" in second.message, second


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_rate_meter_verdicts():
    clock = FakeClock()
    meter = RateMeter(10.0, window_s=5.0, now=clock)
    assert meter.report("frames").level == STALE
    for _ in range(50):  # 10 Hz
        meter.tick()
        clock.t += 0.1
    report = meter.report("frames")
    assert report.level == OK and report.values["measured_hz"] == "10.00", report
    for _ in range(20):  # 5 Hz: far outside 10 %
        meter.tick()
        clock.t += 0.2
    assert meter.report("frames").level == WARN
    clock.t += 0.5  # 5 periods without a frame: stalled
    assert meter.report("frames").level == WARN and "no frames for" in meter.report("frames").message
    clock.t += 5.0  # nothing in the whole window
    assert meter.report("frames").level == ERROR
    slow = RateMeter(0.1, window_s=5.0, now=clock)  # a slow stream's window holds a few of its periods
    assert slow.window_s == pytest.approx(30.0)


def test_status_name_is_diagnostic_updaters():
    assert status_name("bridge", "verifier link") == "bridge: verifier link"
