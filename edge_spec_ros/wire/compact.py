"""The compact draft frame: a ``DraftBlock`` without a dense or sparse q in one binary frame.

The exact modes that send a draft's tokens and at most q_i(x_i) per token (DSSD, PicoSpec, the
lossy top-K DSSD, and any greedy block) spend most of a JSON-described frame set on names and
descriptors: 100+ bytes of metadata around 16 bytes of tokens. This frame carries the same fields
bit for bit in about 55 bytes at γ = 4 and the Qwen2 vocabulary (151,657):

    header (``codec.HEADER``: magic, version, type = ``COMPACT_DRAFT``, session)      20 B
    varint round | varint position | varint (resampled + 1)                          3-15 B
    u8 flags (``FLAG_*``) | u8 γ | γ × varint token                                  2 + γ·(1-3) B
    γ × float32 little-endian q_i(x_i)            (only with ``FLAG_Q_DRAFT``)        4γ B

Varints are LEB128 (7 bits per byte, low first), at most ``MAX_VARINT_BYTES`` bytes and below
``VARINT_LIMIT``; a decoder refuses overlong, oversized or trailing bytes. Floats keep their bits, so
the acceptance rule min(1, p(x)/q(x)) sees the very numbers the robot sampled with (exactness is
unchanged). ``codec.encode`` picks this frame whenever a ``DraftBlock`` fits it, and ``codec.decode``
turns it back into the same ``DraftBlock``; a block that does not fit (dense q, sparse q, values past
the limits) travels as before.
"""

from __future__ import annotations

import numpy as np

from edge_spec_ros.wire.messages import DraftBlock

COMPACT_DRAFT = 11  # the header's type byte; beside MsgType 1-10 and DRAGON's 32-37
FLAG_Q_DRAFT = 1  # q_draft follows the tokens
FLAG_CHAINED = 2  # DraftBlock.chained (PicoSpec)
FLAG_PARTIAL = 4  # DraftBlock.partial (PicoSpec)
KNOWN_FLAGS = FLAG_Q_DRAFT | FLAG_CHAINED | FLAG_PARTIAL
MAX_TOKENS = 255  # γ travels as one byte
MAX_VARINT_BYTES = 5
VARINT_LIMIT = 2**31  # every integer field is a non-negative int32 on the wire
FLOAT32_LE = np.dtype("<f4")


class CompactError(ValueError):
    """Bytes that are not a compact draft body."""


class CompactTooLarge(CompactError):
    """A well-formed body with more tokens than the receiver accepts."""


def fits(msg: DraftBlock) -> bool:
    """Whether ``msg`` can travel as a compact frame without losing anything."""
    if msg.q is not None or msg.q_ids is not None or msg.q_values is not None:
        return False
    tokens = msg.tokens
    if not (isinstance(tokens, np.ndarray) and tokens.ndim == 1 and tokens.dtype == np.int32
            and len(tokens) <= MAX_TOKENS and (len(tokens) == 0 or int(tokens.min()) >= 0)):
        return False
    if msg.q_draft is not None and not (isinstance(msg.q_draft, np.ndarray) and msg.q_draft.dtype == np.float32
                                        and msg.q_draft.shape == tokens.shape):
        return False
    scalars = (msg.round, msg.position, msg.resampled + 1)
    return all(type(v) is int and 0 <= v < VARINT_LIMIT for v in scalars)


def encode_body(msg: DraftBlock) -> bytes:
    """The frame's bytes after the header; ``fits(msg)`` must hold."""
    flags = (FLAG_Q_DRAFT * (msg.q_draft is not None) | FLAG_CHAINED * bool(msg.chained)
             | FLAG_PARTIAL * bool(msg.partial))
    out = bytearray()
    for v in (msg.round, msg.position, msg.resampled + 1):
        _put_varint(out, v)
    out += bytes((flags, len(msg.tokens)))
    for t in msg.tokens.tolist():
        _put_varint(out, t)
    if msg.q_draft is not None:
        out += msg.q_draft.astype(FLOAT32_LE, copy=False).tobytes()
    return bytes(out)


def decode_body(body: bytes, max_tokens: int = MAX_TOKENS) -> DraftBlock:
    """Bytes after the header → ``DraftBlock``, or ``CompactError`` naming the problem."""
    pos = 0

    def varint(what: str) -> int:
        nonlocal pos
        value = 0
        for i in range(MAX_VARINT_BYTES):
            if pos >= len(body):
                raise CompactError(f"compact draft: {what} cut short")
            byte = body[pos]
            pos += 1
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                if byte == 0 and i > 0:
                    raise CompactError(f"compact draft: {what} is an overlong varint")
                if value >= VARINT_LIMIT:
                    raise CompactError(f"compact draft: {what} {value} exceeds {VARINT_LIMIT - 1}")
                return value
        raise CompactError(f"compact draft: {what} is longer than {MAX_VARINT_BYTES} bytes")

    round_, position, resampled = varint("round"), varint("position"), varint("resampled") - 1
    if pos + 2 > len(body):
        raise CompactError("compact draft: flags and length cut short")
    flags, gamma = body[pos], body[pos + 1]
    pos += 2
    if flags & ~KNOWN_FLAGS:
        raise CompactError(f"compact draft: unknown flags {flags:#04x}")
    if gamma > max_tokens:
        raise CompactTooLarge(f"compact draft: {gamma} tokens exceed the limit of {max_tokens}")
    tokens = np.array([varint(f"token {i}") for i in range(gamma)], dtype=np.int32)  # (γ,)
    q_draft = None
    if flags & FLAG_Q_DRAFT:
        end = pos + FLOAT32_LE.itemsize * gamma
        if end > len(body):
            raise CompactError(f"compact draft: {len(body) - pos} bytes of q_draft, expected {end - pos}")
        q_draft = np.frombuffer(body[pos:end], dtype=FLOAT32_LE).astype(np.float32)  # (γ,)
        pos = end
    if pos != len(body):
        raise CompactError(f"compact draft: {len(body) - pos} trailing bytes")
    return DraftBlock(round=round_, position=position, tokens=tokens, q_draft=q_draft, resampled=resampled,
                      chained=bool(flags & FLAG_CHAINED), partial=bool(flags & FLAG_PARTIAL))


def _put_varint(out: bytearray, value: int) -> None:
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return
