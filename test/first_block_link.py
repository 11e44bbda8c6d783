"""In-process verifier links that log what crossed them in which order (``LoggedLocalLink``), and one
without ``open_with`` (``OpenOnlyLink``: a link of a revision before the first block), over which a
decision takes the fallback of ``edge.first_block``: the Open, ``Opened``, then the first draft."""

from __future__ import annotations

from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.wire.messages import Message, Open, Opened


def event(direction: str, message: Message) -> tuple[str, str, int]:
    """("up" | "down", the message's type, its round or -1)."""
    return direction, type(message).__name__, getattr(message, "round", -1)


class LoggedLocalLink(LocalVerifierLink):
    """``LocalVerifierLink`` that logs every message up and down: ``log``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[str, str, int]] = []

    def send(self, sid: bytes, message: Message) -> None:
        self.log.append(event("up", message))
        super().send(sid, message)

    def receive(self, sid: bytes, timeout_s: float | None = None) -> Message:
        message = super().receive(sid, timeout_s)
        self.log.append(event("down", message))
        return message


class OpenOnlyLink:
    """The verifier-link protocol without ``open_with``: ``LoggedLocalLink``'s open, send, receive and end."""

    def __init__(self, *args, **kwargs) -> None:
        self.inner = LoggedLocalLink(*args, **kwargs)
        self.log = self.inner.log
        self.traffic = self.inner.traffic

    def open(self, request: Open) -> tuple[bytes, Opened]:
        return self.inner.open(request)

    def send(self, sid: bytes, message: Message) -> None:
        self.inner.send(sid, message)

    def receive(self, sid: bytes, timeout_s: float | None = None) -> Message:
        return self.inner.receive(sid, timeout_s)

    def end(self, sid: bytes) -> None:
        self.inner.end(sid)
