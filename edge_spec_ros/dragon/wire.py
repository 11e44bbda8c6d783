"""DRAGON's messages (Liu et al. 2025, Speculative Aggregation over the link), on the project's frames.

Legend (the paper's notation, dragon/aggregation.py): l ≡ robot, r ≡ cloud; t — generated position;
x^s_t — side s's draft; p^s_t — its locally aggregated next-token distribution; log h̃^s_t — its
log Σ_d exp R(d, x_<t); x_t — target token; S^l, S^r — acceptance flags; V — vocabulary size.

These are frozen dataclasses in the style of wire/messages.py and travel through the same codec
(wire/codec.py: header + JSON scalars + raw/LZ4 array frames, versioned, every descriptor validated
before anything is decompressed). Their type numbers (32-37) lie outside the verifier protocol's
MsgType (1-10) so a verifier that predates DRAGON answers them with a clean error. The codec, a layer
below, does not import this module: importing it registers the messages with the codec
(``codec.register``), which the robot's side (robot.py) and the server's DRAGON sessions (session.py,
which ``serve`` always gives the server) do; a process that imports neither answers them as unknown.

What crosses the link, and only this: the robot's query text and decoding parameters once; per
position the drafts x^s_t with log h̃^s_t and p^s_t (full, or on demand), the target token with the
acceptance flags and the aggregator-switch signal, and scalar timings for the scheduler. No field
holds document text, a document id, a document KV cache or a retrieval-score vector (a test checks
the field names and every encoded message of a session).

One vocabulary: the open carries the robot's tokenizer fingerprint (models/tokenizer.py:
tokenizer_fingerprint, a digest of the id → token mapping and the vocabulary size) and the reply the
cloud's. The cloud refuses an open whose fingerprint is not its own (check_open), the robot a reply
whose fingerprint is not its own (check_tokenizer): equal vocabulary sizes alone would let two
tokenizers that give one id two meanings aggregate nonsense. The fingerprint came with protocol 2;
an open of protocol 1 (no fingerprint) gets the protocol refusal, an empty or malformed one is refused.

Flow (either side may aggregate; the aggregator is named at open and moved by the switch signal):
  robot → cloud  DragonOpen                      the query; the cloud retrieves its own documents
  cloud → robot  DragonOpened                    its documents are prefilled
  drafting side → aggregator  DragonDraft        every draft as soon as it is decoded (continuous)
  aggregator → drafting side  DragonTarget       x_t, S^l, S^r, switch (after Algorithm 1 at t)
  aggregator → drafting side  DragonDistRequest  (payload "on_demand") p^s_t, or one value of it, is needed
  drafting side → aggregator  DragonDist         p^s_t in full (or that value), answering the request
  robot → cloud  Close (wire/messages.py)        the decision is over
A side whose draft was rejected clears its queue, rolls back its KV caches and bumps its ``epoch``;
drafts carry the epoch they were decoded in, so the aggregator drops those still in flight from
before the rejection. After ``switch`` the old aggregator sends its queued drafts to the new one.

Bad values. A value no honest side sends is refused, naming the field (``check_open`` here; the
decoding messages in dragon/peer.DragonPeer.receive; the server answers BAD_REQUEST, the codec
MALFORMED or TOO_LARGE before that): ids outside the vocabulary, a position or epoch that is not the
next, a p^s_t that is no distribution or travels in the other payload's field, durations that are
negative, not finite or over an hour, clock readings that are not. Dropped without a reply, because
honest sides send them: a draft of an earlier epoch (decoded before its side learned of a rejection)
and a draft reaching a side that no longer aggregates (sent before a switch). Taken as sent: the
other side's acceptance flag in a DragonTarget (it concerns the aggregator's own draft, which the
receiver never saw) and an echoed stamp that gives no plausible round trip (ignored by the scheduler).
test/cloud/test_dragon_refusals.py sends every field's bad values to a real server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from enum import IntEnum

import numpy as np

from edge_spec_ros.wire import codec

DRAGON_PROTOCOL = 2  # DragonOpen.protocol / DragonOpened.protocol: bumped on any incompatible change
# (2: the tokenizer fingerprints)
FINGERPRINT_HEX_DIGITS = 32  # models/tokenizer.tokenizer_fingerprint: sha256's first 16 bytes, lowercase hex
_FINGERPRINT = re.compile(f"[0-9a-f]{{{FINGERPRINT_HEX_DIGITS}}}")
PAYLOADS = ("full", "on_demand")  # how p^s_t travels (see DragonOpen.payload)
AGGREGATOR_POLICIES = ("dragon", "robot", "cloud")  # eq. 8 scheduler, or a fixed aggregator
MAX_EMULATED_DELAY_S = 5.0  # the most downlink delay + jitter a robot may ask the server to emulate
MAX_QUEUE = 64  # the most drafts a side may decode ahead (DragonOpen.max_queue)
MAX_STOP_TOKENS = 64  # DragonOpen.stop_tokens


class DragonType(IntEnum):
    DRAGON_OPEN = 32  # robot → cloud: start a DRAGON decision
    DRAGON_OPENED = 33  # cloud → robot: documents retrieved and prefilled
    DRAGON_DRAFT = 34  # drafting side → aggregator: x^s_t, log h̃^s_t, p^s_t (or p^s_t(x^s_t) only)
    DRAGON_TARGET = 35  # aggregator → drafting side: x_t, S^l, S^r, switch
    DRAGON_DIST_REQUEST = 36  # aggregator → drafting side: send p^s_t in full (payload "on_demand")
    DRAGON_DIST = 37  # drafting side → aggregator: p^s_t in full


@dataclass(frozen=True)
class DragonOpen:
    query: str  # the user's question: each side retrieves its own documents with it
    max_new_tokens: int
    temperature: float = 0.0  # 0: greedy (argmax p_t), else sampled
    seed: int = 0  # PositionalRNG seed: every draw is u(seed, stream, t)
    stop_tokens: tuple[int, ...] = ()
    top_k: int = 2  # documents the cloud retrieves for the query
    aggregator: str = "robot"  # who aggregates position 0: robot | cloud
    policy: str = "dragon"  # dragon: eq. 8 moves the aggregator; robot | cloud: it never moves
    payload: str = "full"  # full: p^s_t with every draft; on_demand: x^s_t, p^s_t(x^s_t), and p^s_t
    # in full only when Algorithm 1 cannot finish without it (DragonDistRequest)
    max_queue: int = 4  # drafts a side decodes ahead of the target (the paper's queues are unbounded)
    protocol: int = DRAGON_PROTOCOL
    tokenizer_fingerprint: str = ""  # the robot's (models/tokenizer.tokenizer_fingerprint); "" is refused
    down_delay_s: float = 0.0  # emulated downlink (wire.emulator.LinkShape), benches and tests only
    down_jitter_s: float = 0.0
    down_bandwidth_bps: float = 0.0
    TYPE = DragonType.DRAGON_OPEN


@dataclass(frozen=True)
class DragonOpened:
    vocab_size: int  # V of the cloud's LM: must equal the robot's
    prefill_s: float = 0.0
    protocol: int = DRAGON_PROTOCOL
    tokenizer_fingerprint: str = ""  # the cloud's: must equal the robot's
    TYPE = DragonType.DRAGON_OPENED


@dataclass(frozen=True)
class DragonDraft:
    position: int  # t, from 0 at the first generated token
    epoch: int  # the sender's rejections so far when it decoded this draft (stale drafts are dropped)
    token: int  # x^s_t
    log_h: float  # log h̃^s_t
    probs: np.ndarray | None = None  # (V,) float32 p^s_t (payload "full")
    p_token: float = -1.0  # p^s_t(x^s_t) (payload "on_demand")
    decode_s: float = 0.0  # the sender's time to decode this draft (c^s_dec, the scheduler's input)
    echo_stamp: float = -1.0  # stamp of the last target received (the aggregator measures rtt) ...
    echo_hold_s: float = 0.0  # ... and how long the sender held it before this message
    TYPE = DragonType.DRAGON_DRAFT


@dataclass(frozen=True)
class DragonTarget:
    position: int  # t
    token: int  # x_t
    accept_robot: bool  # S^l
    accept_cloud: bool  # S^r
    switch: bool = False  # the receiver aggregates from t + 1 on (eq. 6 with eq. 8)
    stamp: float = 0.0  # the aggregator's clock when sent (echoed by the next draft)
    decode_s: float = 0.0  # the aggregator's c_dec estimate, for the scheduler after a switch
    rtt_s: float = 0.0  # the aggregator's rtt estimate, likewise
    TYPE = DragonType.DRAGON_TARGET


@dataclass(frozen=True)
class DragonDistRequest:
    position: int  # t
    epoch: int  # the epoch of the draft whose p^s_t is wanted
    token: int = -1  # -1: p^s_t in full; else only the value p^s_t(token)
    TYPE = DragonType.DRAGON_DIST_REQUEST


@dataclass(frozen=True)
class DragonDist:
    position: int
    epoch: int
    probs: np.ndarray  # (V,) float32 p^s_t, or (1,) its value at ``token``
    token: int = -1  # -1: probs is all of p^s_t
    TYPE = DragonType.DRAGON_DIST


DRAGON_TYPES: dict[DragonType, type] = {
    cls.TYPE: cls for cls in (DragonOpen, DragonOpened, DragonDraft, DragonTarget, DragonDistRequest, DragonDist)
}
DragonMessage = DragonOpen | DragonOpened | DragonDraft | DragonTarget | DragonDistRequest | DragonDist
DRAGON_FIELD_DTYPES = {"probs": "float32"}  # arrays whose dtype the protocol fixes
# The project's frames carry these beside the verifier protocol's (wire/codec.py): importing this
# module is what lets a process encode and decode them
codec.register(DRAGON_TYPES, DRAGON_FIELD_DTYPES)

# Field names that would carry retrieval material; none of the messages above may have one.
FORBIDDEN_FIELD_WORDS = ("doc", "text", "passage", "score", "relevance", "kv", "cache", "retriev", "memory")


def field_names() -> dict[str, tuple[str, ...]]:
    """Every DRAGON message's field names (the privacy test inspects them)."""
    return {cls.__name__: tuple(f.name for f in fields(cls)) for cls in DRAGON_TYPES.values()}


def check_fingerprint(fingerprint: str, field: str) -> None:
    """ValueError unless ``fingerprint`` has the form of models/tokenizer.tokenizer_fingerprint's."""
    if not isinstance(fingerprint, str) or not _FINGERPRINT.fullmatch(fingerprint):
        raise ValueError(f"{field} must be {FINGERPRINT_HEX_DIGITS} lowercase hex digits "
                         f"(models/tokenizer.tokenizer_fingerprint), got {str(fingerprint)[:40]!r}")


def check_tokenizer(robot: str, cloud: str) -> None:
    """ValueError unless the robot's tokenizer fingerprint (DragonOpen's) and the cloud's (DragonOpened's)
    are well formed and equal."""
    check_fingerprint(robot, "DragonOpen.tokenizer_fingerprint")
    check_fingerprint(cloud, "DragonOpened.tokenizer_fingerprint")
    if robot != cloud:
        raise ValueError(f"the tokenizers differ: the robot's tokenizer fingerprint {robot} is not the cloud's "
                         f"{cloud}; DRAGON aggregates distributions over one vocabulary, so both sides need the "
                         "same tokenizer (the same model source: the drafter's dragon_model and the verifier's "
                         "serve --dragon-model)")


def check_open(msg: DragonOpen, vocab_size: int, max_new_tokens: int, max_top_k: int = 16,
               max_query_chars: int = 4096, *, tokenizer_fingerprint: str) -> None:
    """Raise ValueError, naming the field, unless ``msg`` is a request this side can serve: this side's
    vocabulary has ``vocab_size`` ids and its tokenizer ``tokenizer_fingerprint`` (which the request
    must carry)."""
    if msg.protocol != DRAGON_PROTOCOL:
        raise ValueError(f"DRAGON protocol {msg.protocol} (this side speaks {DRAGON_PROTOCOL})")
    check_tokenizer(msg.tokenizer_fingerprint, tokenizer_fingerprint)
    if not msg.query.strip() or len(msg.query) > max_query_chars:
        raise ValueError(f"DragonOpen.query must be 1..{max_query_chars} characters, not blank")
    if not 1 <= msg.max_new_tokens <= max_new_tokens:
        raise ValueError(f"DragonOpen.max_new_tokens must be in [1, {max_new_tokens}]")
    if not (msg.temperature >= 0.0 and np.isfinite(msg.temperature)):
        raise ValueError("DragonOpen.temperature must be finite and >= 0")
    if not 0 <= msg.seed < 2**64:
        raise ValueError("DragonOpen.seed must be in [0, 2**64)")
    if len(msg.stop_tokens) > MAX_STOP_TOKENS or any(not 0 <= t < vocab_size for t in msg.stop_tokens):
        raise ValueError(f"DragonOpen.stop_tokens: at most {MAX_STOP_TOKENS} ids in [0, {vocab_size})")
    if not 0 <= msg.top_k <= max_top_k:
        raise ValueError(f"DragonOpen.top_k must be in [0, {max_top_k}]")
    if msg.aggregator not in ("robot", "cloud"):
        raise ValueError("DragonOpen.aggregator must be robot or cloud")
    if msg.policy not in AGGREGATOR_POLICIES:
        raise ValueError(f"DragonOpen.policy must be one of {AGGREGATOR_POLICIES}")
    if msg.payload not in PAYLOADS:
        raise ValueError(f"DragonOpen.payload must be one of {PAYLOADS}")
    if not 1 <= msg.max_queue <= MAX_QUEUE:
        raise ValueError(f"DragonOpen.max_queue must be in [1, {MAX_QUEUE}]")
    for name in ("down_delay_s", "down_jitter_s", "down_bandwidth_bps"):
        value = getattr(msg, name)
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(f"DragonOpen.{name}: an emulated downlink value is finite and >= 0")
    if msg.down_delay_s + msg.down_jitter_s > MAX_EMULATED_DELAY_S:
        raise ValueError(f"DragonOpen.down_delay_s + down_jitter_s: the emulated downlink delay is at most "
                         f"{MAX_EMULATED_DELAY_S} s")


def check_probs(probs: np.ndarray | None, vocab_size: int) -> None:
    """A p^s_t from the other side: (V,) float32, finite, non-negative, with mass."""
    if probs is None:
        raise ValueError("p^s_t missing")
    if probs.shape != (vocab_size,):
        raise ValueError(f"p^s_t must have shape ({vocab_size},), got {probs.shape}")
    if not np.all(np.isfinite(probs)) or np.any(probs < 0) or not probs.sum() > 0:
        raise ValueError("p^s_t must be finite, non-negative and have mass")
