"""The verifier-link protocol: what the robot's decoder needs from a link to the verifier.

Three links implement it: ``edge.client.VerifierClient`` (ZeroMQ, the network),
``cloud.local_link.LocalVerifierLink`` (in process, tests) and ``nodes.ros_link.RosVerifierLink``
(ROS topics through ``bridge_node``). ``edge.modes.EdgeDecoder`` is written against this protocol
only. The protocol's errors and byte counters live here with it, so every link raises and counts
the same things without importing another link.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from edge_spec_ros.wire.messages import ErrorCode, Message, Open, Opened


class VerifierError(RuntimeError):
    """An error reply from the verifier: ``code`` is its ErrorCode (0: the robot's own protocol error)."""

    def __init__(self, code: int, message: str) -> None:
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        super().__init__(f"verifier error {name}: {message}")
        self.code = code


class VerifierTimeout(VerifierError):
    """No reply within the wait's bound."""

    def __init__(self, message: str) -> None:
        RuntimeError.__init__(self, message)
        self.code = -1


class VerifierLost(VerifierError):
    """The link's heartbeat says the verifier is gone (``wire/heartbeat.py``): no wait on it is
    worth finishing. A decision interrupted by it is not opened again until the link is alive."""

    CODE = -3  # also the BridgeStatus code of a LINK_LOST the bridge's heartbeat found

    def __init__(self, message: str) -> None:
        RuntimeError.__init__(self, message)
        self.code = self.CODE


class VerifierAuthError(VerifierError):
    """The connection's security handshake failed: no request can reach the verifier."""

    def __init__(self, message: str) -> None:
        RuntimeError.__init__(self, message)
        self.code = -2


@dataclass
class Traffic:
    """Bytes and messages of one session, both directions."""

    up_bytes: int = 0
    down_bytes: int = 0
    up_msgs: int = 0
    down_msgs: int = 0

    def add(self, nbytes: int, up: bool) -> None:
        if up:
            self.up_bytes += nbytes
            self.up_msgs += 1
        else:
            self.down_bytes += nbytes
            self.down_msgs += 1


@runtime_checkable
class VerifierLink(Protocol):
    traffic: dict[bytes, Traffic]  # session id -> bytes and messages each way

    def open(self, request: Open) -> tuple[bytes, Opened]:
        """Open a decision: its session id and the verifier's acknowledgement (after prefill)."""

    def send(self, sid: bytes, message: Message) -> None:
        """Send a draft block or a generation request of session ``sid``."""

    def receive(self, sid: bytes, timeout_s: float | None = None) -> Message:
        """The session's next reply; raises VerifierError on an error reply, VerifierTimeout after
        ``timeout_s`` (None: the link's reply timeout), KeyError for an unknown or ended session."""

    def end(self, sid: bytes) -> None:
        """Close the decision and forget the session."""


def send_first(link: VerifierLink, sid: bytes, first: Callable[[bytes], None] | None) -> None:
    """A link's ``open_with``, once the Open of ``sid`` is on its way: ``first(sid)`` drafts and sends the
    first block behind it (edge/first_block.py); when it raises, the decision is ended on the link (its
    session closed on the server) and the error goes on."""
    if first is None:
        return
    try:
        first(sid)
    except BaseException:
        link.end(sid)
        raise
