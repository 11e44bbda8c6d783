"""In-process verifier links that log what crossed them in which order (``LoggedLocalLink``), and one
without ``open_with`` (``OpenOnlyLink``: a link of a revision before the first block), over which a
decision takes the fallback of ``edge.first_block``: the Open, ``Opened``, then the first draft."""

from __future__ import annotations

import threading
from collections.abc import Callable

from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.wire.messages import DraftBlock, Message, Open, Opened

BLOCK_WAIT_S = 10.0  # how long Opened is held for a first block promised behind the Open


def event(direction: str, message: Message) -> tuple[str, str, int]:
    """("up" | "down", the message's type, its round or -1)."""
    return direction, type(message).__name__, getattr(message, "round", -1)


class LoggedLocalLink(LocalVerifierLink):
    """``LocalVerifierLink`` that logs every message up and down: ``log``. In process ``Opened`` comes
    within milliseconds, so when ``open_with`` is given a first block (which the robot drafts on a
    thread of its own meanwhile) ``Opened`` is read only once that block has gone up, as over a link
    whose round trip is longer than the drafting, or after ``BLOCK_WAIT_S``: a robot that drafted
    the block only after ``Opened`` would log it after ``Opened``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[str, str, int]] = []
        self._first_sent = threading.Event()
        self._first_promised = False

    def open_with(self, request: Open, first: Callable[[bytes], None] | None) -> tuple[bytes, Opened]:
        self._first_sent.clear()
        self._first_promised = first is not None
        return super().open_with(request, first)

    def send(self, sid: bytes, message: Message) -> None:
        self.log.append(event("up", message))
        super().send(sid, message)
        if isinstance(message, DraftBlock) and message.round == 0 and not message.partial:
            self._first_sent.set()

    def receive(self, sid: bytes, timeout_s: float | None = None) -> Message:
        message = super().receive(sid, timeout_s)
        if isinstance(message, Opened) and self._first_promised:
            self._first_sent.wait(BLOCK_WAIT_S)
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
