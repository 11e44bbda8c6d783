"""The package's library log lines (Python ``logging``: ``edge_spec_ros.edge.modes``' "decision
interrupted ...", the link's, the pre-drafter's) reach ``/rosout`` through a node's logger.

Library code stays free of rclpy and logs with ``logging.getLogger(__name__)``. A node process
installs ``forward_library_logs(node)``: a ``logging.Handler`` on the ``edge_spec_ros`` logger that
writes each record through the node's rclpy logger (console, log file and ``/rosout`` as the node's
own lines, with the library logger's name in front: ``[edge_spec_ros.edge.modes] decision
interrupted ...``). The node's logger is used itself, not a child logger: child loggers reach
``/rosout`` only from Iron on. The ``edge_spec_ros`` logger's level follows the node logger's
(rclpy's severities are Python's numbers), and it stops propagating to the root logger, so a line is
printed once.
"""

from __future__ import annotations

import logging

from rclpy.node import Node

LIBRARY_LOGGER = "edge_spec_ros"


class RosoutHandler(logging.Handler):
    """Python log records → an rclpy logger (and so ``/rosout``)."""

    def __init__(self, node: Node) -> None:
        super().__init__()
        self.logger = node.get_logger()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"[{record.name}] {self.format(record)}"
            # one call site per severity: rclpy refuses a call site whose severity changes
            if record.levelno >= logging.CRITICAL:
                self.logger.fatal(text)
            elif record.levelno >= logging.ERROR:
                self.logger.error(text)
            elif record.levelno >= logging.WARNING:
                self.logger.warning(text)
            elif record.levelno >= logging.INFO:
                self.logger.info(text)
            else:
                self.logger.debug(text)
        except Exception:  # noqa: BLE001 - logging must never raise into library code
            self.handleError(record)


def forward_library_logs(node: Node) -> RosoutHandler:
    """Route the package's Python log records through ``node``'s logger; returns the handler
    (``stop_forwarding`` removes it)."""
    library = logging.getLogger(LIBRARY_LOGGER)
    handler = RosoutHandler(node)
    library.addHandler(handler)
    library.setLevel(int(node.get_logger().get_effective_level()))
    library.propagate = False
    return handler


def stop_forwarding(handler: RosoutHandler) -> None:
    library = logging.getLogger(LIBRARY_LOGGER)
    library.removeHandler(handler)
    if not any(isinstance(h, RosoutHandler) for h in library.handlers):
        library.propagate = True
        library.setLevel(logging.NOTSET)
