"""An in-process verifier link: the robot's decoders against a ``VerifySession`` with no sockets.

It implements the verifier-link protocol (``wire.verifier_link.VerifierLink``), so every mode of
``edge.modes.EdgeDecoder`` runs unchanged on one machine. Requests are served in
order by one worker thread, as the server does per session. Statistical exactness tests use it to
run thousands of decodes with small models; the network tests show the real server gives the same
tokens.
"""

from __future__ import annotations

import queue
import threading
import uuid

from edge_spec_ros.cloud.session import RequestError, VerifySession
from edge_spec_ros.edge.client import Traffic, VerifierError, VerifierTimeout
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.wire.codec import encoded_size
from edge_spec_ros.wire.messages import (
    Close, DraftBlock, Error, ErrorCode, Generate, Message, Open, Opened,
)

REPLY_TIMEOUT_S = 60.0


class LocalVerifierLink:
    def __init__(self, verifier: EarlyExitVerifier, encoder: PromptEncoder,
                 reply_timeout_s: float = REPLY_TIMEOUT_S) -> None:
        self.verifier = verifier
        self.encoder = encoder
        self.reply_timeout_s = reply_timeout_s
        self.traffic: dict[bytes, Traffic] = {}
        self._sessions: dict[bytes, tuple[VerifySession | None, queue.Queue, queue.Queue]] = {}

    def open(self, request: Open) -> tuple[bytes, Opened]:
        sid = uuid.uuid4().bytes
        self.traffic[sid] = Traffic()
        try:
            session = VerifySession(self.verifier, self.encoder, request)
        except RequestError as exc:
            raise VerifierError(int(ErrorCode.BAD_REQUEST), str(exc)) from None
        jobs: queue.Queue = queue.Queue()
        replies: queue.Queue = queue.Queue()
        self._sessions[sid] = (session, jobs, replies)
        threading.Thread(target=self._serve, args=(sid, session, jobs, replies), daemon=True).start()
        self._count(sid, request, up=True)
        jobs.put(request)
        reply = self.receive(sid)
        if not isinstance(reply, Opened):
            raise VerifierError(int(ErrorCode.INTERNAL), f"expected Opened, got {type(reply).__name__}")
        return sid, reply

    def send(self, sid: bytes, message: Message) -> None:
        self._count(sid, message, up=True)
        self._sessions[sid][1].put(message)

    def receive(self, sid: bytes, timeout_s: float | None = None) -> Message:
        try:
            msg = self._sessions[sid][2].get(timeout=self.reply_timeout_s if timeout_s is None else timeout_s)
        except queue.Empty:
            raise VerifierTimeout("no reply from the in-process verifier") from None
        if isinstance(msg, Error):
            raise VerifierError(msg.code, msg.message)
        self._count(sid, msg, up=False)
        return msg

    def end(self, sid: bytes) -> None:
        self._count(sid, Close(), up=True)
        session = self._sessions.pop(sid, None)
        if session is not None:
            session[1].put(None)

    def _serve(self, sid: bytes, session: VerifySession, jobs: queue.Queue, replies: queue.Queue) -> None:
        while (msg := jobs.get()) is not None:
            try:
                if isinstance(msg, Open):
                    replies.put(session.prefill())
                elif isinstance(msg, DraftBlock):
                    session.check_draft(msg)
                    if msg.partial:
                        session.prepare(msg)
                        continue
                    session.next_round += 1
                    session.verify(msg, replies.put)
                elif isinstance(msg, Generate):
                    session.generate(msg, replies.put)
            except RequestError as exc:
                replies.put(Error(int(ErrorCode.BAD_REQUEST), str(exc)))

    def _count(self, sid: bytes, msg: Message, up: bool) -> None:
        t = self.traffic.get(sid)
        if t is not None:
            t.add(encoded_size(sid, msg), up)
