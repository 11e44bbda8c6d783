"""A bare DEALER socket on the verifier's endpoint, to send what a well-behaved client never would."""

from __future__ import annotations

import zmq

from edge_spec_ros.wire.codec import decode

REPLY_S = 10  # a reply the test waits for comes within this


class RawPeer:
    def __init__(self, endpoint: str, linger_ms: int = 0) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, linger_ms)
        self.sock.setsockopt(zmq.RCVTIMEO, REPLY_S * 1000)
        self.sock.connect(endpoint)

    def send_raw(self, frames: list[bytes]) -> None:
        self.sock.send_multipart(frames)

    def receive(self):
        """The next reply's message (raises zmq.Again after REPLY_S)."""
        return decode(self.sock.recv_multipart()).message

    def request(self, frames: list[bytes]):
        self.send_raw(frames)
        return self.receive()

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()
