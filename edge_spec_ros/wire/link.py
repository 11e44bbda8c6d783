"""ZeroMQ transport: an I/O thread per socket, emulated link shaping, optional CURVE.

Only the I/O thread touches its socket (ZeroMQ sockets are not thread-safe). Other threads hand it
frames through a lock-protected deque and wake it through a socketpair. Outgoing messages wait in a
per-destination ``Outbox``: popped by queue policy (FSD Table 7) whenever the emulated link is free,
then held until their emulated arrival time and only then written to the socket.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import zmq

from edge_spec_ros.spec.queues import ExitQueue
from edge_spec_ros.wire.emulator import LinkEmulator, LinkShape

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.1  # longest sleep of an I/O thread with nothing scheduled
LINGER_MS = 200  # how long close() may wait to flush queued frames


class Outbox:
    """Frames waiting for one destination's (emulated) link."""

    def __init__(self, shape: LinkShape | None = None, policy: str = "fifo", seed: int = 0) -> None:
        self.queue: ExitQueue[tuple[Hashable, list[bytes]]] = ExitQueue(policy, seed)
        self.link = LinkEmulator(shape, seed) if shape is not None and not shape.ideal else None
        self.in_flight: deque[tuple[float, list[bytes]]] = deque()

    def put(self, frames: list[bytes], confidence: float = 0.0, tag: Hashable = None) -> None:
        self.queue.push((tag, frames), confidence)

    def drop(self, predicate: Callable[[Hashable], bool]) -> int:
        """Drop queued (not yet transmitting) frames whose tag matches."""
        return self.queue.remove_if(lambda item: predicate(item[0]))

    def pump(self, now: float) -> list[list[bytes]]:
        """Start transmissions the link has room for; return the frames that arrive by ``now``."""
        if self.link is None:
            out = []
            while self.queue:
                out.append(self.queue.pop()[1])
            return out
        while self.queue and self.link.free_at <= now:
            frames = self.queue.pop()[1]
            self.in_flight.append((self.link.transmit(sum(len(f) for f in frames), now), frames))
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
    """Owns one socket: sends what other threads submit, hands every received frame set to a callback."""

    def __init__(self, sock: zmq.Socket, on_frames: Callable[[list[bytes]], None], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.sock = sock
        self.on_frames = on_frames
        self.outboxes: dict[Hashable, Outbox] = {}
        self._commands: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._halt = threading.Event()

    # --- called from any thread ----------------------------------------------------------------
    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O thread."""
        with self._lock:
            self._commands.append(fn)
        try:
            self._wake_w.send(b"\0")
        except OSError:  # closed
            pass

    def submit(self, key: Hashable, frames: list[bytes], confidence: float = 0.0, tag: Hashable = None,
               shape: LinkShape | None = None, policy: str = "fifo") -> None:
        def put() -> None:
            box = self.outboxes.get(key)
            if box is None:
                box = self.outboxes[key] = Outbox(shape, policy)
            box.put(frames, confidence, tag)
        self.call(put)

    def stop(self) -> None:
        self._halt.set()
        self.call(lambda: None)
        self.join(timeout=5)
        self._wake_r.close()
        self._wake_w.close()

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
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except BlockingIOError:
                        pass
                with self._lock:
                    commands, self._commands = self._commands, deque()
                for fn in commands:
                    fn()
                now = time.monotonic()
                for key, box in list(self.outboxes.items()):
                    for frames in box.pump(now):
                        self.sock.send_multipart(frames, copy=False)
                    if box.idle:  # nothing queued or in flight: forget it (recreated on demand)
                        del self.outboxes[key]
                if self.sock in events:
                    self._drain()
        except zmq.ContextTerminated:
            pass
        finally:
            self.sock.close(linger=LINGER_MS)

    def _drain(self) -> None:
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                self.on_frames(frames)
            except Exception:  # a handler bug must not kill the transport
                log.exception("error while handling received frames")
