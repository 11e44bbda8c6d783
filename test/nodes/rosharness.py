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
from rclpy.executors import SingleThreadedExecutor

from edge_spec_ros.server_process import stop



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


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@contextmanager
def process(args: list[str], log_path) -> Iterator[subprocess.Popen]:
    """Run ``args`` with its output in ``log_path``; terminate it on exit."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            yield proc
        finally:
            stop(proc)


def node_command(executable: str, *ros_args: str) -> list[str]:
    return [sys.executable, "-m", f"edge_spec_ros.nodes.{executable}", "--ros-args", *ros_args]
