"""An in-process verifier link: the robot's decoders against a ``VerifySession`` with no sockets.

It implements the verifier-link protocol (``wire.verifier_link.VerifierLink``, with ``open_with``: a
decision's first block rides right behind its Open), so every mode of ``edge.modes.EdgeDecoder`` runs
unchanged on one machine. Each session's requests go through the
session's one entry point (``VerifySession.handle``, the state machine the server runs too) and are
served in order by one thread per session, as the server's workers serve a session. Statistical
exactness tests use it to run thousands of decodes with small models; the network tests show the
real server gives the same tokens.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable

from edge_spec_ros.cloud.limits import RequestError
from edge_spec_ros.cloud.session import VerifySession
from edge_spec_ros.models.grammar import GrammarBook
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.wire.codec import encoded_size
from edge_spec_ros.wire.messages import Close, Error, ErrorCode, Message, Open, Opened
from edge_spec_ros.wire.verifier_link import Traffic, VerifierError, VerifierTimeout, send_first

REPLY_TIMEOUT_S = 60.0


class LocalVerifierLink:
    def __init__(self, verifier: EarlyExitVerifier, encoder: PromptEncoder,
                 reply_timeout_s: float = REPLY_TIMEOUT_S, grammars: GrammarBook | None = None) -> None:
        """``grammars``: the book the sessions compile an Open's grammar from (None: the encoder's
        tokenizer's, as the server's sessions do)."""
        self.verifier = verifier
        self.encoder = encoder
        self.grammars = grammars
        self.reply_timeout_s = reply_timeout_s
        self.traffic: dict[bytes, Traffic] = {}
        self._sessions: dict[bytes, tuple[queue.Queue, queue.Queue]] = {}

    def open(self, request: Open) -> tuple[bytes, Opened]:
        return self.open_with(request, None)

    def open_with(self, request: Open, first: Callable[[bytes], None] | None) -> tuple[bytes, Opened]:
        """``open``, calling ``first(sid)`` once the Open is queued to the session's thread and before
        waiting for ``Opened``: the first block rides right behind the Open (``edge.first_block``), as
        over the ZeroMQ client and the ROS link."""
        sid = uuid.uuid4().bytes
        self.traffic[sid] = Traffic()
        session = VerifySession(self.verifier, self.encoder, request, grammars=self.grammars)
        jobs: queue.Queue = queue.Queue()
        replies: queue.Queue = queue.Queue()
        self._sessions[sid] = (jobs, replies)
        threading.Thread(target=self._serve, args=(session, jobs, replies), daemon=True).start()
        self.send(sid, request)
        send_first(self, sid, first)
        try:
            reply = self.receive(sid)
        except VerifierError:
            self.end(sid)
            raise
        if not isinstance(reply, Opened):
            raise VerifierError(int(ErrorCode.INTERNAL), f"expected Opened, got {type(reply).__name__}")
        return sid, reply

    def send(self, sid: bytes, message: Message) -> None:
        self._count(sid, message, up=True)
        self._sessions[sid][0].put(message)

    def receive(self, sid: bytes, timeout_s: float | None = None) -> Message:
        try:
            msg = self._sessions[sid][1].get(timeout=self.reply_timeout_s if timeout_s is None else timeout_s)
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
            session[0].put(None)

    def _serve(self, session: VerifySession, jobs: queue.Queue, replies: queue.Queue) -> None:
        """One session's requests, in order: admitted (and checked) by the session, then its work."""
        while (msg := jobs.get()) is not None:
            try:
                for _ in session.handle(msg, replies.put):
                    pass
            except RequestError as exc:
                replies.put(Error(int(exc.code), str(exc)))

    def _count(self, sid: bytes, msg: Message, up: bool) -> None:
        t = self.traffic.get(sid)
        if t is not None:
            t.add(encoded_size(sid, msg), up)
