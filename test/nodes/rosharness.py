"""rclpy in the test process, and nodes in separate processes (DDS over shared memory only)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import rclpy
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.executors import SingleThreadedExecutor

from edge_spec_ros import warm_start
from edge_spec_ros.nodes.matched import matched_publishers, matched_subscriptions
from edge_spec_ros.server_process import stop


EXECUTOR_CALL_S = 10.0  # a call handed to a spinning executor runs within this


class RosHarness:
    """A test node spinning in a background thread, with helpers to publish and collect."""

    def __init__(self) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("test_harness", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def collect(self, msg_type, topic: str, qos=10) -> list:
        received: list = []
        self.node.create_subscription(msg_type, topic, received.append, qos)
        return received

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def statuses(arrays: list, name: str) -> list:
    """The DiagnosticStatus entries named ``name`` in the DiagnosticArrays collected so far."""
    return [s for a in list(arrays) for s in a.status if s.name == name]


def odometry_fresh(arrays: list, within_s: float = 0.5, name: str = "action: motion") -> bool:
    """Whether the action node said (on /diagnostics, ``odometry_age_s``) that its odometry is fresh: a
    decision before that is refused with "no odometry", as on a robot whose odometry has not come yet."""
    ages = (v.value for s in statuses(arrays, name) if s.level == DiagnosticStatus.OK
            for v in s.values if v.key == "odometry_age_s")
    return any(age not in ("", "none") and float(age) <= within_s for age in ages)


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str | Callable[[], str]) -> None:
    """Poll ``predicate`` until it holds; else fail naming ``what`` (a callable: evaluated at the
    failure, e.g. to show a process's log as it is then)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what() if callable(what) else what}")


def in_executor(executor, call: Callable[[], object], timeout_s: float = EXECUTOR_CALL_S):
    """``call()`` run in the thread that spins ``executor``, and its result. An action client's requests
    (``send_goal_async``, a goal handle's ``get_result_async`` and ``cancel_goal_async``) go through here:
    before rclpy's fix of ros2/rclpy#1123 (which Jazzy's 7.1.6 wheels lack) a response the spinning
    executor took before the request had recorded its sequence number was dropped ("Ignoring unexpected
    goal response") and the request's future never completed. Sent from the executor's own thread, the
    request is recorded before the executor can take its response."""
    task = executor.create_task(call)
    wait_for(task.done, timeout_s, "the executor to send the request")
    return task.result()


def service_answers(client, request, timeout_s: float, what: str, attempt_s: float = 2.0):
    """Call ``client`` with ``request`` until an answer arrives; returns it. ``service_is_ready`` only
    says that our requests reach the server, not that its replies reach us: a reply sent before the
    server's reply writer has matched our reader is lost, and the call waits for ever. Use it only
    with a request that changes nothing (a refused one) or as the handshake before one that does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        future = client.call_async(request)
        end = min(deadline, time.monotonic() + attempt_s)
        while time.monotonic() < end and not future.done():
            time.sleep(0.02)
        if future.done():
            return future.result()
        client.remove_pending_request(future)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def set_parameters(ros: RosHarness, node: str, timeout_s: float, atomically: bool = False, **values) -> list:
    """Set ``values`` on ``node`` (its fully qualified name) through its parameter service, as
    ``ros2 param set`` does; the results (one per parameter, or the atomic call's one). A request
    without parameters, which changes nothing, is the handshake (``service_answers``), so the real
    request's reply cannot be lost."""
    from rcl_interfaces.srv import SetParameters, SetParametersAtomically
    from rclpy.parameter import Parameter

    kind, service = (SetParametersAtomically, "set_parameters_atomically") if atomically else \
        (SetParameters, "set_parameters")
    client = ros.node.create_client(kind, f"{node}/{service}")
    try:
        assert client.wait_for_service(timeout_sec=timeout_s), f"{node}/{service}"
        service_answers(client, kind.Request(), timeout_s, f"{node}/{service}'s replies")
        request = kind.Request()
        request.parameters = [Parameter(n, value=v).to_parameter_msg() for n, v in values.items()]
        future = client.call_async(request)
        wait_for(future.done, timeout_s, f"{node}/{service}")
    finally:
        ros.node.destroy_client(client)
    return [future.result().result] if atomically else list(future.result().results)


@contextmanager
def process(args: list[str], log_path) -> Iterator[warm_start.Process]:
    """Run ``args`` with its output in ``log_path``; terminate it on exit."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        proc = warm_start.popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            yield proc
        finally:
            stop(proc)


def node_command(executable: str, *ros_args: str) -> list[str]:
    return [sys.executable, "-m", f"edge_spec_ros.nodes.{executable}", "--ros-args", *ros_args]


def drafter_matched_instruction(log_text: str) -> int:
    """How many publishers of ``instruction`` the drafter's subscription has matched, by its log (0
    before the first line). A publisher's ``get_subscription_count`` only says the publisher matched
    the drafter; a message it sends before the drafter has matched it back is lost."""
    return matched_publishers(log_text, "instruction", node="drafter")


def navigate_matched_instruction(log_text: str) -> int:
    """How many subscriptions of ``instruction`` navigate_node's publisher has matched, by its log: a
    goal's instruction goes only to those (its own subscription counts)."""
    return matched_subscriptions(log_text, "instruction", node="navigate")
