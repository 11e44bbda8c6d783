"""Process life cycle of the package's nodes: spin on one thread, stop cleanly on SIGINT and SIGTERM.

rclpy's own signal handlers shut the context down the moment a signal arrives, so a node can no
longer publish its last zero velocity (``RCLError: publisher's context is invalid``). Here rclpy's
handlers are off; SIGINT and SIGTERM only set an event. The spin loop notices it within
``SPIN_PERIOD_S``, then, in order: every node's ``close()`` (stop its workers and join them, publish
its final messages: the context is still valid), ``FLUSH_S`` more of spinning so those messages are
delivered, the executor's shutdown, ``destroy_node`` and ``rclpy.try_shutdown``. Nodes that own threads or command motion implement ``close()``.

Managed nodes (``nodes/managed.py``): ``main_for`` configures and activates each one whose
``autostart`` is true before it spins (a configure that fails: one error line, status 1); the others
wait, unconfigured, for a lifecycle manager. Their ``close()`` is the ``shutdown`` transition: an
active node deactivates first (the action node publishes zero velocity), then releases what it took.
The process's library log lines (Python ``logging``) go to ``/rosout`` through its first node's logger
(``nodes/rosout.py``).

One single-threaded executor per process: rclpy's multi-threaded executor spends most of its time
rebuilding wait sets under the GIL, and no callback of this package blocks (work that blocks runs on
the nodes' own worker threads).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence

import rclpy
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from edge_spec_ros.nodes.managed import bring_up
from edge_spec_ros.nodes.rosout import forward_library_logs, stop_forwarding

SPIN_PERIOD_S = 0.1  # how often the spin loop looks at the stop event (the reaction time to a signal)
FLUSH_S = 0.2  # after closing, keep spinning this long so the final messages reach their subscribers


class StopSignal:
    """SIGINT/SIGTERM → ``event``; the previous handlers come back on ``restore``."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        self.signum = signum
        self.event.set()

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def init(args: list[str] | None = None) -> StopSignal:
    """``rclpy.init`` without rclpy's signal handlers, and the package's own stop signal."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    return StopSignal()


def spin_until(executor: SingleThreadedExecutor, done: Callable[[], bool]) -> None:
    """Spin ``executor`` until ``done()`` or the context ends."""
    try:
        while rclpy.ok() and not done():
            executor.spin_once(timeout_sec=SPIN_PERIOD_S)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


def close_all(nodes: Sequence[Node], executor: SingleThreadedExecutor | None) -> None:
    """Close every node (workers joined, final messages out), then tear down executor, nodes, rclpy."""
    for node in nodes:
        close = getattr(node, "close", None)
        if close is not None:
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - one node's failure must not keep the others moving
                node.get_logger().error(f"close failed: {exc!r}")
    if executor is not None:
        end = time.monotonic() + FLUSH_S
        while rclpy.ok() and time.monotonic() < end:
            executor.spin_once(timeout_sec=FLUSH_S / 4)
        executor.shutdown(timeout_sec=1.0)
    for node in nodes:
        node.destroy_node()
    rclpy.try_shutdown()


def main_for(*factories: Callable[[], Node], args: list[str] | None = None) -> int:
    """The ``main()`` of a node executable: build the nodes, spin until a signal, close cleanly.

    A node that cannot start (a camera that does not open, an invalid parameter, a managed node whose
    autostart configure fails) is reported on one line and the process exits with status 1.
    """
    stop = init(args)
    nodes: list[Node] = []
    executor = None
    forwarding = None
    status = 0
    try:
        for factory in factories:
            nodes.append(factory())
            if forwarding is None:
                forwarding = forward_library_logs(nodes[0])
        executor = SingleThreadedExecutor()
        for node in nodes:
            executor.add_node(node)
        bring_up(nodes)
        spin_until(executor, stop.event.is_set)
    except (ValueError, RuntimeError, OSError, ParameterException) as exc:
        rclpy.logging.get_logger("edge_spec_ros").fatal(str(exc))
        status = 1
    except KeyboardInterrupt:
        pass
    finally:
        close_all(nodes, executor)
        if forwarding is not None:
            stop_forwarding(forwarding)
        stop.restore()
    return status
