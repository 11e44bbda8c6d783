"""Every refusal is an Error reply with a code and a reason naming the field, for every field of every
request message, from a real verifier process. The table must cover every field of Open,
DraftBlock and Generate (a new field without a refusal case fails ``test_the_table_covers_every_field``).

The server here emulates T_q itself (``--emulate-tq-s``) and, like any server not started for the
test suite's shared loopback, refuses ``Open.compute_tq_s``.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid

import numpy as np
import pytest

from edge_spec_ros.cloud.limits import DEFAULT_MAX_NEW_TOKENS, DEFAULT_MAX_PROMPT_TOKENS, MAX_STOP_TOKENS
from edge_spec_ros.server_process import verifier_server
from edge_spec_ros.wire.codec import HEADER, encode
from edge_spec_ros.wire.messages import (
    Close, DraftBlock, Envelope, Error, ErrorCode, ExitResult, Generate, Open, Opened, Stats, StatsReply, Tokens,
)

from raw_peer import REPLY_S, RawPeer

LINGER_MS = 1000
EMULATED_TQ_S = 0.2
V = 640  # the embedded verifier's vocabulary (checked in the fixture)
B, T, M, L = ErrorCode.BAD_REQUEST, ErrorCode.TOO_LARGE, ErrorCode.MALFORMED, ErrorCode.OUT_OF_ORDER


class Peer(RawPeer):
    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint, linger_ms=LINGER_MS)  # a last Close still leaves

    def request(self, sid: bytes, msg, raw_meta: dict | None = None):
        """Send ``msg``, its header metadata updated with ``raw_meta`` (values no dataclass would
        hold), and return the reply."""
        frames = encode(Envelope(sid, msg), compact_drafts=not raw_meta)  # JSON metadata to edit
        if raw_meta:
            meta = json.loads(frames[0][HEADER.size:])
            meta.update(raw_meta)
            frames[0] = frames[0][:HEADER.size] + json.dumps(meta).encode()
        self.send_raw(frames)
        return self.receive()


@pytest.fixture(scope="module")
def server():
    with verifier_server("--threads", "1", "--emulate-tq-s", str(EMULATED_TQ_S), "--max-sessions", "4",
                         "--max-sessions-per-client", "3") as s:
        yield s


@pytest.fixture
def peer(server):
    p = Peer(server.endpoint)
    yield p
    p.close()


def ids_of(prompt) -> np.ndarray:
    return prompt.input_ids.numpy().astype(np.int32)


def open_session(peer: Peer, ids: np.ndarray, **kw) -> bytes:
    sid = uuid.uuid4().bytes
    reply = peer.request(sid, Open(input_ids=ids, **kw))
    assert isinstance(reply, Opened), reply
    return sid


def wait_until_no_sessions(peer: Peer) -> None:
    """Until the server has handled the Close messages other connections sent."""
    for _ in range(REPLY_S * 10):
        if json.loads(peer.request(bytes(16), Stats()).counters)["sessions_open"] == 0:
            return
        time.sleep(0.1)


def tok(*t: int) -> np.ndarray:
    return np.asarray(t, np.int32)


def gif() -> bytes:
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="GIF")
    return buf.getvalue()


def open_cases(ids: np.ndarray, image_ids: np.ndarray) -> list[tuple[str, dict, ErrorCode, str]]:
    """(field, Open arguments, code, reason) — every field of Open."""
    return [
        ("input_ids", dict(input_ids=tok(5)), B, "Open.input_ids"),
        ("input_ids", dict(input_ids=np.ones((2, 2), np.int32)), B, "Open.input_ids"),
        ("input_ids", dict(input_ids=tok(5, V)), B, "Open.input_ids: ids must be in"),
        ("input_ids", dict(input_ids=np.full(DEFAULT_MAX_PROMPT_TOKENS + 1, 5, np.int32)), T, "exceeds the limit"),
        ("image", dict(input_ids=image_ids, image=b"not an image"), B, "Open.image: not a JPEG/PNG"),
        ("image", dict(input_ids=image_ids, image=gif()), B, "Open.image: not a JPEG/PNG"),
        ("image", dict(input_ids=ids, image=_png(8, 8)), B, "image placeholders"),  # found by the worker
        ("temperature", dict(input_ids=ids, temperature=float("nan")), B, "Open.temperature"),
        ("temperature", dict(input_ids=ids, temperature=-1.0), B, "Open.temperature"),
        ("temperature", dict(input_ids=ids, temperature=float("inf")), B, "Open.temperature"),
        ("seed", dict(input_ids=ids, seed=-1), B, "Open.seed"),
        ("seed", dict(input_ids=ids, seed=2**64), B, "Open.seed"),
        ("want_exits", dict(input_ids=ids, raw_meta={"want_exits": 1}), M, "Open.want_exits"),
        ("queue_policy", dict(input_ids=ids, queue_policy="lifo"), B, "Open.queue_policy"),
        ("compute_tq_s", dict(input_ids=ids, compute_tq_s=0.5), B, "server configuration"),
        ("p_top_k", dict(input_ids=ids, p_top_k=-1), B, "Open.p_top_k"),
        ("p_top_k", dict(input_ids=ids, p_top_k=V + 1), B, "Open.p_top_k"),
        ("down_delay_s", dict(input_ids=ids, down_delay_s=-0.1), B, "Open.down_delay_s"),
        ("down_delay_s", dict(input_ids=ids, down_delay_s=1e9), B, "Open.down_delay_s"),
        ("down_jitter_s", dict(input_ids=ids, down_jitter_s=float("nan")), B, "Open.down_jitter_s"),
        ("down_bandwidth_bps", dict(input_ids=ids, down_bandwidth_bps=1.0), B, "Open.down_bandwidth_bps"),
        ("down_bandwidth_bps", dict(input_ids=ids, down_bandwidth_bps=-1e6), B, "Open.down_bandwidth_bps"),
        ("down_loss", dict(input_ids=ids, down_loss=1.0), B, "Open.down_loss"),
        ("down_loss", dict(input_ids=ids, down_loss=-0.5), B, "Open.down_loss"),
        ("priority", dict(input_ids=ids, priority=-1), B, "Open.priority must be in [0, 4)"),
        ("priority", dict(input_ids=ids, priority=4), B, "Open.priority must be in [0, 4)"),
        ("priority", dict(input_ids=ids, raw_meta={"priority": 1.5}), M, "Open.priority"),
        ("pipelined", dict(input_ids=ids, raw_meta={"pipelined": 1}), M, "Open.pipelined"),
        ("grammar", dict(input_ids=ids, grammar="walk"), ErrorCode.GRAMMAR, "Open.grammar: unknown grammar"),
        ("grammar", dict(input_ids=ids, grammar="root ::= " + "x" * 20000), T, "Open.grammar"),
        ("grammar", dict(input_ids=ids, grammar='root ::= ("a" | '), ErrorCode.GRAMMAR,
         "Open.grammar: the grammar does not compile"),
    ]


def _png(w: int, h: int) -> bytes:
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (w, h)).save(buf, format="PNG")
    return buf.getvalue()


def draft_cases(n: int) -> list[tuple[str, str, dict, ErrorCode, str]]:
    """(field, session kind, DraftBlock arguments, code, reason) — every field of DraftBlock; ``n`` is
    the prompt length (the next position)."""
    q = np.full((2, V), 1.0 / V, np.float32)
    return [
        ("round", "greedy", dict(round=-1, position=n, tokens=tok(20, 21)), B, "DraftBlock.round"),
        ("round", "greedy", dict(round=7, position=n, tokens=tok(20, 21)), L, "expected 0"),
        ("position", "greedy", dict(round=0, position=-1, tokens=tok(20, 21)), B, "DraftBlock.position"),
        ("position", "greedy", dict(round=0, position=n + 3, tokens=tok(20, 21)), B, "committed prefix"),
        ("tokens", "greedy", dict(round=0, position=n, tokens=tok()), B, "DraftBlock.tokens"),
        ("tokens", "greedy", dict(round=0, position=n, tokens=np.ones(65, np.int32)), T, "65 tokens exceed the limit of 64"),
        ("tokens", "greedy", dict(round=0, position=n, tokens=tok(20, V)), B, "DraftBlock.tokens"),
        ("tokens", "greedy", dict(round=0, position=n, tokens=np.ones((2, 2), np.int32)), B, "DraftBlock.tokens"),
        ("q", "sampled", dict(round=0, position=n, tokens=tok(20, 21)), B, "needs exactly one of q"),
        ("q", "sampled", dict(round=0, position=n, tokens=tok(20, 21), q=q[:1]), B, "DraftBlock.q"),
        ("q", "sampled", dict(round=0, position=n, tokens=tok(20, 21), q=q * np.nan), B, "finite and non-negative"),
        ("q", "greedy", dict(round=0, position=n, tokens=tok(20, 21), q=q, q_draft=q[:, 0].copy()), B, "at most one"),
        ("q_ids", "sampled", dict(round=0, position=n, tokens=tok(20, 21), q_ids=np.zeros((2, 3), np.int32)), B,
         "DraftBlock.q_ids/q_values"),
        ("q_ids", "sampled", dict(round=0, position=n, tokens=tok(20, 21), q_ids=np.full((2, 1), V, np.int32),
                                  q_values=np.ones((2, 1), np.float32)), B, "DraftBlock.q_ids"),
        ("q_values", "sampled", dict(round=0, position=n, tokens=tok(20, 21), q_ids=np.zeros((2, 1), np.int32),
                                     q_values=np.ones((2, 1), np.int32)), B, "DraftBlock.q_values"),
        ("q_draft", "sampled", dict(round=0, position=n, tokens=tok(20, 21), q_draft=np.ones(2, np.float32)), B,
         "want_exits=False"),
        ("q_draft", "split", dict(round=0, position=n, tokens=tok(20, 21), q_draft=np.ones(3, np.float32)), B,
         "DraftBlock.q_draft"),
        ("resampled", "greedy", dict(round=0, position=n, tokens=tok(20, 21), resampled=-2), B, "DraftBlock.resampled"),
        ("resampled", "greedy", dict(round=0, position=n, tokens=tok(20, 21), resampled=V), B, "DraftBlock.resampled"),
        ("resampled", "greedy", dict(round=0, position=n, tokens=tok(20, 21), resampled=5), B, "DSSD"),
        ("chained", "greedy", dict(round=0, position=n, tokens=tok(20, 21), raw_meta={"chained": 1}), M,
         "DraftBlock.chained"),
        ("partial", "greedy", dict(round=0, position=n, tokens=tok(20, 21), raw_meta={"partial": "yes"}), M,
         "DraftBlock.partial"),
    ]


GENERATE_CASES = [
    ("max_new_tokens", dict(max_new_tokens=0), B, "Generate.max_new_tokens"),
    ("max_new_tokens", dict(max_new_tokens=DEFAULT_MAX_NEW_TOKENS + 1), T, "exceeds the limit"),
    ("max_new_tokens", dict(max_new_tokens=8, raw_meta={"max_new_tokens": 8.5}), M, "Generate.max_new_tokens"),
    ("stop_tokens", dict(max_new_tokens=4, stop_tokens=tuple(range(MAX_STOP_TOKENS + 1))), B, "Generate.stop_tokens"),
    ("stop_tokens", dict(max_new_tokens=4, stop_tokens=(V,)), B, "Generate.stop_tokens"),
    ("resampled", dict(max_new_tokens=4, resampled=-2), B, "Generate.resampled"),
    ("resampled", dict(max_new_tokens=4, resampled=7), B, "DSSD"),
]

SESSION_KINDS = {"greedy": dict(), "sampled": dict(temperature=0.8), "split": dict(temperature=0.8, want_exits=False)}


def test_the_table_covers_every_field(text_prompt):
    ids = ids_of(text_prompt)
    covered = {("Open", c[0]) for c in open_cases(ids, ids)} | {("DraftBlock", c[0]) for c in draft_cases(len(ids))} \
        | {("Generate", c[0]) for c in GENERATE_CASES}
    every = {(cls.__name__, f.name) for cls in (Open, DraftBlock, Generate) for f in dataclasses.fields(cls)}
    assert every - covered == set()


def test_every_open_field_is_refused_with_a_code_and_a_reason(peer, text_prompt, prompts):
    image_ids = ids_of(prompts[0])
    for field, kwargs, code, reason in open_cases(ids_of(text_prompt), image_ids):
        raw = kwargs.pop("raw_meta", None)
        reply = peer.request(uuid.uuid4().bytes, Open(**kwargs), raw)
        assert isinstance(reply, Error) and reply.code == code and reason in reply.message, (field, reply)


def test_every_draft_field_is_refused_with_a_code_and_a_reason(peer, text_prompt):
    ids = ids_of(text_prompt)
    for field, kind, kwargs, code, reason in draft_cases(len(ids)):
        sid = open_session(peer, ids, **SESSION_KINDS[kind])
        raw = kwargs.pop("raw_meta", None)
        reply = peer.request(sid, DraftBlock(**kwargs), raw)
        assert isinstance(reply, Error) and reply.code == code and reason in reply.message, (field, kind, reply)
        peer.sock.send_multipart(encode(Envelope(sid, Close())))


def test_every_generate_field_is_refused_with_a_code_and_a_reason(peer, text_prompt):
    ids = ids_of(text_prompt)
    for field, kwargs, code, reason in GENERATE_CASES:
        sid = open_session(peer, ids)
        raw = kwargs.pop("raw_meta", None)
        reply = peer.request(sid, Generate(**kwargs), raw)
        assert isinstance(reply, Error) and reply.code == code and reason in reply.message, (field, reply)
        peer.sock.send_multipart(encode(Envelope(sid, Close())))


def test_replies_and_unknown_sessions_are_refused(peer):
    sid = uuid.uuid4().bytes
    for msg in (Opened(6, (1, 2), 0.0), ExitResult(0, 1, 0, tok(3), 0.5, True), Tokens(tok(3), True),
                Error(1, "x"), StatsReply("{}")):
        reply = peer.request(sid, msg)
        assert isinstance(reply, Error) and reply.code == B and "is not a request" in reply.message
    for msg in (Close(), Generate(4), DraftBlock(0, 5, tok(20))):
        reply = peer.request(sid, msg)
        assert isinstance(reply, Error) and reply.code == ErrorCode.UNKNOWN_SESSION and reply.message
    assert isinstance(peer.request(sid, Stats()), StatsReply)


def test_session_quota_per_client_and_in_all(server, text_prompt):
    """--max-sessions-per-client 3 and --max-sessions 4: a client's fourth Open is QUOTA; another
    client's second Open, with four sessions held in all, is BUSY; Close frees a place."""
    ids = ids_of(text_prompt)
    a, b = Peer(server.endpoint), Peer(server.endpoint)
    mine: list[bytes] = []
    theirs: list[bytes] = []
    wait_until_no_sessions(a)
    try:
        mine = [open_session(a, ids) for _ in range(3)]
        reply = a.request(uuid.uuid4().bytes, Open(input_ids=ids))
        assert isinstance(reply, Error) and reply.code == ErrorCode.QUOTA and "sessions" in reply.message
        theirs = [open_session(b, ids)]
        reply = b.request(uuid.uuid4().bytes, Open(input_ids=ids))
        assert isinstance(reply, Error) and reply.code == ErrorCode.BUSY
        a.sock.send_multipart(encode(Envelope(mine.pop(0), Close())))
        assert isinstance(a.request(bytes(16), Stats()), StatsReply)  # answered after the Close: it is done
        theirs.append(open_session(b, ids))
    finally:
        for peer, sids in ((a, mine), (b, theirs)):
            for sid in sids:
                peer.sock.send_multipart(encode(Envelope(sid, Close())))
        a.close()
        b.close()


def test_compute_emulation_is_the_servers(peer, text_prompt):
    """The operator's --emulate-tq-s paces every round; no request can change it."""
    ids = ids_of(text_prompt)
    wait_until_no_sessions(peer)
    sid = open_session(peer, ids, want_exits=False)
    final = peer.request(sid, DraftBlock(round=0, position=len(ids), tokens=tok(20, 21)))
    assert isinstance(final, ExitResult) and final.is_final and final.compute_s >= EMULATED_TQ_S * 0.95
    peer.sock.send_multipart(encode(Envelope(sid, Close())))
