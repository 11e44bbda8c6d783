"""The verifier-link protocol: what the robot's decoder needs from a link to the verifier.

Three links implement it: ``edge.client.VerifierClient`` (ZeroMQ, the network), ``edge.local_link.
LocalVerifierLink`` (in process, tests) and ``nodes.ros_link.RosVerifierLink`` (ROS topics through
``bridge_node``). ``edge.modes.EdgeDecoder`` is written against this protocol only.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from edge_spec_ros.wire.messages import Message, Open, Opened


@runtime_checkable
class VerifierLink(Protocol):
    traffic: dict  # session id -> bytes and messages each way (edge.client.Traffic)

    def open(self, request: Open) -> tuple[bytes, Opened]:
        """Open a decision: its session id and the verifier's acknowledgement (after prefill)."""

    def send(self, sid: bytes, message: Message) -> None:
        """Send a draft block or a generation request of session ``sid``."""

    def receive(self, sid: bytes, timeout_s: float | None = None) -> Message:
        """The session's next reply; raises VerifierError on an error reply, VerifierTimeout after
        ``timeout_s`` (None: the link's reply timeout), KeyError for an unknown or ended session."""

    def end(self, sid: bytes) -> None:
        """Close the decision and forget the session."""
