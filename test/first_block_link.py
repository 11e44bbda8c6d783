"""An in-process verifier link that can carry a decision's first block right behind its Open
(``open_with``, as ``edge.client.VerifierClient`` does), and logs what crossed it in which order.

``LocalVerifierLink`` itself has no ``open_with``: decisions over it take today's sequence (Open,
``Opened``, then the first draft), the fallback of ``edge.first_block``."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable

from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.cloud.session import VerifySession
from edge_spec_ros.wire.messages import ErrorCode, Message, Open, Opened
from edge_spec_ros.wire.verifier_link import Traffic, VerifierError


def event(direction: str, message: Message) -> tuple[str, str, int]:
    """("up" | "down", the message's type, its round or -1)."""
    return direction, type(message).__name__, getattr(message, "round", -1)


class LoggedLocalLink(LocalVerifierLink):
    """``LocalVerifierLink`` (no ``open_with``) that logs every message up and down: ``log``."""

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


class FirstBlockLocalLink(LoggedLocalLink):
    """``LoggedLocalLink`` with ``open_with(request, first)``: ``first(sid)`` runs after the Open was
    handed to the session's thread and before ``Opened`` is awaited."""

    def open(self, request: Open) -> tuple[bytes, Opened]:
        return self.open_with(request, None)

    def open_with(self, request: Open, first: Callable[[bytes], None] | None) -> tuple[bytes, Opened]:
        sid = uuid.uuid4().bytes
        self.traffic[sid] = Traffic()
        session = VerifySession(self.verifier, self.encoder, request)
        jobs: queue.Queue = queue.Queue()
        replies: queue.Queue = queue.Queue()
        self._sessions[sid] = (jobs, replies)
        threading.Thread(target=self._serve, args=(session, jobs, replies), daemon=True).start()
        self.send(sid, request)
        if first is not None:
            first(sid)
        reply = self.receive(sid)
        if not isinstance(reply, Opened):
            raise VerifierError(int(ErrorCode.INTERNAL), f"expected Opened, got {type(reply).__name__}")
        return sid, reply
