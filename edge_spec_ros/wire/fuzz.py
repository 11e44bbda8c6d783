"""A structure-aware fuzzer of the wire protocol: valid frame sets of every message type, mutated one
field at a time (metadata values, array descriptors, buffers), plus truncated, extended and random
frames. Pure and seeded: ``cases(seed, n)`` yields the same ``n`` frame sets for the same seed.

Used by the codec's fuzz test (``decode`` either returns an Envelope or raises ``WireError``,
nothing else), the server's (every case is answered and none is an INTERNAL error) and the soak run.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator

import numpy as np

from edge_spec_ros.wire.codec import ALLOWED_DTYPES, HEADER, VERSION, encode
from edge_spec_ros.wire.messages import (
    Close, DraftBlock, Envelope, Error, ExitResult, Generate, Message, MsgType, Open, Opened, Ping, Pong, Stats,
    StatsReply, Tokens,
)

ODD_VALUES = [None, True, False, 0, -1, 1, 2**31, 2**63, 2**64, -(2**64), 10**30, 0.5, -0.0, 1e308, "NaN", "Infinity",
              "", "x", "priority", "\u200b", "\x00", [], [1, 2], [[1]], {}, {"a": 1}, [None], "9" * 50]
ODD_DTYPES = [*ALLOWED_DTYPES, "float64", "object", "<U4", "", None, 5]
ODD_CODECS = ["raw", "lz4", "zstd", "", None, 1]
REQUESTS = (Open, DraftBlock, Generate, Close, Stats, Ping)
# Open.grammar: none, the ids a verifier knows, an unknown one, EBNF text that compiles, that does not, and
# text over any server's size limit (models.grammar.MAX_GRAMMAR_BYTES)
GRAMMARS = ["", "", "action", "action-brief", "walk", 'root ::= "stop" | "go"', 'root ::= ("a" | ', "root ::= " + "x" * 20000]


def sample_messages(rng: random.Random, vocab: int, prompt: np.ndarray | None = None) -> list[Message]:
    """Valid messages of every type, with values drawn from ``rng`` (requests near the server's
    real vocabulary and, given one, a real prompt)."""
    nrng = np.random.default_rng(rng.randrange(2**32))
    ids = prompt if prompt is not None else nrng.integers(0, vocab, rng.randint(2, 40)).astype(np.int32)
    gamma = rng.randint(1, 6)
    tokens = nrng.integers(0, vocab, gamma).astype(np.int32)
    q = nrng.random((gamma, vocab)).astype(np.float32)
    q /= q.sum(-1, keepdims=True)
    return [
        Open(input_ids=ids, temperature=rng.choice([0.0, 0.7]), seed=rng.randrange(2**64),
             want_exits=rng.random() < 0.5, queue_policy=rng.choice(["priority", "fifo", "random"]),
             grammar=rng.choice(GRAMMARS)),
        DraftBlock(round=rng.randint(0, 3), position=len(ids), tokens=tokens,
                   q=q if rng.random() < 0.5 else None),
        DraftBlock(round=0, position=len(ids), tokens=tokens, q_ids=np.argsort(-q, -1)[:, :4].astype(np.int32),
                   q_values=np.sort(q, -1)[:, ::-1][:, :4].copy()),
        DraftBlock(round=0, position=len(ids), tokens=tokens, q_draft=q[np.arange(gamma), tokens].copy()),
        Generate(max_new_tokens=rng.randint(1, 8), stop_tokens=tuple(int(t) for t in tokens[:2])),
        Close(), Stats(), Ping(rng.randrange(2**31)),
        Opened(6, (1, 2, 3), 0.01), ExitResult(0, 6, 1, tokens[:2], 0.5, True),
        Tokens(tokens[:1], True), Error(1, "x"), StatsReply("{}"), Pong(rng.randrange(2**31), 2),
    ]


def _mutate_meta(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    head, meta = frames[0][:HEADER.size], json.loads(frames[0][HEADER.size:])
    keys = [k for k in meta if k != "arrays"]
    choice = rng.random()
    if keys and choice < 0.5:
        meta[rng.choice(keys)] = rng.choice(ODD_VALUES)
    elif choice < 0.65:
        meta[rng.choice(["round", "seed", "bogus", "temperature", "max_new_tokens", "tokens", "seq", "grammar"])] = \
            rng.choice(ODD_VALUES)
    elif meta["arrays"] and choice < 0.95:
        desc = rng.choice(meta["arrays"])
        slot = rng.randrange(6)
        if slot == 0:
            desc[0] = rng.choice(["bogus", "q", "tokens", "image", "input_ids", 7, None])
        elif slot == 1:
            desc[1] = rng.choice(ODD_DTYPES)
        elif slot == 2:
            desc[2] = rng.choice([[], [0], [2**40], [-1], [1.5], [1] * 9, "x", [3, 4]])
        elif slot == 3:
            desc[3] = rng.choice(ODD_CODECS)
        elif slot == 4:
            desc[4] = rng.choice(ODD_VALUES)
        else:
            desc.append(1)
    else:
        meta["arrays"] = rng.choice([None, {}, [[]], meta["arrays"] * 2, "x"])
    return [head + json.dumps(meta).encode(), *frames[1:]]


def _mutate_header(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    head = bytearray(frames[0])
    slot = rng.randrange(4)
    if slot == 0:
        head[rng.randrange(2)] ^= 1 + rng.randrange(255)  # magic
    elif slot == 1:
        head[2] = rng.choice([0, VERSION + 1, 255])  # version
    elif slot == 2:
        head[3] = rng.choice([0, 11, 99, 255, *[int(t) for t in MsgType]])  # type
    else:
        del head[rng.randrange(HEADER.size, len(head) + 1):]  # truncated metadata
    return [bytes(head), *frames[1:]]


def _mutate_bytes(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    frames = list(frames)
    i = rng.randrange(len(frames))
    data = bytearray(frames[i])
    slot = rng.randrange(4)
    if slot == 0 and data:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif slot == 1:
        del data[rng.randrange(len(data) + 1):]
    elif slot == 2:
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    else:
        frames.insert(rng.randrange(len(frames) + 1), bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))))
        return frames
    frames[i] = bytes(data)
    return frames


def mutate(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    """One mutation of a valid frame set: metadata (most often), header, or bytes."""
    r = rng.random()
    try:
        if r < 0.6:
            return _mutate_meta(rng, frames)
        if r < 0.75:
            return _mutate_header(rng, frames)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):  # already broken by a mutation
        pass
    if r < 0.95:
        return _mutate_bytes(rng, frames)
    return [bytes(rng.randrange(256) for _ in range(rng.randint(0, 80))) for _ in range(rng.randint(1, 3))]


def cases(seed: int, n: int, vocab: int = 640, session: bytes = bytes(16),
          prompt: np.ndarray | None = None, requests_only: bool = False) -> Iterator[list[bytes]]:
    """``n`` fuzz cases: mostly mutated valid frame sets, some left valid."""
    rng = random.Random(seed)
    for _ in range(n):
        msgs = [m for m in sample_messages(rng, vocab, prompt) if not requests_only or isinstance(m, REQUESTS)]
        frames = encode(Envelope(session, rng.choice(msgs)))
        for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
            frames = mutate(rng, frames) if frames else frames
        yield frames


def field_names() -> set[tuple[str, str]]:
    """(message, field) of every request message, for coverage checks."""
    return {(cls.__name__, f.name) for cls in REQUESTS for f in dataclasses.fields(cls)}
