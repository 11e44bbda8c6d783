"""Messages between the robot bridge (ZeroMQ DEALER) and the cloud verifier (ROUTER).

Each message is a frozen dataclass; ``wire/codec.py`` turns it into ``list[bytes]`` and back.
Field kinds: int, float, str, bool, tuple[int, ...] and None travel in the header's JSON metadata;
numpy arrays and bytes travel as raw (optionally LZ4-compressed) buffers in their own frames.

Legend: γ — draft length; δ — accepted draft tokens; q — draft distribution; L — final exit layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np


class MsgType(IntEnum):
    OPEN = 1  # robot → cloud: start a decision (prompt ids + image once)
    OPENED = 2  # cloud → robot: prefill done
    DRAFT = 3  # robot → cloud: a γ-token draft block for verification
    EXIT = 4  # cloud → robot: one exit's verification result (the final one is the authority)
    GENERATE = 5  # robot → cloud: cloud-only autoregressive decoding of the open decision
    TOKENS = 6  # cloud → robot: tokens decoded by the cloud alone
    CLOSE = 7  # robot → cloud: the decision is over, free its state
    ERROR = 8  # cloud → robot: a request was refused
    STATS = 9  # robot → cloud: ask for the server's counters
    STATS_REPLY = 10  # cloud → robot: the counters
    # 11: a compact draft block (wire/compact.py); 32-37: DRAGON (dragon/wire.py)
    PING = 12  # robot → cloud: the link's heartbeat, independent of decisions (edge/client.py)
    PONG = 13  # cloud → robot: the answer of the server's I/O thread, never queued behind a worker


class ErrorCode(IntEnum):
    MALFORMED = 1  # frames that do not decode
    UNSUPPORTED_VERSION = 2
    UNKNOWN_SESSION = 3
    OUT_OF_ORDER = 4  # a draft for a round other than the next one
    BAD_REQUEST = 5  # decodes, but its content is invalid (ids out of vocabulary, bad image, ...)
    INTERNAL = 6  # the server failed while serving a valid request
    BUSY = 7  # the server holds as many sessions as it may
    TOO_LARGE = 8  # over a server limit: message, prompt, image pixels or bytes, max_new_tokens
    QUOTA = 9  # this client holds as many sessions as one client may
    GRAMMAR = 10  # Open.grammar unknown or not compiling, or a token the grammar forbids (a drafted or resampled one)


@dataclass(frozen=True)
class Open:
    input_ids: np.ndarray  # (n,) int32, image placeholders expanded
    image: bytes = b""  # JPEG/PNG file bytes; empty for a text-only prompt
    temperature: float = 0.0
    seed: int = 0
    want_exits: bool = True  # stream early exits (FSD) or only the final one (SD)
    queue_policy: str = "priority"  # server early-exit queue: priority | fifo | random
    compute_tq_s: float = 0.0  # DEPRECATED: refused unless 0 (compute emulation is `serve --emulate-tq-s`)
    p_top_k: int = 0  # DSSD downlink: send only p_δ's K largest entries (LOSSY, PicoSpec); 0: all of p_δ
    down_delay_s: float = 0.0  # emulated downlink (wire.emulator.LinkShape), benches and tests only
    down_jitter_s: float = 0.0
    down_bandwidth_bps: float = 0.0
    down_loss: float = 0.0
    priority: int = 0  # 0..MAX_PRIORITY (cloud/limits.py): the server serves a session of higher priority
    # first (a robot in motion: 1; standing still or idle: 0), within a fairness bound (cloud/server.FairQueue)
    pipelined: bool = False  # the robot drafts each next block while a block is verified (PicoSpec): after
    # a fully accepted block it has the next one, so only early exits of other verdicts are of use to it
    grammar: str = ""  # the reply's constraint (docs/grammar.md): "" none; a grammar id the verifier knows
    # ("action": a navigation decision) or a grammar's EBNF text (at most models.grammar.MAX_GRAMMAR_BYTES).
    # Both sides mask p and q by the same automaton state: the output follows norm(p · mask). Optional: an
    # Open without it decodes unconstrained, as before
    TYPE = MsgType.OPEN


@dataclass(frozen=True)
class Opened:
    num_layers: int
    exit_layers: tuple[int, ...]
    prefill_s: float
    TYPE = MsgType.OPENED


@dataclass(frozen=True)
class DraftBlock:
    round: int  # 0, 1, 2, ... within the decision
    position: int  # absolute index of tokens[0]
    tokens: np.ndarray  # (γ,) int32
    q: np.ndarray | None = None  # (γ, V) float32: the exact distributions sampled from (SD, FSD)
    q_ids: np.ndarray | None = None  # (γ, K) int32: TK-SLT sparse q, ids ...
    q_values: np.ndarray | None = None  # (γ, K) float32/float16: ... and values (exactly q's support)
    q_draft: np.ndarray | None = None  # (γ,) float32: q_i(x_i) only (DSSD)
    resampled: int = -1  # DSSD: the token the robot resampled after the previous round's rejection
    chained: bool = False  # PicoSpec: sent before the previous round's verdict, assuming it is fully
    # accepted and that its target token is tokens[0]; verified only if that holds, else answered stale
    partial: bool = False  # PicoSpec's fast verification: the first tokens of this round's block, sent
    # as soon as drafted so the verifier can start; the whole block follows under the same round
    TYPE = MsgType.DRAFT


@dataclass(frozen=True)
class ExitResult:
    round: int
    layer: int
    accepted: int  # δ^(l)
    tokens: np.ndarray  # (δ+1,) int32
    confidence: float  # S^(l), FSD eq. 4
    is_final: bool
    compute_s: float = 0.0  # server time from receiving the draft to this exit
    resample: bool = False  # DSSD: tokens are δ accepted drafts; the robot resamples position δ from p
    p: np.ndarray | None = None  # DSSD: p_δ (V,) float32, or its top-K values (K,) when p_ids is set
    p_ids: np.ndarray | None = None  # (K,) int32 ids of a pruned p_δ (LOSSY)
    p_tv: float = 0.0  # TV(p_δ, pruned p_δ) = 1 − kept mass, when pruned
    stale: bool = False  # a chained draft whose assumption failed: nothing was verified
    TYPE = MsgType.EXIT


@dataclass(frozen=True)
class Generate:
    max_new_tokens: int
    stop_tokens: tuple[int, ...] = ()
    resampled: int = -1  # DSSD: the token the robot resampled after the last rejection, if any
    TYPE = MsgType.GENERATE


@dataclass(frozen=True)
class Tokens:
    tokens: np.ndarray  # (k,) int32
    is_final: bool
    compute_s: float = 0.0
    TYPE = MsgType.TOKENS


@dataclass(frozen=True)
class Close:
    TYPE = MsgType.CLOSE


@dataclass(frozen=True)
class Error:
    code: int
    message: str
    round: int = -1
    TYPE = MsgType.ERROR


@dataclass(frozen=True)
class Stats:
    TYPE = MsgType.STATS


@dataclass(frozen=True)
class StatsReply:
    counters: str  # JSON object of counter name → value
    TYPE = MsgType.STATS_REPLY


@dataclass(frozen=True)
class Ping:
    """The heartbeat (protocol revision 2; frame layout ``codec.VERSION`` unchanged). It travels on a
    session id of its own, never a decision's. A server of revision 1 answers it with
    ``Error(MALFORMED, "unknown message type 12")`` on that session id, which is as much a sign of life."""

    seq: int  # the robot's ping counter, echoed by the Pong
    TYPE = MsgType.PING


@dataclass(frozen=True)
class Pong:
    seq: int  # the Ping's
    revision: int = 0  # the server's PROTOCOL_REVISION
    TYPE = MsgType.PONG


PROTOCOL_REVISION = 2  # 1: decisions and Stats; 2: Ping/Pong. Older peers answer a newer type with an Error.

MESSAGE_TYPES: dict[MsgType, type] = {
    cls.TYPE: cls
    for cls in (Open, Opened, DraftBlock, ExitResult, Generate, Tokens, Close, Error, Stats, StatsReply, Ping, Pong)
}

Message = Open | Opened | DraftBlock | ExitResult | Generate | Tokens | Close | Error | Stats | StatsReply | Ping | Pong


@dataclass(frozen=True)
class Envelope:
    """A message with its routing fields: the session it belongs to (16 bytes)."""

    session: bytes
    message: Message = field(repr=False)
