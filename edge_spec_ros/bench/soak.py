"""Soak: a real verifier process under mixed well-behaved and hostile clients for a set time.

``edge-spec-ros bench soak --duration 300`` (``make soak``) starts ``edge-spec-ros serve``
on 127.0.0.1 with the embedded model, then runs at once:

- well-behaved robots: greedy decodes in rotating modes (AR, SD, FSD, DSSD), each compared token for
  token with the verifier's own greedy output computed in this process;
- a fuzzer: structure-aware mutated requests (``wire/fuzz.py``) on a few session ids;
- a flooder: bursts of malformed frame sets and Stats requests, unpaced;
- an amplifier: LZ4 decompression bombs, an 8000 x 8000 PNG and oversized prompts and generations.

It samples the server's RSS every ``--sample-s`` and reports RSS over time, the server's counters
(errors by code), the hostile cases sent, and whether every good decode was exact. Exit status 1
when a decode differed, the server died, or its RSS grew by more than ``--rss-bound-mb`` after the
first ``WARMUP_S`` seconds.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zmq

SAMPLE_S = 1.0
WARMUP_S = 5.0  # RSS growth is counted from here: the first requests allocate the model's working buffers
RSS_BOUND_MB = 50.0
MODES = ("ar", "sd", "fsd", "dssd")
FLOOD_BURST = 2000
HOSTILE_PAUSE_S = 0.05  # between a hostile client's bursts (the flood itself is unpaced)
REPLY_S = 30.0
HOSTILE_SNDHWM = 10_000  # frame sets a hostile client queues ahead of the server
BACKPRESSURE_WAIT_S = 0.005


def _hostile_socket(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, HOSTILE_SNDHWM)
    sock.connect(endpoint)
    return sock


def _send(sock: zmq.Socket, frames: list[bytes], stop: threading.Event) -> bool:
    """Send as fast as the server takes frames (its backpressure, not a pace of ours)."""
    while not stop.is_set():
        try:
            sock.send_multipart(frames, zmq.NOBLOCK)
            return True
        except zmq.Again:
            _discard_replies(sock)
            stop.wait(BACKPRESSURE_WAIT_S)
    return False


def _discard_replies(sock: zmq.Socket) -> None:
    while sock.poll(0):
        sock.recv_multipart()


def _fuzzer(endpoint: str, stop: threading.Event, sent: dict, prompt: np.ndarray) -> None:
    from edge_spec_ros.wire import fuzz

    ctx = zmq.Context()
    sock = _hostile_socket(ctx, endpoint)
    rng = random.Random(1)
    sessions = [bytes([i]) * 16 for i in range(1, 4)]
    seed = 0
    while not stop.is_set():
        for frames in fuzz.cases(seed, 200, prompt=prompt, requests_only=True):
            if len(frames[0]) >= 20:
                frames[0] = frames[0][:4] + rng.choice(sessions) + frames[0][20:]
            if _send(sock, frames, stop):
                sent["fuzz"] += 1
            _discard_replies(sock)
        seed += 1
        stop.wait(HOSTILE_PAUSE_S)
    sock.close()
    ctx.term()


def _flooder(endpoint: str, stop: threading.Event, sent: dict) -> None:
    from edge_spec_ros.wire.codec import HEADER, MAGIC, VERSION, encode
    from edge_spec_ros.wire.messages import Envelope, MsgType, Stats

    kinds = [[b""], [bytes(100)], [HEADER.pack(MAGIC, VERSION + 3, 9, bytes(16)) + b"{}"],
             [HEADER.pack(MAGIC, VERSION, MsgType.OPEN, bytes(16)) + b"{not json"],
             encode(Envelope(bytes(16), Stats()))]
    ctx = zmq.Context()
    sock = _hostile_socket(ctx, endpoint)
    while not stop.is_set():
        for frames in kinds:
            for _ in range(FLOOD_BURST // len(kinds)):
                if _send(sock, frames, stop):
                    sent["flood"] += 1
        _discard_replies(sock)
        stop.wait(HOSTILE_PAUSE_S)
    sock.close()
    ctx.term()


def _amplifier(endpoint: str, stop: threading.Event, sent: dict, prompt: np.ndarray) -> None:
    import lz4.block
    from PIL import Image

    from edge_spec_ros.wire.codec import HEADER, MAGIC, VERSION, encode
    from edge_spec_ros.wire.messages import Envelope, Generate, MsgType, Open

    nbytes = 64 * 1024 * 1024
    packed = lz4.block.compress(bytes(nbytes), store_size=False)
    meta = {"round": 0, "position": 0, "arrays": [[f"x{i}", "uint8", [nbytes], "lz4", nbytes] for i in range(12)]}
    bomb = [HEADER.pack(MAGIC, VERSION, MsgType.DRAFT, bytes(16)) + json.dumps(meta).encode(), *[packed] * 12]
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8000, 8000), np.uint8)).save(buf, format="PNG", compress_level=9)
    png = buf.getvalue()
    sid = uuid.uuid4().bytes
    attacks = [bomb, encode(Envelope(uuid.uuid4().bytes, Open(input_ids=prompt, image=png))),
               encode(Envelope(uuid.uuid4().bytes, Open(input_ids=np.full(16384, 5, np.int32)))),
               encode(Envelope(sid, Open(input_ids=prompt))), encode(Envelope(sid, Generate(4096)))]
    ctx = zmq.Context()
    sock = _hostile_socket(ctx, endpoint)
    while not stop.is_set():
        for frames in attacks:
            if _send(sock, frames, stop):
                sent["amplify"] += 1
        _discard_replies(sock)
        stop.wait(0.2)
    sock.close()
    ctx.term()


def _errors_by_code(counters: dict[str, int]) -> dict[str, int]:
    """Error replies by ErrorCode name, from the server's counters."""
    from edge_spec_ros.wire.messages import ErrorCode

    out = {}
    for code in ErrorCode:
        name = code.name.lower()
        n = counters.get(f"refused_{name}", 0)
        if code == ErrorCode.INTERNAL:
            n = counters.get("internal_error", 0)
        elif code != ErrorCode.BAD_REQUEST:  # "bad_request" repeats "refused_bad_request"
            n += counters.get(name, 0)
        if n:
            out[code.name] = n
    return out


@dataclass
class _Clients:
    """The soak's clients and what they share: the good robots' decodes (prompt, image, the verifier's
    greedy tokens) and tallies, the hostile clients' counts of what they sent, one stop signal."""

    pair: object
    config: object  # the good robots' DecodeConfig
    work: list[tuple]
    stop: threading.Event = field(default_factory=threading.Event)
    sent: dict = field(default_factory=lambda: {"fuzz": 0, "flood": 0, "amplify": 0})
    good: dict = field(default_factory=lambda: {"decodes": 0, "exact": 0, "different": 0, "errors": 0})
    errors: list[str] = field(default_factory=list)

    @property
    def text_ids(self) -> np.ndarray:
        """The text-only prompt of the hostile clients' requests."""
        return self.work[2][0].input_ids.numpy().astype(np.int32)

    def robot(self, i: int, endpoint: str) -> None:
        """A well-behaved robot: greedy decodes in rotating modes, each compared with the expected tokens."""
        from edge_spec_ros.edge.client import ClientConfig, VerifierClient
        from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder

        n = i
        with VerifierClient(ClientConfig(endpoint=endpoint, open_timeout_s=REPLY_S, reply_timeout_s=REPLY_S)) as c:
            decoder = EdgeDecoder(c, self.pair.drafter, EdgeConfig(decode=self.config, threads=2))
            while not self.stop.is_set():
                prompt, jpg, expected = self.work[n % len(self.work)]
                mode = MODES[n % len(MODES)]
                n += 1
                try:
                    tokens = decoder.decode(mode, prompt, jpg).tokens
                except Exception as exc:  # reported: a good robot must never fail
                    self.good["errors"] += 1
                    self.errors.append(f"{mode}: {type(exc).__name__}: {exc}")
                    continue
                self.good["decodes"] += 1
                self.good["exact" if tokens == expected else "different"] += 1

    def threads(self, robots: int, endpoint: str) -> list[threading.Thread]:
        text_ids = self.text_ids
        threads = [threading.Thread(target=self.robot, args=(i, endpoint), daemon=True) for i in range(robots)]
        return threads + [
            threading.Thread(target=_fuzzer, args=(endpoint, self.stop, self.sent, text_ids), daemon=True),
            threading.Thread(target=_flooder, args=(endpoint, self.stop, self.sent), daemon=True),
            threading.Thread(target=_amplifier, args=(endpoint, self.stop, self.sent, text_ids), daemon=True)]


def _clients() -> _Clients:
    """The embedded pair and the good robots' three decodes, their expected tokens computed here."""
    from edge_spec_ros.camera.synthetic import synthetic_camera_image
    from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
    from edge_spec_ros.models.embedded import embedded_max_pixels, embedded_pair
    from edge_spec_ros.models.prompt import PromptConfig, PromptEncoder, decode_image, encode_image

    pair = embedded_pair()
    encoder = PromptEncoder(pair.tokenizer, PromptConfig(max_pixels=embedded_max_pixels()))
    config = DecodeConfig(max_new_tokens=16, gamma=3, stop_tokens=(pair.tokenizer.eos_token_id,))
    work = []
    for seed, instruction in enumerate(("find the silver bottle", "go to the red chair", "stop")):
        jpg = encode_image(synthetic_camera_image(seed=seed))
        prompt = encoder.encode(instruction, decode_image(jpg))
        work.append((prompt, jpg, autoregressive(pair.verifier, prompt, config).tokens))
    return _Clients(pair, config, work)


@dataclass
class _Server:
    """What the soak saw of the server: its RSS at the start and over time (s, MB), whether it lived,
    its counters at the end."""

    rss_start_mb: float
    rss: list[tuple[float, float]] = field(default_factory=list)
    alive: bool = False
    counters: dict = field(default_factory=dict)


def _rss_sample(server, t0: float) -> tuple[float, float]:
    return round(time.monotonic() - t0, 1), round(server.memory_kib()["VmRSS"] / 1024, 1)


def _counters(endpoint: str) -> dict[str, int]:
    """The server's counters (a Stats request)."""
    from edge_spec_ros.edge.client import ClientConfig, VerifierClient
    from edge_spec_ros.wire.messages import Stats

    with VerifierClient(ClientConfig(endpoint=endpoint, reply_timeout_s=REPLY_S)) as c:
        c.register(bytes(16))
        c.send(bytes(16), Stats())
        return json.loads(c.receive(bytes(16)).counters)


def _run(clients: _Clients, duration_s: float, robots: int, sample_s: float) -> _Server:
    """Start the server and every client, sample the server's RSS for ``duration_s``, stop the clients."""
    from edge_spec_ros.server_process import verifier_server

    with verifier_server("--threads", "1", idle_exit_s=max(60.0, duration_s)) as server:
        t0 = time.monotonic()
        seen = _Server(server.memory_kib()["VmRSS"] / 1024)
        threads = clients.threads(robots, server.endpoint)
        for t in threads:
            t.start()
        while time.monotonic() - t0 < duration_s and server.proc.poll() is None:
            seen.rss.append(_rss_sample(server, t0))
            time.sleep(sample_s)
        clients.stop.set()
        for t in threads:
            t.join(timeout=REPLY_S * 2)
        seen.alive = server.proc.poll() is None
        if seen.alive:
            seen.counters = _counters(server.endpoint)
            seen.rss.append(_rss_sample(server, t0))
    return seen


def _report(clients: _Clients, seen: _Server, duration_s: float, robots: int, rss_bound_mb: float) -> dict:
    rss, base, good, counters = seen.rss, seen.rss_start_mb, clients.good, seen.counters
    report = {
        "duration_s": duration_s, "robots": robots, "server_alive": seen.alive,
        "rss_start_mb": round(base, 1), "rss_end_mb": rss[-1][1], "rss_peak_mb": max(r for _, r in rss),
        "rss_growth_mb": round(rss[-1][1] - base, 1),
        "rss_growth_after_warmup_mb": round(rss[-1][1] - next((r for t, r in rss if t >= WARMUP_S), rss[-1][1]), 1),
        "hostile_sent": clients.sent, "good": good,
        "good_errors": clients.errors[:20],
        "errors_by_code": _errors_by_code(counters),
        "counters": counters, "rss_mb": rss,
    }
    report["ok"] = bool(seen.alive and good["different"] == 0 and good["errors"] == 0 and good["decodes"] > 0
                        and counters.get("internal_error", 0) == 0
                        and report["rss_growth_after_warmup_mb"] <= rss_bound_mb)
    return report


def soak(duration_s: float, robots: int, sample_s: float = SAMPLE_S, rss_bound_mb: float = RSS_BOUND_MB) -> dict:
    clients = _clients()
    seen = _run(clients, duration_s, robots, sample_s)
    return _report(clients, seen, duration_s, robots, rss_bound_mb)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench soak``."""
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of soak (default 300)")
    parser.add_argument("--robots", type=int, default=2, help="well-behaved robots decoding at once")
    parser.add_argument("--sample-s", type=float, default=SAMPLE_S, help="RSS sampling period (s)")
    parser.add_argument("--rss-bound-mb", type=float, default=RSS_BOUND_MB)
    parser.add_argument("--out", default="artifacts/soak.json")


def command(args: argparse.Namespace) -> int:
    report = soak(args.duration, args.robots, args.sample_s, args.rss_bound_mb)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "rss_mb"}, indent=2))
    print(f"wrote {args.out}")
    return 0 if report["ok"] else 1
