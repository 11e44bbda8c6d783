"""The robot's side of DRAGON (Liu et al. 2025): its LM over its private memory, with the cloud's LM
over the cloud's documents, aggregated token by token with Speculative Aggregation.

Legend: l ≡ robot (fixed label); D^l — the robot's memory entries (dragon/stores.RobotMemory: what it
saw, where and when; what it was told); p^l_t, log h̃^l_t — its local aggregate; x_t — target token.

``RobotDragon.decode(query, link)`` retrieves the top-k memory entries for the query, prefills one
KV cache per entry, opens the decision on the link (DragonOpen: the query, decoding parameters and
the robot's tokenizer fingerprint, nothing of the memory), checks that the cloud's DragonOpened
names the same vocabulary size and tokenizer fingerprint, and runs a ``dragon.peer.DragonPeer``
named robot until the decision ends. The memory's text, ids, caches and scores never leave this object: the peer sends drafts
(x^l_t, log h̃^l_t, p^l_t or p^l_t(x^l_t)) and target tokens only.

A link is anything with ``open(DragonOpen, cancel) -> DragonOpened`` (None when ``cancel()`` turned
true first), ``send(msg)``, ``receive(timeout_s)`` (a message or None) and ``close()``: ``ZmqDragonLink`` to a verifier server started with
``serve --documents DIR``, or dragon/session.LocalDragonLink in one process.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import zmq

from edge_spec_ros.dragon.aggregation import ROBOT
from edge_spec_ros.dragon.document_lm import PromptIds, build_side
from edge_spec_ros.dragon.peer import DragonPeer, DragonTrace, FrameLog, PeerConfig, run_peer
from edge_spec_ros.dragon.stores import RobotMemory
from edge_spec_ros.dragon.wire import (
    DRAGON_PROTOCOL, DragonMessage, DragonOpen, DragonOpened, check_fingerprint, check_tokenizer,
)
from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.spec.sampling import SamplingConfig
from edge_spec_ros.wire.codec import decode, encode
from edge_spec_ros.wire.emulator import LinkEmulator, LinkShape
from edge_spec_ros.wire.link import CurveKeys
from edge_spec_ros.wire.messages import Close, Envelope, Error


CANCEL_POLL_S = 0.05  # while waiting for the cloud, a cancellable decision looks at cancel() this often


class DragonLink(Protocol):
    def open(self, request: DragonOpen, cancel: Callable[[], bool] | None = None) -> DragonOpened | None: ...

    def send(self, msg: DragonMessage) -> None: ...

    def receive(self, timeout_s: float) -> DragonMessage | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class DragonConfig:
    """One DRAGON decision's parameters on the robot (the cloud's count of documents included)."""

    max_new_tokens: int = 48
    temperature: float = 0.0
    seed: int = 0
    robot_top_k: int = 2  # memory entries the robot's LM reads
    cloud_top_k: int = 2  # documents the cloud's LM reads
    aggregator: str = "robot"  # who aggregates position 0
    policy: str = "dragon"  # dragon (eq. 8) | robot | cloud
    payload: str = "full"  # full | on_demand (exact, fewer bytes)
    max_queue: int = 4
    relevance_scale: float = 1.0
    relevance_every: int = 1
    timeout_s: float = 30.0  # with nothing to do, how long to wait for the cloud
    down_delay_s: float = 0.0  # benches: the downlink the server emulates for this decision
    down_jitter_s: float = 0.0
    down_bandwidth_bps: float = 0.0


@dataclass(frozen=True)
class DragonDecision:
    tokens: tuple[int, ...]
    trace: DragonTrace
    memory_entries: int  # how many entries the robot's LM read (they stayed on the robot)
    prefill_s: float  # the robot's retrieval + per-entry prefill
    cloud_prefill_s: float
    decode_s: float  # from sending the open to the last target token
    first_token_s: float  # from sending the open to the first target token (+ prefill_s: TTFT)
    cancelled: bool = False  # ``cancel()`` ended it before the end of the answer: tokens is a prefix


class RobotDragon:
    """The robot's DRAGON decoder over its memory. ``tokenizer_fingerprint``: the robot's tokenizer's
    (models/tokenizer.tokenizer_fingerprint of the tokenizer behind ``prompt_ids`` and ``decode_text``);
    the open carries it and the cloud's reply must name the same."""

    def __init__(self, stack: DecoderStack, memory: RobotMemory, prompt_ids: PromptIds,
                 decode_text: Callable[[Sequence[int]], str], config: DragonConfig = DragonConfig(),
                 clock: Callable[[], float] = time.monotonic, *, tokenizer_fingerprint: str) -> None:
        check_fingerprint(tokenizer_fingerprint, "RobotDragon's tokenizer_fingerprint")
        self.stack, self.memory, self.prompt_ids, self.decode_text = stack, memory, prompt_ids, decode_text
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self._memory_stamp = _file_stamp(memory)
        self.config, self.clock = config, clock
        self.last_peer: DragonPeer | None = None  # the last decision's state (tests, benches)
        self.last_side = None

    def _reload_if_written(self) -> None:
        """The memory file changed since it was read (another process, e.g. nodes/memory_node, appends
        to it): read it again, so the decision retrieves what the robot saw until now."""
        stamp = _file_stamp(self.memory)
        if stamp != self._memory_stamp and self.memory.directory is not None:
            self.memory = RobotMemory(self.memory.directory, fsync=self.memory.fsync)
            self._memory_stamp = _file_stamp(self.memory)

    def request(self, query: str, stop_tokens: Sequence[int] = ()) -> DragonOpen:
        c = self.config
        return DragonOpen(query=query, max_new_tokens=c.max_new_tokens, temperature=c.temperature, seed=c.seed,
                          stop_tokens=tuple(int(t) for t in stop_tokens), top_k=c.cloud_top_k,
                          aggregator=c.aggregator, policy=c.policy, payload=c.payload, max_queue=c.max_queue,
                          tokenizer_fingerprint=self.tokenizer_fingerprint, down_delay_s=c.down_delay_s,
                          down_jitter_s=c.down_jitter_s, down_bandwidth_bps=c.down_bandwidth_bps)

    def decode(self, query: str, link: DragonLink, stop_tokens: Sequence[int] = (),
               cancel: Callable[[], bool] | None = None) -> DragonDecision:
        """Answer ``query`` over ``link``. ``cancel()`` turning true (a new instruction) ends the
        decision between tokens, or within ``CANCEL_POLL_S`` while waiting for the cloud: the link is
        closed (the cloud drops the session) and the tokens so far come back with ``cancelled``."""
        c = self.config
        start = self.clock()
        self._reload_if_written()
        hits = self.memory.top_k(query, c.robot_top_k)
        side = build_side(self.stack, self.memory, hits, query, self.prompt_ids, self.decode_text,
                          SamplingConfig(c.temperature), c.relevance_scale, c.relevance_every)
        prefill_s = self.clock() - start
        request = self.request(query, stop_tokens)
        cancelled = cancel if cancel is not None else (lambda: False)
        none = DragonDecision((), DragonTrace((), (), (), (), 0, 0, 0, 0, 0), side.documents, prefill_s, 0.0,
                              0.0, float("nan"), cancelled=True)
        if cancelled():  # before anything is sent: the cloud never hears of it
            link.close()
            return none
        t0 = self.clock()
        try:
            opened = link.open(request, cancel)
        except BaseException:
            link.close()  # a refused or timed-out open: free the link (its Close is harmless)
            raise
        if opened is None:  # cancelled while the cloud retrieved and prefilled: its Close drops the session
            link.close()
            return none
        try:
            self._check_opened(opened)
        except ValueError:
            link.close()
            raise
        peer = DragonPeer(ROBOT, side.next_distribution, PeerConfig.from_open(request), self.stack.vocab_size,
                          side.rollback, self.clock)
        self.last_peer, self.last_side = peer, side

        def send(messages: list[DragonMessage]) -> None:
            for m in messages:
                link.send(m)

        def receive(timeout_s: float) -> DragonMessage | None:  # waits in short slices while cancellable
            if cancel is None:
                return link.receive(timeout_s)
            deadline = time.monotonic() + timeout_s
            while True:
                msg = link.receive(min(CANCEL_POLL_S, max(0.0, deadline - time.monotonic())))
                if msg is not None or cancelled() or time.monotonic() >= deadline:
                    return msg

        try:
            run_peer(peer, send, receive, c.timeout_s, stop=cancelled)
        finally:
            link.close()
        return DragonDecision(tuple(peer.tokens), peer.trace(), side.documents, prefill_s, opened.prefill_s,
                              self.clock() - t0, peer.commit_times[0] - t0 if peer.commit_times else float("nan"),
                              cancelled=not peer.done)

    def _check_opened(self, opened: DragonOpened) -> None:
        """ValueError unless the cloud speaks this protocol over this vocabulary with this tokenizer."""
        if opened.protocol != DRAGON_PROTOCOL:
            raise ValueError(f"the cloud answered with DRAGON protocol {opened.protocol} (this side speaks "
                             f"{DRAGON_PROTOCOL})")
        if opened.vocab_size != self.stack.vocab_size:
            raise ValueError(f"the cloud's vocabulary ({opened.vocab_size}) differs from the robot's "
                             f"({self.stack.vocab_size}): DRAGON aggregates distributions over one vocabulary, so "
                             "both sides need the same model source (the drafter's dragon_model and the verifier's "
                             "serve --dragon-model)")
        check_tokenizer(self.tokenizer_fingerprint, opened.tokenizer_fingerprint)


def _file_stamp(memory: RobotMemory) -> tuple[int, int] | None:
    path = memory.path
    if path is None or not path.exists():
        return None
    st = path.stat()
    return st.st_size, st.st_mtime_ns


class DragonLinkError(RuntimeError):
    """The cloud refused or broke off the decision: ``code`` is the wire ErrorCode of its reply."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"the cloud refused the DRAGON decision (code {code}): {message}")
        self.code = code


class ZmqDragonLink:
    """The robot's DRAGON link to a verifier server (``serve --documents DIR``) over ZeroMQ: one
    DEALER socket, one session per decision (a link serves one decision; make one per decision).
    Every frame sent and received is counted in ``log`` (up: robot → cloud)."""

    def __init__(self, endpoint: str, open_timeout_s: float = 60.0, curve: CurveKeys | None = None,
                 uplink: LinkShape | None = None, seed: int = 0) -> None:
        self.open_timeout_s = open_timeout_s
        self.session = uuid.uuid4().bytes
        self.log = FrameLog()
        # uplink: an emulated robot → cloud link (benches): frames leave when the emulator says they
        # arrive; they are sent from this thread (a ZeroMQ socket belongs to one thread) whenever the
        # link is used, and receive() wakes up for them.
        self._uplink = LinkEmulator(uplink, seed) if uplink is not None and not uplink.ideal else None
        self._due: deque[tuple[float, list[bytes]]] = deque()
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            self._sock.curve_publickey = curve.public
            self._sock.curve_secretkey = curve.secret
            self._sock.curve_serverkey = curve.server_public
        self._sock.connect(endpoint)

    def _send(self, msg) -> None:
        frames = encode(Envelope(self.session, msg))
        self.log.add("up", type(msg).__name__, frames)
        if self._uplink is None:
            self._sock.send_multipart(frames, copy=False)
            return
        self._due.append((self._uplink.transmit(sum(len(f) for f in frames), time.monotonic()), frames))
        self._flush()

    def _flush(self) -> None:
        now = time.monotonic()
        while self._due and self._due[0][0] <= now:
            self._sock.send_multipart(self._due.popleft()[1], copy=False)

    def open(self, request: DragonOpen, cancel: Callable[[], bool] | None = None) -> DragonOpened | None:
        """Send the open and wait for the cloud's DragonOpened (its retrieval and prefill), looking at
        ``cancel()`` every CANCEL_POLL_S: None when it turned true first."""
        self._send(request)
        deadline = time.monotonic() + self.open_timeout_s
        reply = None
        while reply is None and time.monotonic() < deadline:
            if cancel is not None and cancel():
                return None
            reply = self.receive(min(CANCEL_POLL_S if cancel is not None else self.open_timeout_s,
                                     max(0.0, deadline - time.monotonic())))
        if reply is None:
            raise TimeoutError(f"no DragonOpened within {self.open_timeout_s} s")
        if not isinstance(reply, DragonOpened):
            raise DragonLinkError(-1, f"unexpected {type(reply).__name__} in reply to DragonOpen")
        return reply

    def send(self, msg: DragonMessage) -> None:
        self._send(msg)

    def receive(self, timeout_s: float) -> DragonMessage | None:
        deadline = time.monotonic() + timeout_s
        while True:
            self._flush()
            now = time.monotonic()
            wake = min(deadline, self._due[0][0]) if self._due else deadline
            if not self._sock.poll(int(max(0.0, wake - now) * 1000)):
                if self._due and time.monotonic() < deadline:
                    continue  # an uplink frame fell due: send it, keep waiting
                return None
            frames = self._sock.recv_multipart()
            env = decode(frames)
            if env.session != self.session:
                continue  # a late reply of an earlier session on this socket
            self.log.add("down", type(env.message).__name__, frames)
            if isinstance(env.message, Error):
                raise DragonLinkError(env.message.code, env.message.message)
            return env.message  # type: ignore[return-value]

    def close(self) -> None:
        try:
            self._send(Close())
            while self._due:  # the emulated uplink's frames still in flight, Close last
                time.sleep(max(0.0, self._due[0][0] - time.monotonic()))
                self._flush()
        finally:
            self._sock.close(linger=200)  # let the Close leave
            self._ctx.term()
