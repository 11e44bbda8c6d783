"""ZeroMQ transport: an I/O thread per socket, emulated link shaping, optional CURVE.

Only the I/O thread touches its socket (ZeroMQ sockets are not thread-safe). Other threads (and the
I/O thread itself, when a handler replies) hand it work through a lock-protected deque and wake it
through a socketpair. The I/O thread never blocks on itself: wake-ups coalesce (at most one byte is
ever in the socketpair, written without blocking) and each loop reads at most ``MAX_FRAMES_PER_LOOP``
received frame sets before it sends, so a flood from one peer cannot starve replies or shutdown.
Outgoing messages wait in a per-destination ``Outbox``: popped by queue policy (FSD Table 7) whenever
the emulated link is free, then held until their emulated arrival time and only then written to the
socket.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import zmq

from edge_spec_ros.spec.queues import ExitQueue
from edge_spec_ros.wire.emulator import LinkEmulator, LinkShape

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.1  # longest sleep of an I/O thread with nothing scheduled
LINGER_MS = 200  # how long close() may wait to flush queued frames
MAX_FRAMES_PER_LOOP = 64  # received frame sets handled before the loop sends and runs commands again
BUSY_YIELD_S = 0.0005  # after a full batch, the I/O thread leaves the interpreter (GIL) to the workers
MAX_UNSENT = 10_000  # due messages kept while the socket cannot take them (oldest dropped beyond)
STOP_JOIN_S = 0.5  # how long stop() waits for the I/O thread


@dataclass
class _Pending:
    """A message waiting in an outbox."""

    frames: list[bytes]
    tag: Hashable
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.nbytes = sum(len(f) for f in self.frames)


class Outbox:
    """Frames waiting for one destination's (emulated) link."""

    def __init__(self, shape: LinkShape | None = None, policy: str = "fifo", seed: int = 0) -> None:
        self.queue: ExitQueue[_Pending] = ExitQueue(policy, seed)
        self.link = LinkEmulator(shape, seed) if shape is not None and not shape.ideal else None
        self.in_flight: deque[tuple[float, list[bytes]]] = deque()

    def put(self, frames: list[bytes], confidence: float = 0.0, tag: Hashable = None) -> None:
        self.queue.push(_Pending(frames, tag), confidence)

    def drop(self, predicate: Callable[[Hashable], bool]) -> int:
        """Drop queued (not yet transmitting) frames whose tag matches."""
        return self.queue.remove_if(lambda item: predicate(item.tag))

    def pump(self, now: float) -> list[list[bytes]]:
        """Start the transmissions this destination's link has room for; return the frames that arrive
        by ``now``."""
        while self.queue and (self.link is None or self.link.free_at <= now):
            item = self.queue.pop()
            arrival = self.link.transmit(item.nbytes, now) if self.link is not None else now
            self.in_flight.append((arrival, item.frames))
        out = []
        while self.in_flight and self.in_flight[0][0] <= now:
            out.append(self.in_flight.popleft()[1])
        return out

    @property
    def idle(self) -> bool:
        return not self.queue and not self.in_flight

    def next_time(self) -> float | None:
        times = []
        if self.in_flight:
            times.append(self.in_flight[0][0])
        if self.queue and self.link is not None:
            times.append(self.link.free_at)
        return min(times) if times else None


@dataclass(frozen=True)
class CurveKeys:
    """CURVE key material (z85 bytes). A client needs its pair and the server's public key; a server
    needs its pair and a directory of authorised client public keys."""

    public: bytes
    secret: bytes
    server_public: bytes | None = None
    authorized_dir: str | None = None


class IOThread(threading.Thread):
    """Owns one socket: sends what other threads submit, hands every received frame set to a callback.

    ``user_ids``: call ``on_frames(frames, user_id)`` with the ZAP User-Id of the sender (under CURVE:
    the peer's public key, z85), instead of ``on_frames(frames)``."""

    def __init__(self, sock: zmq.Socket, on_frames: Callable[..., None], name: str, user_ids: bool = False) -> None:
        super().__init__(name=name, daemon=True)
        self.sock = sock
        self.on_frames = on_frames
        self.user_ids = user_ids
        self.outboxes: dict[Hashable, Outbox] = {}
        self._commands: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._wake_pending = False  # a wake-up byte is in the socketpair (or about to be): no second one
        self._halt = threading.Event()
        self._unsent: deque[list[bytes]] = deque()  # due, but the socket would have blocked
        self.dropped = 0

    # --- called from any thread ----------------------------------------------------------------
    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O thread."""
        with self._lock:
            self._commands.append(fn)
            if self._wake_pending:
                return
            self._wake_pending = True
        try:
            self._wake_w.send(b"\0")
        except OSError:  # closed; or full, which cannot happen with one byte at most
            pass

    def submit(self, key: Hashable, frames: list[bytes], confidence: float = 0.0, tag: Hashable = None,
               shape: LinkShape | None = None, policy: str = "fifo") -> None:
        """Queue ``frames`` for destination ``key`` (its outbox made with ``shape`` and ``policy`` if new);
        ``confidence`` orders it in the outbox."""
        def put() -> None:
            box = self.outboxes.get(key)
            if box is None:
                box = self.outboxes[key] = Outbox(shape, policy)
            box.put(frames, confidence, tag)
        self.call(put)

    def stop(self, timeout_s: float = STOP_JOIN_S) -> bool:
        """Stop the loop; True when the thread has ended within ``timeout_s``."""
        self._halt.set()
        self.call(lambda: None)
        self.join(timeout=timeout_s)
        if self.is_alive():
            log.warning("the I/O thread %s did not stop within %.1f s", self.name, timeout_s)
            return False
        self._wake_r.close()
        self._wake_w.close()
        return True

    # --- the I/O thread ------------------------------------------------------------------------
    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self._wake_r.fileno(), zmq.POLLIN)
        try:
            while not self._halt.is_set():
                now = time.monotonic()
                wake = [t for t in (box.next_time() for box in self.outboxes.values()) if t is not None]
                timeout = max(0.0, min(wake) - now) if wake else IDLE_POLL_S
                events = dict(poller.poll(min(timeout, IDLE_POLL_S) * 1000))
                if self._wake_r.fileno() in events:
                    try:  # before taking the commands: a byte written after this wakes the next poll
                        while self._wake_r.recv(4096):
                            pass
                    except BlockingIOError:
                        pass
                with self._lock:
                    commands, self._commands = self._commands, deque()
                    self._wake_pending = False
                for fn in commands:
                    try:
                        fn()
                    except zmq.ContextTerminated:
                        raise
                    except Exception:  # a command bug must not kill the transport
                        log.exception("error in an I/O thread command")
                now = time.monotonic()
                for key, box in list(self.outboxes.items()):
                    self._unsent.extend(box.pump(now))
                    if box.idle:  # nothing queued or in flight: forget it (recreated on demand)
                        del self.outboxes[key]
                self._send_unsent()
                poller.modify(self.sock, zmq.POLLIN | (zmq.POLLOUT if self._unsent else 0))
                if self.sock in events and self._drain() == MAX_FRAMES_PER_LOOP:
                    time.sleep(BUSY_YIELD_S)  # more is waiting: let other threads have the interpreter
        except zmq.ContextTerminated:
            pass
        finally:
            self.sock.close(linger=LINGER_MS)

    def _send_unsent(self) -> None:
        """Write what is due without blocking: a DEALER with no connected peer (or a full pipe) keeps
        the rest for the next loop; a ROUTER drops replies to a peer that is gone or not reading."""
        while self._unsent:
            try:
                self.sock.send_multipart(self._unsent[0], flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self._unsent.popleft()
        while len(self._unsent) > MAX_UNSENT:
            self._unsent.popleft()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("%s: %d messages dropped, the peer does not take them", self.name, self.dropped)

    def _drain(self) -> int:
        """Handle up to MAX_FRAMES_PER_LOOP received frame sets; returns how many there were."""
        for n in range(MAX_FRAMES_PER_LOOP):
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=not self.user_ids)
            except zmq.Again:
                return n
            try:
                if self.user_ids:
                    try:
                        user_id = (frames[0].get("User-Id") or "").encode()
                    except zmq.ZMQError:  # no ZAP handler: no User-Id
                        user_id = b""
                    self.on_frames([f.bytes for f in frames], user_id)
                else:
                    self.on_frames(frames)
            except Exception:  # a handler bug must not kill the transport
                log.exception("error while handling received frames")
        return MAX_FRAMES_PER_LOOP
