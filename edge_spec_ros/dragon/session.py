"""The cloud's side of DRAGON (Liu et al. 2025): its LM over its own documents, drafting continuously,
aggregating when the scheduler puts the aggregator here.

Legend: r ≡ cloud (fixed label); D^r — the cloud's documents (dragon/stores.DocumentStore over the
folder given to ``serve --documents``); p^r_t, log h̃^r_t — its local aggregate; x_t — target token.

``DragonSession`` is one decision: built from the robot's DragonOpen (the query and decoding
parameters and the robot's tokenizer fingerprint, which must be the cloud's; nothing of the robot's
memory), it retrieves the top-k documents for the query, prefills
one KV cache per document and runs a ``dragon.peer.DragonPeer`` named cloud. ``apply(msg)`` applies
a robot message, ``work()`` does one unit (aggregate, else draft); ``handle(message, emit)`` is the
shape of the server's session state machine (cloud/session.VerifySession's), so a server interleaves
DRAGON decisions with verified ones. ``DragonSessions`` is the kind of decision a ``VerifierServer``
hosts for DRAGON (cloud/server.SessionKind, keyed by DragonOpen: ``dragon_sessions``); the server
knows nothing else of DRAGON. ``LocalDragonLink`` runs a session in a thread of this process behind
the robot's link interface, every message encoded to frames and decoded (wire/codec.py) on the way,
with the bytes counted per direction.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_spec_ros.cloud.limits import RequestError
from edge_spec_ros.dragon.aggregation import CLOUD
from edge_spec_ros.dragon.document_lm import PromptIds, RetrievalSide, build_side, chat_prompt_ids
from edge_spec_ros.dragon.peer import DragonPeer, DragonProtocolError, FrameLog, PeerConfig, run_peer
from edge_spec_ros.dragon.stores import DocumentStore
from edge_spec_ros.dragon.wire import (
    DragonDist, DragonDistRequest, DragonDraft, DragonMessage, DragonOpen, DragonOpened, DragonTarget, check_open,
)
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.models.tokenizer import tokenizer_fingerprint
from edge_spec_ros.spec.sampling import SamplingConfig
from edge_spec_ros.wire.codec import DecodeLimits, decode, encode
from edge_spec_ros.wire.emulator import LinkShape
from edge_spec_ros.wire.messages import Close, Envelope


@dataclass(frozen=True)
class DragonServeConfig:
    """The cloud operator's DRAGON settings (not the robot's to choose)."""

    max_top_k: int = 8
    max_new_tokens: int = 512
    relevance_scale: float = 1.0  # BM25 → R(d, x_<t) scale (dragon/relevance.py)
    relevance_every: int = 1  # re-estimate R every this many generated tokens


class DragonSession:
    """The cloud side of one DRAGON decision.

    Built cheaply from the robot's DragonOpen (validated here, its tokenizer fingerprint against this
    side's ``tokenizer_fingerprint``: ValueError); ``start()`` does the slow part (retrieval, one
    prefill per document) and returns the DragonOpened to send."""

    def __init__(self, stack: DecoderStack, store: DocumentStore, prompt_ids: PromptIds,
                 decode_text: Callable[[Sequence[int]], str], request: DragonOpen,
                 config: DragonServeConfig = DragonServeConfig(), clock: Callable[[], float] = time.monotonic, *,
                 tokenizer_fingerprint: str) -> None:
        check_open(request, stack.vocab_size, config.max_new_tokens, config.max_top_k,
                   tokenizer_fingerprint=tokenizer_fingerprint)
        self.stack, self.store, self.prompt_ids, self.decode_text = stack, store, prompt_ids, decode_text
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self.request, self.config, self.clock = request, config, clock
        self.side: RetrievalSide | None = None
        self.peer: DragonPeer | None = None
        self.opened: DragonOpened | None = None
        self._inbox: deque[DragonMessage] = deque()
        self._lock = threading.Lock()
        self._driving = True  # the first drive (the server's open job) starts with the session

    def start(self) -> DragonOpened:
        """Retrieve this side's documents for the query and prefill them (on a worker, not the I/O thread)."""
        start = self.clock()
        request = self.request
        hits = self.store.top_k(request.query, request.top_k)
        self.side = build_side(self.stack, self.store, hits, request.query, self.prompt_ids, self.decode_text,
                               SamplingConfig(request.temperature), self.config.relevance_scale,
                               self.config.relevance_every)
        self.peer = DragonPeer(CLOUD, self.side.next_distribution, PeerConfig.from_open(request),
                               self.stack.vocab_size, self.side.rollback, self.clock)
        self.opened = DragonOpened(vocab_size=self.stack.vocab_size, prefill_s=self.clock() - start,
                                   tokenizer_fingerprint=self.tokenizer_fingerprint)
        return self.opened

    @property
    def done(self) -> bool:
        return self.peer is not None and self.peer.done

    def apply(self, msg: DragonMessage) -> list[DragonMessage]:
        """Apply one robot message; the replies to send (a DragonDist for a request)."""
        assert self.peer is not None, "start() first"
        return self.peer.receive(msg)

    def work(self) -> list[DragonMessage] | None:
        """One unit of work: aggregate if this side aggregates and both fronts are there, else draft
        one token; None when there is nothing to do until the robot sends something."""
        assert self.peer is not None, "start() first"
        if self.peer.can_aggregate():
            return self.peer.aggregate()
        if self.peer.can_draft():
            return self.peer.draft()
        return None

    # --- for a server: messages arrive on its I/O thread, the work runs on its workers -------------

    def handle(self, message: DragonMessage, emit: Callable[[DragonMessage], None]) -> Iterator[None] | None:
        """The server's session shape (cloud/server.SessionState, as VerifySession's): the DragonOpen the
        session was built for returns the drive that starts it (retrieval and prefill, then the
        decision); a later robot message is queued (``deliver``) and returns a new drive only when none
        is running (None: the running drive applies it)."""
        if message is self.request:
            return self.drive(emit)
        return self.drive(emit) if self.deliver(message) else None

    def deliver(self, msg: DragonMessage) -> bool:
        """Queue a robot message (any thread); True when no drive is running and one must be started."""
        with self._lock:
            self._inbox.append(msg)
            if self._driving:
                return False
            self._driving = True
            return True

    def drive(self, emit: Callable[[DragonMessage], None]) -> Iterator[None]:
        """The session's work as a step iterator (the server's job shape): start if needed, then apply
        queued messages, aggregate or draft, one unit per step; ends when idle or done (a later
        ``deliver`` returns True to start the next drive). A protocol violation is a BAD_REQUEST."""
        try:
            if self.peer is None:
                emit(self.start())
                yield
            while True:
                with self._lock:
                    batch = list(self._inbox)
                    self._inbox.clear()
                for msg in batch:
                    for reply in self.apply(msg):
                        emit(reply)
                out = None if self.done else self.work()
                if out is None:
                    with self._lock:
                        if not self._inbox:
                            self._driving = False
                            return
                    continue
                for reply in out:
                    emit(reply)
                yield
        except (DragonProtocolError, ValueError) as exc:
            with self._lock:
                self._driving = False
            raise RequestError(f"DRAGON: {exc}") from None
        except BaseException:
            with self._lock:
                self._driving = False
            raise


class DragonService:
    """The server's DRAGON part: the cloud's documents (``serve --documents DIR``) and how the cloud's
    LM reads them (``encoder``'s tokenizer, whose fingerprint every open must carry);
    ``session(request)`` makes a DragonSession (ValueError for a bad request or another tokenizer)."""

    def __init__(self, stack: DecoderStack, encoder: PromptEncoder, documents: str | Path,
                 config: DragonServeConfig = DragonServeConfig()) -> None:
        self.stack, self.config = stack, config
        self.store = DocumentStore(documents)
        self.prompt_ids = chat_prompt_ids(encoder)
        self.decode_text = encoder.tokenizer.decode
        self.tokenizer_fingerprint = tokenizer_fingerprint(encoder.tokenizer)

    def session(self, request: DragonOpen) -> DragonSession:
        return DragonSession(self.stack, self.store, self.prompt_ids, self.decode_text, request, self.config,
                             tokenizer_fingerprint=self.tokenizer_fingerprint)


class DragonSessions:
    """DRAGON decisions hosted by a ``VerifierServer`` (cloud/server.SessionKind, keyed by DragonOpen):
    ``service`` answers them (``serve --documents DIR``, with ``--dragon-model``'s LM or the verifier's);
    without one every DragonOpen is refused, naming the option. A robot's refused or malformed open
    is a BAD_REQUEST; its drafts, targets and distribution (requests) go to the session's drive."""

    steps = (DragonDraft, DragonTarget, DragonDistRequest, DragonDist)  # a DRAGON decision's traffic

    def __init__(self, service: DragonService | None) -> None:
        self.service = service

    def caps(self, limits: DecodeLimits, max_message_bytes: int) -> tuple[DecodeLimits, int]:
        if self.service is None:
            return limits, max_message_bytes
        return dragon_caps(limits, max_message_bytes, self.service.stack.vocab_size)

    def open(self, message: DragonOpen) -> tuple[DragonSession, LinkShape]:
        """The session of a robot's DragonOpen (RequestError when refused) and the downlink a bench asked
        the server to emulate."""
        if self.service is None:
            raise RequestError("this server has no DRAGON documents (serve --documents DIR)")
        try:
            state = self.service.session(message)
        except ValueError as exc:
            raise RequestError(f"DRAGON: {exc}") from None
        return state, LinkShape(message.down_delay_s, message.down_jitter_s, message.down_bandwidth_bps)


def dragon_sessions(service: DragonService | None) -> dict[type, DragonSessions]:
    """The ``kinds`` that make a ``VerifierServer`` host DRAGON decisions answered by ``service`` (None:
    refused, naming ``serve --documents``)."""
    return {DragonOpen: DragonSessions(service)}


PROBS_FIELD = "probs"  # DRAGON's one array field (dragon/wire.py), capped per field by the codec
FLOAT32_BYTES = 4


def dragon_caps(limits: DecodeLimits, max_message_bytes: int, vocab: int) -> tuple[DecodeLimits, int]:
    """A server's decode limits and largest frame when it serves DRAGON over a vocabulary of ``vocab``
    ids (``serve --dragon-model``: an LM other than the verifier's, whose vocabulary sized the caps):
    the codec's cap on ``probs`` (checked before any decompression) and the largest frame become one
    float32 distribution, 4 V bytes, when that is larger. Every other field keeps its cap, and the
    DRAGON peer still refuses any ``probs`` shape but (V,) or (1,)."""
    probs = FLOAT32_BYTES * vocab
    fields = dict(limits.field_bytes)
    fields[PROBS_FIELD] = max(fields.get(PROBS_FIELD, 0), probs)
    return (dataclasses.replace(limits, field_bytes=fields, max_total_bytes=max(limits.max_total_bytes, probs)),
            max(max_message_bytes, probs))


class DelayedPipe:
    """One direction of an emulated link: FIFO, each item delivered ``delay_s`` ± ``jitter_s`` (uniform)
    after it was put, never before the item ahead of it (no reordering, as one TCP connection)."""

    def __init__(self, delay_s: float = 0.0, jitter_s: float = 0.0, seed: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not (0.0 <= jitter_s <= delay_s or delay_s == jitter_s == 0.0):
            raise ValueError("need 0 <= jitter_s <= delay_s")
        self.delay_s, self.jitter_s, self.clock = delay_s, jitter_s, clock
        self._gen = np.random.default_rng(seed)
        self._items: deque[tuple[float, list[bytes]]] = deque()
        self._last = 0.0
        self._cv = threading.Condition()

    def put(self, frames: list[bytes]) -> None:
        with self._cv:
            delay = self.delay_s + (self._gen.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0)
            self._last = max(self._last, self.clock() + delay)
            self._items.append((self._last, frames))
            self._cv.notify_all()

    def get(self, timeout_s: float) -> list[bytes] | None:
        """The next item once it is due; None if none is due within ``timeout_s`` (0: do not wait)."""
        deadline = self.clock() + timeout_s
        with self._cv:
            while True:
                now = self.clock()
                if self._items and self._items[0][0] <= now:
                    return self._items.popleft()[1]
                if now >= deadline:
                    return None
                wait = deadline - now if not self._items else min(deadline, self._items[0][0]) - now
                self._cv.wait(max(wait, 0.0))


class LocalDragonLink:
    """The robot's DRAGON link to a cloud session in a thread of this process (no sockets).

    Every message is encoded and decoded on the way, and counted in ``log`` (up: robot → cloud).
    ``one_way_s`` ± ``jitter_s`` delays each message in each direction (an emulated network; the
    decision's open is not delayed). ``tokenizer_fingerprint``: the cloud's tokenizer's
    (models/tokenizer.tokenizer_fingerprint), checked against the robot's at open."""

    def __init__(self, stack: DecoderStack, store: DocumentStore, prompt_ids: PromptIds,
                 decode_text: Callable[[Sequence[int]], str], config: DragonServeConfig = DragonServeConfig(),
                 timeout_s: float = 60.0, one_way_s: float = 0.0, jitter_s: float = 0.0, seed: int = 0, *,
                 tokenizer_fingerprint: str) -> None:
        self.stack, self.store, self.prompt_ids, self.decode_text = stack, store, prompt_ids, decode_text
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self.config, self.timeout_s = config, timeout_s
        self.session = uuid.uuid4().bytes
        self.log = FrameLog()
        self._up = DelayedPipe(one_way_s, jitter_s, seed)
        self._down = DelayedPipe(one_way_s, jitter_s, seed + 1)
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self.error: BaseException | None = None
        self.cloud: DragonSession | None = None

    def _frames(self, direction: str, msg) -> list[bytes]:
        frames = encode(Envelope(self.session, msg))
        self.log.add(direction, type(msg).__name__, frames)
        return frames

    def open(self, request: DragonOpen, cancel: Callable[[], bool] | None = None) -> DragonOpened | None:
        if cancel is not None and cancel():  # the session starts in this thread: cancellable only before it
            return None
        frames = self._frames("up", request)
        self.cloud = DragonSession(self.stack, self.store, self.prompt_ids, self.decode_text,
                                   decode(frames).message, self.config,  # type: ignore[arg-type]
                                   tokenizer_fingerprint=self.tokenizer_fingerprint)
        opened = decode(self._frames("down", self.cloud.start())).message
        self._thread = threading.Thread(target=self._serve, name="dragon-cloud", daemon=True)
        self._thread.start()
        return opened  # type: ignore[return-value]

    def _serve(self) -> None:
        assert self.cloud is not None and self.cloud.peer is not None

        def send(messages: list[DragonMessage]) -> None:
            for m in messages:
                self._down.put(self._frames("down", m))

        def receive(timeout_s: float):
            frames = self._up.get(timeout_s)
            if frames is None:
                return None
            msg = decode(frames).message
            if isinstance(msg, Close):
                self._closed.set()
                return None
            return msg

        try:
            run_peer(self.cloud.peer, send, receive, self.timeout_s, stop=self._closed.is_set)
        except BaseException as exc:  # reported to the robot's side by close()
            self.error = exc

    def send(self, msg: DragonMessage) -> None:
        self._up.put(self._frames("up", msg))

    def receive(self, timeout_s: float) -> DragonMessage | None:
        frames = self._down.get(timeout_s)
        if frames is None:
            if self.error is not None:
                raise RuntimeError(f"the cloud side failed: {self.error!r}") from self.error
            return None
        return decode(frames).message  # type: ignore[return-value]

    def close(self) -> None:
        self._up.put(self._frames("up", Close()))  # after every target: the cloud applies them first
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s)
        if self.error is not None:
            raise RuntimeError(f"the cloud side failed: {self.error!r}") from self.error
