"""The compact draft frame (wire/compact.py) through the codec: bit-exact round trips, the size at
the Qwen2 vocabulary, the blocks that must not use it, and every malformed body refused clearly."""

from __future__ import annotations

import numpy as np
import pytest

from edge_spec_ros.bench.payload import QWEN2_VOCAB
from edge_spec_ros.wire import compact
from edge_spec_ros.wire.codec import HEADER, MAGIC, VERSION, DecodeLimits, WireError, decode, encode
from edge_spec_ros.wire.messages import DraftBlock, Envelope, ErrorCode

SID = bytes(range(16))
UPLINK_BOUND = 64  # bytes per round of an exact mode at γ = 4 and V = 151,657


def roundtrip(msg: DraftBlock) -> tuple[list[bytes], DraftBlock]:
    frames = encode(Envelope(SID, msg))
    env = decode(frames)
    assert env.session == SID
    return frames, env.message


def same(a: DraftBlock, b: DraftBlock) -> bool:
    def eq(x, y):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            return x is not None and y is not None and x.dtype == y.dtype and x.tobytes() == y.tobytes()
        return x == y
    return all(eq(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)


def test_random_blocks_round_trip_bit_for_bit_in_one_frame():
    rng = np.random.default_rng(0)
    for _ in range(300):
        gamma = int(rng.integers(0, 9))
        tokens = rng.integers(0, QWEN2_VOCAB, gamma).astype(np.int32)
        q_draft = rng.random(gamma).astype(np.float32) if rng.random() < 0.7 else None
        if q_draft is not None and gamma:
            q_draft[0] = np.float32(1e-45)  # a subnormal keeps its bits too
        msg = DraftBlock(round=int(rng.integers(0, 2**31)), position=int(rng.integers(0, 2**31)), tokens=tokens,
                         q_draft=q_draft, resampled=int(rng.integers(-1, QWEN2_VOCAB)),
                         chained=bool(rng.random() < 0.5), partial=bool(rng.random() < 0.5))
        frames, back = roundtrip(msg)
        assert len(frames) == 1 and frames[0][3] == compact.COMPACT_DRAFT
        assert same(msg, back), (msg, back)


def test_an_exact_round_fits_the_uplink_bound_at_the_qwen2_vocabulary():
    tokens = np.arange(QWEN2_VOCAB - 4, QWEN2_VOCAB, dtype=np.int32)  # the largest ids: 3-byte varints
    msg = DraftBlock(round=5_000, position=30_000, tokens=tokens, q_draft=np.full(4, 0.3, np.float32),
                     resampled=QWEN2_VOCAB - 1)
    frames, back = roundtrip(msg)
    assert sum(map(len, frames)) <= UPLINK_BOUND
    assert same(msg, back)


@pytest.mark.parametrize("change", [
    dict(q=np.full((2, 8), 0.125, np.float32)),
    dict(q_ids=np.zeros((2, 1), np.int32), q_values=np.ones((2, 1), np.float32)),
    dict(tokens=np.array([-1, 3], np.int32)),
    dict(tokens=np.array([1, 3], np.int64)),
    dict(q_draft=np.ones(2, np.float16)),
    dict(q_draft=np.ones(3, np.float32)),
    dict(round=2**31),
    dict(position=-1),
    dict(resampled=-2),
])
def test_blocks_that_do_not_fit_travel_as_described_frames(change):
    msg = DraftBlock(**{"round": 1, "position": 9, "tokens": np.array([1, 3], np.int32), **change})
    assert not compact.fits(msg)
    head = encode(Envelope(SID, msg))[0]
    assert head[3] != compact.COMPACT_DRAFT


def body(msg: DraftBlock) -> bytes:
    return compact.encode_body(msg)


GOOD = DraftBlock(round=3, position=200, tokens=np.array([5, 300, 151_000], np.int32),
                  q_draft=np.array([0.5, 0.25, 0.125], np.float32))


@pytest.mark.parametrize("bad, words", [
    (b"", "round cut short"),
    (b"\x80\x80\x80\x80\x80\x01", "longer than"),
    (b"\x80\x00", "overlong"),
    (b"\xff\xff\xff\xff\x0f", "exceeds"),
    (body(GOOD) + b"\x00", "trailing"),
    (body(GOOD)[:-1], "bytes of q_draft"),
    (body(GOOD)[:4], "flags and length cut short"),
    (b"\x03\x48\x00\x08\x01\x05", "unknown flags"),
    (b"\x03\x48\x00\x00\x03\x05", "token 1 cut short"),
])
def test_malformed_bodies_are_refused_with_a_reason(bad, words):
    frames = [HEADER.pack(MAGIC, VERSION, compact.COMPACT_DRAFT, SID) + bad]
    with pytest.raises(WireError, match=words) as err:
        decode(frames)
    assert err.value.code == ErrorCode.MALFORMED


def test_more_tokens_than_the_receiver_accepts_is_too_large_before_any_token_is_read():
    frames = encode(Envelope(SID, GOOD))
    limits = DecodeLimits(field_bytes={"tokens": 2 * 4})
    with pytest.raises(WireError, match="3 tokens exceed the limit of 2") as err:
        decode(frames, limits)
    assert err.value.code == ErrorCode.TOO_LARGE


def test_a_compact_draft_with_extra_frames_is_refused():
    frames = encode(Envelope(SID, GOOD)) + [b"\x00" * 4]
    with pytest.raises(WireError, match="one frame"):
        decode(frames)


def test_the_described_form_stays_available_and_decodes_to_the_same_block():
    frames = encode(Envelope(SID, GOOD), compact_drafts=False)
    assert frames[0][3] != compact.COMPACT_DRAFT and len(frames) == 3
    assert same(decode(frames).message, GOOD)
