"""The cloud's side of DRAGON (Liu et al. 2025): its LM over its own documents, drafting continuously,
aggregating when the scheduler puts the aggregator here.

Legend: r ≡ cloud (fixed label); D^r — the cloud's documents (rag/stores.DocumentStore over the
folder given to ``serve --documents``); p^r_t, log h̃^r_t — its local aggregate; x_t — target token.

``DragonSession`` is one decision: built from the robot's DragonOpen (the query and decoding
parameters; nothing of the robot's memory), it retrieves the top-k documents for the query, prefills
one KV cache per document and runs a ``rag.dragon_peer.DragonPeer`` named cloud. ``handle(msg)``
applies a robot message, ``work()`` does one unit (aggregate, else draft) — the shape of the server's
session state machine, so a server can interleave sessions. ``LocalDragonLink`` runs a session in a
thread of this process behind the robot's link interface, every message encoded to frames and
decoded (wire/codec.py) on the way, with the bytes counted per direction.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.rag.document_lm import PromptIds, build_side
from edge_spec_ros.rag.dragon_peer import DragonPeer, FrameLog, PeerConfig, run_peer
from edge_spec_ros.rag.stores import DocumentStore
from edge_spec_ros.spec.aggregation import CLOUD
from edge_spec_ros.spec.sampling import SamplingConfig
from edge_spec_ros.wire.codec import decode, encode
from edge_spec_ros.wire.dragon import DragonMessage, DragonOpen, DragonOpened, check_open
from edge_spec_ros.wire.messages import Close, Envelope


@dataclass(frozen=True)
class DragonServeConfig:
    """The cloud operator's DRAGON settings (not the robot's to choose)."""

    max_top_k: int = 8
    max_new_tokens: int = 512
    relevance_scale: float = 1.0  # BM25 → R(d, x_<t) scale (rag/relevance.py)
    relevance_every: int = 1  # re-estimate R every this many generated tokens


class DragonSession:
    """The cloud side of one DRAGON decision."""

    def __init__(self, stack: DecoderStack, store: DocumentStore, prompt_ids: PromptIds,
                 decode_text: Callable[[Sequence[int]], str], request: DragonOpen,
                 config: DragonServeConfig = DragonServeConfig(), clock: Callable[[], float] = time.monotonic) -> None:
        check_open(request, stack.vocab_size, config.max_new_tokens, config.max_top_k)
        start = clock()
        self.request = request
        hits = store.top_k(request.query, request.top_k)
        self.side = build_side(stack, store, hits, request.query, prompt_ids, decode_text,
                               SamplingConfig(request.temperature), config.relevance_scale, config.relevance_every)
        self.peer = DragonPeer(CLOUD, self.side.next_distribution, PeerConfig.from_open(request), stack.vocab_size,
                               self.side.rollback, clock)
        self.opened = DragonOpened(vocab_size=stack.vocab_size, prefill_s=clock() - start)

    @property
    def done(self) -> bool:
        return self.peer.done

    def handle(self, msg: DragonMessage) -> list[DragonMessage]:
        """Apply one robot message; the replies to send (a DragonDist for a request)."""
        return self.peer.receive(msg)

    def work(self) -> list[DragonMessage] | None:
        """One unit of work: aggregate if this side aggregates and both fronts are there, else draft
        one token; None when there is nothing to do until the robot sends something."""
        if self.peer.can_aggregate():
            return self.peer.aggregate()
        if self.peer.can_draft():
            return self.peer.draft()
        return None


class LocalDragonLink:
    """The robot's DRAGON link to a cloud session in a thread of this process (no sockets).

    Every message is encoded and decoded on the way, and counted in ``log`` (up: robot → cloud).
    """

    def __init__(self, stack: DecoderStack, store: DocumentStore, prompt_ids: PromptIds,
                 decode_text: Callable[[Sequence[int]], str], config: DragonServeConfig = DragonServeConfig(),
                 timeout_s: float = 60.0) -> None:
        self.stack, self.store, self.prompt_ids, self.decode_text = stack, store, prompt_ids, decode_text
        self.config, self.timeout_s = config, timeout_s
        self.session = uuid.uuid4().bytes
        self.log = FrameLog()
        self._up: queue.Queue[list[bytes]] = queue.Queue()
        self._down: queue.Queue[list[bytes]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self.error: BaseException | None = None
        self.cloud: DragonSession | None = None

    def _frames(self, direction: str, msg) -> list[bytes]:
        frames = encode(Envelope(self.session, msg))
        self.log.add(direction, type(msg).__name__, frames)
        return frames

    def open(self, request: DragonOpen) -> DragonOpened:
        frames = self._frames("up", request)
        self.cloud = DragonSession(self.stack, self.store, self.prompt_ids, self.decode_text,
                                   decode(frames).message, self.config)  # type: ignore[arg-type]
        opened = decode(self._frames("down", self.cloud.opened)).message
        self._thread = threading.Thread(target=self._serve, name="dragon-cloud", daemon=True)
        self._thread.start()
        return opened  # type: ignore[return-value]

    def _serve(self) -> None:
        assert self.cloud is not None

        def send(messages: list[DragonMessage]) -> None:
            for m in messages:
                self._down.put(self._frames("down", m))

        def receive(timeout_s: float):
            try:
                frames = self._up.get(timeout=timeout_s) if timeout_s > 0 else self._up.get_nowait()
            except queue.Empty:
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
        try:
            frames = self._down.get(timeout=timeout_s) if timeout_s > 0 else self._down.get_nowait()
        except queue.Empty:
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
