"""Frame sets no well-behaved robot sends, and a flooder that sends them unpaced from one peer.

Run as a script (a process of its own, so the flood does not share the test's interpreter):
``python test/cloud/hostile_peers.py ENDPOINT COUNT KIND [KIND ...]`` sends COUNT frame sets of each
KIND as fast as the socket takes them, without reading a reply, then stays connected until the
server has answered a last Stats request (ZeroMQ discards what a disconnected peer sent but the
server has not read yet), prints ``sent N`` and exits.
"""

from __future__ import annotations

import json
import sys
import time
import uuid

import lz4.block
import numpy as np
import zmq

from edge_spec_ros.wire.codec import HEADER, MAGIC, MAX_META_BYTES, VERSION, encode
from edge_spec_ros.wire.messages import DraftBlock, Envelope, MsgType, Stats

FLOOD_LINGER_MS = 0
DRAIN_TIMEOUT_S = 120.0  # the longest the flooder waits for the server to work through the flood
STATS_RETRY_S = 2.0  # the flooder asks again when nothing came back for this long
SESSION = bytes(range(16))
LAST = bytes([255] * 16)  # the session id of the flooder's final Stats request


def header(mtype: int, meta: dict | bytes, version: int = VERSION, magic: bytes = MAGIC) -> bytes:
    body = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    return HEADER.pack(magic, version, mtype, SESSION) + body


def lz4_bomb(*names: str, nbytes: int = 64 * 1024 * 1024) -> list[bytes]:
    """A draft block with one array of ``nbytes`` zeros per name, each LZ4-compressed to ~1/255 of
    its size (64 MB: 257 KB on the wire)."""
    packed = lz4.block.compress(bytes(nbytes), store_size=False)
    meta = {"round": 0, "position": 0, "arrays": [[name, "uint8", [nbytes], "lz4", nbytes] for name in names]}
    return [header(MsgType.DRAFT, meta), *[packed] * len(names)]


def _kinds() -> dict[str, list[bytes]]:
    rng = np.random.default_rng(0)
    tokens = np.arange(3, dtype=np.int32).tobytes()
    return {
        "empty": [b""],
        "random": [rng.bytes(100)],
        "bad_magic": [header(MsgType.STATS, {"arrays": []}, magic=b"XX")],
        "bad_version": [header(MsgType.STATS, {"arrays": []}, version=VERSION + 7)],
        "unknown_type": [header(99, {"arrays": []})],
        "bad_json": [header(MsgType.OPEN, b"{not json")],
        "big_meta": [header(MsgType.STATS, b" " * (MAX_META_BYTES + 1))],
        "unknown_array": [header(MsgType.DRAFT, {"round": 0, "position": 0,
                                                 "arrays": [["bogus", "uint8", [4], "raw", 4]]}), b"abcd"],
        "size_mismatch": [header(MsgType.DRAFT, {"round": 0, "position": 0,
                                                 "arrays": [["tokens", "int32", [3], "raw", 16]]}), tokens],
        "unknown_session": encode(Envelope(uuid.uuid4().bytes, DraftBlock(0, 5, np.arange(3, dtype=np.int32)))),
        "stats": encode(Envelope(SESSION, Stats())),
    }


KINDS = _kinds()


def flood(endpoint: str, count: int, kinds: list[str]) -> int:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, FLOOD_LINGER_MS)
    sock.setsockopt(zmq.SNDHWM, 0)  # unpaced: queue everything at once
    sock.connect(endpoint)
    sent = 0
    for kind in kinds:
        frames = KINDS[kind]
        for _ in range(count):
            sock.send_multipart(frames)
            sent += 1
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    done = False
    while not done and time.monotonic() < deadline:
        sock.send_multipart(encode(Envelope(LAST, Stats())))
        while sock.poll(STATS_RETRY_S * 1000):
            reply = sock.recv_multipart()
            if reply[0][4:20] == LAST and reply[0][3] == MsgType.STATS_REPLY:
                done = True
                break
    sock.close()
    ctx.term()
    return sent


if __name__ == "__main__":
    t0 = time.monotonic()
    n = flood(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
    print(f"sent {n} in {time.monotonic() - t0:.2f} s", flush=True)
