"""Limits before work, against a real verifier process: each amplification attack gets a clear Error
reply and grows the server's peak RSS (VmHWM from /proc, reset before each attack) by at most
RSS_BOUND_MB; the decompression bomb and the 8000 x 8000 PNG are refused before any allocation."""

from __future__ import annotations

import io
import struct
import time
import uuid
import zlib

import numpy as np
import pytest
import zmq
from PIL import Image

from edge_spec_ros.server_process import verifier_server
from edge_spec_ros.wire.codec import encode
from edge_spec_ros.wire.messages import Envelope, Error, ErrorCode, Generate, Open, Opened

import hostile_peers
from raw_peer import RawPeer as Peer

RSS_BOUND_MB = 50
SETTLE_S = 0.3  # after the reply: the server's other threads finish with the request's buffers


@pytest.fixture(scope="module")
def server():
    with verifier_server("--threads", "1") as s:
        yield s


@pytest.fixture
def peer(server):
    p = Peer(server.endpoint)
    yield p
    p.close()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG signature and IHDR claiming width x height, then an empty IDAT and IEND."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack("!I", len(data)) + kind + data + struct.pack("!I", zlib.crc32(kind + data))
    ihdr = struct.pack("!IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def png_8000():
    """A real 8000 x 8000 greyscale PNG (a few hundred KB: it is all zeros)."""
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8000, 8000), np.uint8)).save(buf, format="PNG", compress_level=9)
    return buf.getvalue()


def attack_peak_mb(server, send) -> tuple[object, float]:
    """(the reply, peak RSS growth in MB) of one attack."""
    server.reset_peak()
    base = server.memory_kib()["VmRSS"]
    reply = send()
    time.sleep(SETTLE_S)
    peak = server.memory_kib()["VmHWM"]
    return reply, (peak - base) / 1024


def test_attacks_get_an_error_and_no_memory(server, peer, text_prompt, png_8000):
    ids = text_prompt.input_ids.numpy().astype(np.int32)
    sid = uuid.uuid4().bytes
    assert isinstance(peer.request(encode(Envelope(sid, Open(input_ids=ids)))), Opened)
    twelve = hostile_peers.lz4_bomb(*[f"bogus{i}" for i in range(12)])
    attacks = {
        # 12 LZ4-compressed 64 MB arrays with names no message has: 3.1 MB on the wire
        "lz4_unknown_names": (lambda: peer.request(twelve), ErrorCode.MALFORMED, "unknown fields"),
        # one such array under a real name, far above what a (γ, V) block can be
        "lz4_known_name": (lambda: peer.request(hostile_peers.lz4_bomb("q")), ErrorCode.TOO_LARGE, "exceeds the limit"),
        "png_8000x8000": (lambda: peer.request(encode(Envelope(uuid.uuid4().bytes, Open(input_ids=ids, image=png_8000)))),
                          ErrorCode.TOO_LARGE, "64000000 pixels"),
        "png_header_65535": (lambda: peer.request(encode(Envelope(uuid.uuid4().bytes,
                                                                  Open(input_ids=ids, image=png_header_only(65535, 65535))))),
                             ErrorCode.TOO_LARGE, "pixels exceeds"),
        "prompt_16384": (lambda: peer.request(encode(Envelope(uuid.uuid4().bytes,
                                                              Open(input_ids=np.full(16384, 5, np.int32))))),
                         ErrorCode.TOO_LARGE, "'input_ids': 65536 bytes exceeds"),
        "generate_4096": (lambda: peer.request(encode(Envelope(sid, Generate(max_new_tokens=4096)))),
                          ErrorCode.TOO_LARGE, "4096 exceeds"),
    }
    figures = {}
    for name, (send, code, reason) in attacks.items():
        reply, growth = attack_peak_mb(server, send)
        figures[name] = growth
        assert isinstance(reply, Error) and reply.code == code and reason in reply.message, (name, reply)
        assert growth <= RSS_BOUND_MB, (name, growth)
    print("peak RSS growth (MB): " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()))
    # the server still serves
    assert isinstance(peer.request(encode(Envelope(uuid.uuid4().bytes, Open(input_ids=ids)))), Opened)


def test_a_frame_over_the_maximum_message_size_cuts_the_peer_off(server, text_prompt):
    """ZeroMQ drops a peer that sends a frame larger than the server's maximum (no reply is possible:
    the frame is never read); the server goes on serving others."""
    attacker = Peer(server.endpoint)
    attacker.sock.setsockopt(zmq.RCVTIMEO, 1000)
    try:
        server.reset_peak()
        base = server.memory_kib()["VmRSS"]
        frames = encode(Envelope(uuid.uuid4().bytes, Open(input_ids=np.full(4, 5, np.int32))))
        attacker.sock.send_multipart([frames[0], bytes(64 * 1024 * 1024)])
        with pytest.raises(zmq.Again):
            attacker.sock.recv_multipart()
        growth = (server.memory_kib()["VmHWM"] - base) / 1024
        print(f"oversized frame: peak RSS growth {growth:.1f} MB")
        assert growth <= RSS_BOUND_MB
    finally:
        attacker.close()
    good = Peer(server.endpoint)
    try:
        ids = text_prompt.input_ids.numpy().astype(np.int32)
        assert isinstance(good.request(encode(Envelope(uuid.uuid4().bytes, Open(input_ids=ids)))), Opened)
    finally:
        good.close()
