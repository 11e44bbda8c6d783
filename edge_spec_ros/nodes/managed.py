"""Managed (lifecycle) nodes: the robot-side nodes that own resources or command motion.

A ``ManagedNode`` is an ``rclpy.lifecycle.LifecycleNode`` (the same class on Humble, Jazzy and Kilted)
with the standard states and services (``<node>/change_state``, ``<node>/get_state``, ...), so nav2's
``lifecycle_manager`` or ``ros2 lifecycle set`` can drive it. A subclass stays thin:

- its constructor declares its parameters (``nodes/params.py`` ``declare_config``) and may create its
  publishers, subscriptions and timers, whose callbacks do nothing unless ``self.active``;
- ``configure()`` does the heavy work (load models, connect, open devices), ``activate()`` starts
  deciding or commanding, ``deactivate()`` stops (the action node: zero velocity, then no more
  commands), ``cleanup()`` releases what ``configure()`` took. Each raises on failure, with the reason.

Transitions: a ``configure()`` that raises fails the transition (the node stays unconfigured; what it
took is released by ``cleanup()``) and logs why; so does ``activate()`` (``deactivate()`` runs, the node
stays inactive). A ``deactivate()`` that raises is an error: the node runs ``cleanup()`` and ends
unconfigured, stopped. ``shutdown`` deactivates an active node, then cleans up. ``self.active`` is
false from the first moment of a deactivation, so worker threads stop at once.

``autostart`` (a parameter, default true): the process configures and activates the node at start-up
(``bring_up``, called by ``nodes/lifecycle.py`` ``main_for`` and by the one-process bringup), so
``ros2 launch`` brings the stack up as plain nodes did; a configure that fails there ends the process
with status 1, as a node whose constructor failed did. ``autostart:=false`` leaves the node
unconfigured until a lifecycle manager drives it. On SIGTERM/SIGINT ``close()`` runs ``shutdown``.

rclpy differences handled here: Humble's ``trigger_*`` raise ``RCLError`` for a transition that is not
available from the current state (Iron and later return ERROR), so ``bring_up`` and ``close`` only ask
for available transitions; rclpy swallows an exception of a transition callback without a word, so
each hook's exception is caught and logged here. A ``change_state`` request for a transition that is
not available from the current state reaches rclpy's own service callback: on Humble it raises in the
executor (the process ends; nav2's lifecycle manager never asks for one), from Iron on it is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node

from edge_spec_ros.nodes.params import declare_config, doc

UNCONFIGURED, INACTIVE, ACTIVE, FINALIZED = "unconfigured", "inactive", "active", "finalized"


@dataclass(frozen=True)
class ManagedConfig:
    autostart: bool = field(default=True, metadata=doc(
        "configure and activate at start-up (as `ros2 launch` runs the stack); false: stay unconfigured "
        "until a lifecycle manager (nav2's lifecycle_manager, `ros2 lifecycle set`) drives the transitions"))


class ManagedNode(LifecycleNode):
    """A lifecycle node whose transitions run ``configure``/``activate``/``deactivate``/``cleanup``."""

    def __init__(self, node_name: str, **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        self.lifecycle_state = UNCONFIGURED  # the lifecycle state as the last transition left it
        self.last_failure = ""  # why the last transition failed ("" : it did not)
        self.managed_config = declare_config(self, ManagedConfig)

    # --- what a subclass implements ----------------------------------------------------------------
    def configure(self) -> None:
        """Load and connect (heavy work); raise with the reason on failure."""

    def activate(self) -> None:
        """Start deciding or commanding."""

    def deactivate(self) -> None:
        """Stop: no more decisions or commands (``self.active`` is already false)."""

    def cleanup(self) -> None:
        """Release what ``configure`` took (also after a ``configure`` that failed half-way)."""

    # --- state --------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.lifecycle_state == ACTIVE

    @property
    def autostart(self) -> bool:
        return self.managed_config.autostart

    # --- rclpy's transition callbacks -----------------------------------------------------------------
    def _lifecycle_step(self, what: str, hook: Callable[[], None]) -> bool:
        try:
            hook()
        except Exception as exc:  # noqa: BLE001 - rclpy would swallow it: the reason is logged here
            self.last_failure = f"{what} failed: {exc}"
            self.get_logger().error(self.last_failure)
            return False
        return True

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.last_failure = ""
        if not self._lifecycle_step("configure", self.configure):
            self._lifecycle_step("cleanup after a failed configure", self.cleanup)
            return TransitionCallbackReturn.FAILURE
        self.lifecycle_state = INACTIVE
        self.get_logger().info("configured")
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.last_failure = ""
        if not self._lifecycle_step("activate", self.activate):
            self._lifecycle_step("deactivate after a failed activate", self.deactivate)
            return TransitionCallbackReturn.FAILURE
        self.lifecycle_state = ACTIVE
        self.get_logger().info("active")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.lifecycle_state = INACTIVE  # workers see it at once
        if not self._lifecycle_step("deactivate", self.deactivate):
            return TransitionCallbackReturn.ERROR  # → on_error: cleaned up, unconfigured
        self.get_logger().info("inactive")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        ok = self._lifecycle_step("cleanup", self.cleanup)
        self.lifecycle_state = UNCONFIGURED
        return super().on_cleanup(state) if ok else TransitionCallbackReturn.ERROR

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        was = self.lifecycle_state
        self.lifecycle_state = FINALIZED
        if was == ACTIVE:
            self._lifecycle_step("deactivate", self.deactivate)
        if was in (ACTIVE, INACTIVE):
            self._lifecycle_step("cleanup", self.cleanup)
        self.get_logger().info("shut down")
        return super().on_shutdown(state)

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """After a failed deactivate or cleanup: stop and release what can be, end unconfigured."""
        self.lifecycle_state = UNCONFIGURED
        self._lifecycle_step("deactivate (error processing)", self.deactivate)
        self._lifecycle_step("cleanup (error processing)", self.cleanup)
        return TransitionCallbackReturn.SUCCESS

    # --- driven by the process ------------------------------------------------------------------------
    def bring_up(self) -> None:
        """Configure and activate (autostart); RuntimeError with the reason when a step fails."""
        if self.lifecycle_state == UNCONFIGURED and self.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            raise RuntimeError(f"{self.get_name()}: {self.last_failure or 'configure failed'}")
        if self.lifecycle_state == INACTIVE and self.trigger_activate() != TransitionCallbackReturn.SUCCESS:
            raise RuntimeError(f"{self.get_name()}: {self.last_failure or 'activate failed'}")

    def close(self) -> None:
        """The process ends: shutdown (an active node deactivates first: the robot stops)."""
        if self.lifecycle_state != FINALIZED:
            self.trigger_shutdown()


def bring_up(nodes: Iterable[Node]) -> None:
    """Configure and activate every managed node whose ``autostart`` is true, in order."""
    for node in nodes:
        if isinstance(node, ManagedNode) and node.autostart:
            node.bring_up()
