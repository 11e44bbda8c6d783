"""Unit tests for edge_spec_ros.wire.codec and edge_spec_ros.wire.messages: round trips, LZ4, validation, fuzz."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import lz4.block
import numpy as np
import pytest

from edge_spec_ros.wire import codec
from edge_spec_ros.wire.codec import HEADER, MAGIC, VERSION, WireError, decode, encode
from edge_spec_ros.wire.messages import (
    MESSAGE_TYPES,
    Close,
    DraftBlock,
    Envelope,
    Error,
    ErrorCode,
    ExitResult,
    Generate,
    MsgType,
    Open,
    Opened,
    Ping,
    Pong,
    Stats,
    StatsReply,
    Tokens,
)

SESSION = bytes(range(16))
RNG = np.random.default_rng(1234)

# One fully populated sample of every message type (non-default values wherever a field has a default).
SAMPLES = {
    Open: Open(input_ids=np.arange(37, dtype=np.int32), image=b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 5,
               temperature=0.7, seed=42, want_exits=False, queue_policy="fifo", compute_tq_s=0.015,
               down_delay_s=0.03, down_jitter_s=0.005, down_bandwidth_bps=2.5e6, down_loss=0.01),
    Opened: Opened(num_layers=28, exit_layers=(7, 14, 21, 28), prefill_s=0.123),
    DraftBlock: DraftBlock(round=3, position=120, tokens=np.array([5, 9, 151_000, 0], dtype=np.int32),
                           q=RNG.random((4, 300)).astype(np.float32)),
    ExitResult: ExitResult(round=2, layer=14, accepted=3, tokens=np.array([1, 2, 3, 4], dtype=np.int32),
                           confidence=0.875, is_final=True, compute_s=0.004),
    Generate: Generate(max_new_tokens=64, stop_tokens=(151_643, 151_645)),
    Tokens: Tokens(tokens=np.array([11, 12, 13], dtype=np.int32), is_final=True, compute_s=0.5),
    Close: Close(),
    Error: Error(code=int(ErrorCode.OUT_OF_ORDER), message="draft for round 4, expected 3 — ünïcode", round=4),
    Stats: Stats(),
    StatsReply: StatsReply(counters=json.dumps({"drafts": 10, "exits": 40})),
    Ping: Ping(seq=3),
    Pong: Pong(seq=3, revision=2),
}

# Samples built from required fields only (defaults everywhere else), including None / empty values.
MINIMAL = [
    Open(input_ids=np.zeros(0, dtype=np.int32)),
    Opened(num_layers=1, exit_layers=(), prefill_s=0.0),
    DraftBlock(round=0, position=0, tokens=np.array([7], dtype=np.int32)),
    ExitResult(round=0, layer=1, accepted=0, tokens=np.array([3], dtype=np.int32), confidence=1.0, is_final=False),
    Generate(max_new_tokens=1),
    Tokens(tokens=np.zeros(0, dtype=np.int32), is_final=False),
    Error(code=1, message=""),
]


def assert_messages_equal(a, b) -> None:
    """Field-by-field equality: arrays by dtype, shape and values; everything else by type and value."""
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray), f.name
            assert x.dtype == y.dtype and x.shape == y.shape, f.name
            assert np.array_equal(x, y), f.name
        else:
            assert type(x) is type(y), f.name
            assert x == y, f.name


def meta_of(frames: list[bytes]) -> dict:
    """The JSON metadata of an encoded frame list."""
    return json.loads(frames[0][HEADER.size:])


def header(mtype: int = MsgType.CLOSE, version: int = VERSION, magic: bytes = MAGIC, session: bytes = SESSION) -> bytes:
    return HEADER.pack(magic, version, int(mtype), session)


def raw_frames(mtype: int, meta, *buffers: bytes) -> list[bytes]:
    """Hand-built frames: a valid header, ``meta`` as JSON (or raw bytes), then the buffers."""
    body = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    return [header(mtype) + body, *buffers]


def rewrite(frames: list[bytes], edit) -> list[bytes]:
    """Re-encode the metadata of ``frames`` after ``edit(meta)`` mutated it in place."""
    meta = meta_of(frames)
    edit(meta)
    return [frames[0][:HEADER.size] + json.dumps(meta).encode(), *frames[1:]]


def expect_wire_error(frames, match: str | None, code: ErrorCode = ErrorCode.MALFORMED) -> WireError:
    with pytest.raises(WireError, match=match) as info:
        decode(frames)
    assert info.value.code == code
    return info.value


# --------------------------------------------------------------------------- round trips


def test_samples_cover_every_message_type():
    """The sample table has exactly one message per entry of MESSAGE_TYPES, keyed consistently."""
    assert set(SAMPLES) == set(MESSAGE_TYPES.values())
    assert {cls.TYPE for cls in SAMPLES} == set(MsgType)
    for mtype, cls in MESSAGE_TYPES.items():
        assert cls.TYPE == mtype


@pytest.mark.parametrize("msg", list(SAMPLES.values()), ids=lambda m: type(m).__name__)
def test_round_trip_every_message_type(msg):
    """decode(encode(x)) returns the same session and an equal message for every message type."""
    session = bytes(random.Random(type(msg).__name__).randrange(256) for _ in range(16))
    out = decode(encode(Envelope(session, msg)))
    assert isinstance(out, Envelope)
    assert out.session == session
    assert_messages_equal(out.message, msg)


@pytest.mark.parametrize("msg", MINIMAL, ids=lambda m: type(m).__name__)
def test_round_trip_defaults_and_empty_values(msg):
    """Messages with only required fields (None q, empty image/tuple/arrays) survive a round trip."""
    assert_messages_equal(decode(encode(Envelope(SESSION, msg))).message, msg)


def test_header_layout_and_type_byte():
    """Frame 0 starts with magic, version, the message type and the session id."""
    for cls, msg in SAMPLES.items():
        frames = encode(Envelope(SESSION, msg))
        assert HEADER.unpack_from(frames[0]) == (MAGIC, VERSION, int(cls.TYPE), SESSION)


def test_arrays_travel_as_buffer_frames_and_scalars_in_metadata():
    """Arrays and bytes get one buffer frame each; scalars and tuples go in the JSON metadata, and
    fields at their default (a None array too) are left out."""
    frames = encode(Envelope(SESSION, SAMPLES[Open]))
    meta = meta_of(frames)
    assert [d[0] for d in meta["arrays"]] == ["input_ids", "image"]
    assert len(frames) == 3
    assert meta["temperature"] == 0.7 and meta["want_exits"] is False and "input_ids" not in meta
    exit_ = encode(Envelope(SESSION, ExitResult(round=0, layer=1, accepted=0, tokens=np.array([1], dtype=np.int32),
                                                confidence=1.0, is_final=True)))
    assert "p" not in meta_of(exit_) and "resample" not in meta_of(exit_) and len(exit_) == 2
    assert decode(exit_).message.p is None and decode(exit_).message.resample is False
    assert meta_of(encode(Envelope(SESSION, SAMPLES[Opened])))["exit_layers"] == [7, 14, 21, 28]


def test_optional_array_none_and_present():
    """DraftBlock.q decodes to None when greedy and to the exact float32 (γ, V) block when sampled."""
    greedy = DraftBlock(round=1, position=5, tokens=np.array([1, 2], dtype=np.int32), q=None)
    assert decode(encode(Envelope(SESSION, greedy))).message.q is None
    sampled = decode(encode(Envelope(SESSION, SAMPLES[DraftBlock]))).message.q
    assert sampled.dtype == np.float32 and sampled.shape == (4, 300)
    assert np.array_equal(sampled, SAMPLES[DraftBlock].q)


def test_bytes_field_round_trips_as_bytes():
    """Open.image comes back as ``bytes`` (not an array), byte for byte, including the empty image."""
    out = decode(encode(Envelope(SESSION, SAMPLES[Open]))).message
    assert type(out.image) is bytes and out.image == SAMPLES[Open].image
    assert decode(encode(Envelope(SESSION, Open(input_ids=np.zeros(1, np.int32))))).message.image == b""


def test_tuple_fields_decode_as_tuples():
    """tuple[int, ...] fields come back as tuples, not lists."""
    out = decode(encode(Envelope(SESSION, SAMPLES[Generate]))).message
    assert out.stop_tokens == (151_643, 151_645) and isinstance(out.stop_tokens, tuple)


def test_float_field_given_int_decodes_as_float():
    """An int literal in a float field (e.g. ``"prefill_s": 1``) is accepted and coerced to float."""
    frames = rewrite(encode(Envelope(SESSION, SAMPLES[Opened])), lambda m: m.update(prefill_s=1))
    out = decode(frames).message
    assert out.prefill_s == 1.0 and type(out.prefill_s) is float


def test_non_finite_floats_round_trip():
    """inf and nan confidences survive the JSON metadata."""
    for value in (math.inf, -math.inf, math.nan):
        msg = dataclasses.replace(SAMPLES[ExitResult], confidence=value)
        got = decode(encode(Envelope(SESSION, msg))).message.confidence
        assert (math.isnan(got) and math.isnan(value)) or got == value


@pytest.mark.parametrize("dtype", sorted(codec.ALLOWED_DTYPES))
@pytest.mark.parametrize("shape", [(0,), (5,), (3, 4), (2, 1, 3, 2), ()])
def test_round_trip_all_allowed_dtypes_and_shapes(dtype, shape):
    """Every allowed dtype, 0- to 4-D shapes and empty arrays keep dtype, shape and values."""
    arr = (np.arange(int(np.prod(shape, dtype=np.int64))) % 97).astype(dtype).reshape(shape)
    block = DraftBlock(round=0, position=0, tokens=np.zeros(1, np.int32), q=arr)  # q: no fixed dtype
    out = decode(encode(Envelope(SESSION, block))).message.q
    assert out.dtype == np.dtype(dtype) and out.shape == shape and np.array_equal(out, arr)


def test_non_contiguous_array_round_trips():
    """A strided view (every other column of a transposed block) is sent as its logical content."""
    base = np.arange(200, dtype=np.float32).reshape(10, 20)
    view = base.T[::2]
    assert not view.flags["C_CONTIGUOUS"]
    block = DraftBlock(round=0, position=0, tokens=np.zeros(1, np.int32), q=view)
    out = decode(encode(Envelope(SESSION, block))).message.q
    assert np.array_equal(out, view) and out.shape == view.shape


# --------------------------------------------------------------------------- LZ4


def test_lz4_used_for_compressible_array_of_at_least_1_kib():
    """A 4 KiB all-zero block is LZ4-compressed, its frame much smaller than the raw bytes, and decodes back."""
    tokens = np.zeros(1024, dtype=np.int32)
    frames = encode(Envelope(SESSION, Tokens(tokens=tokens, is_final=True)))
    (desc,) = meta_of(frames)["arrays"]
    assert desc == ["tokens", "int32", [1024], "lz4", 4096]
    assert len(frames[1]) < 0.9 * 4096
    assert np.array_equal(decode(frames).message.tokens, tokens)


def test_lz4_threshold_is_exactly_lz4_min_bytes():
    """Compressible data of LZ4_MIN_BYTES bytes is compressed; one element less is sent raw."""
    n = codec.LZ4_MIN_BYTES // 4
    at = meta_of(encode(Envelope(SESSION, Tokens(tokens=np.zeros(n, np.int32), is_final=True))))
    below = meta_of(encode(Envelope(SESSION, Tokens(tokens=np.zeros(n - 1, np.int32), is_final=True))))
    assert at["arrays"][0][3] == "lz4"
    assert below["arrays"][0][3] == "raw"


def test_lz4_not_used_for_random_float_data():
    """Incompressible random float32 data stays raw, its buffer frame exactly the array bytes."""
    q = np.random.default_rng(0).random((4, 1024)).astype(np.float32)
    frames = encode(Envelope(SESSION, DraftBlock(round=0, position=0, tokens=np.zeros(4, np.int32), q=q)))
    descs = {d[0]: d for d in meta_of(frames)["arrays"]}
    assert descs["q"][3] == "raw"
    assert frames[2] == q.tobytes()
    assert np.array_equal(decode(frames).message.q, q)


def test_lz4_compressed_bytes_field_round_trips():
    """A large compressible image is LZ4-compressed and still decodes to the same bytes."""
    image = b"\xff\xd8" + b"A" * 5000
    frames = encode(Envelope(SESSION, Open(input_ids=np.zeros(3, np.int32), image=image)))
    descs = {d[0]: d for d in meta_of(frames)["arrays"]}
    assert descs["image"][3] == "lz4" and descs["image"][4] == len(image)
    assert decode(frames).message.image == image


# --------------------------------------------------------------------------- encode errors


@pytest.mark.parametrize("msg", [
    Error(code=1, message=["not", "a", "str"]),
    Error(code=np.int64(1), message="numpy scalar"),
    StatsReply(counters={"a": 1}),
    Generate(max_new_tokens=1, stop_tokens=[1, 2]),
], ids=["list", "numpy-scalar", "dict", "list-for-tuple"])
def test_encode_unsupported_value_type_raises_type_error(msg):
    """encode refuses field values it has no wire form for, naming the field."""
    with pytest.raises(TypeError, match="cannot encode"):
        encode(Envelope(SESSION, msg))


@pytest.mark.parametrize("session", [b"", bytes(15), bytes(17), bytes(32)])
def test_encode_session_must_be_16_bytes(session):
    """encode raises ValueError for a session id of any length other than 16."""
    with pytest.raises(ValueError, match="16 bytes"):
        encode(Envelope(session, Close()))


# --------------------------------------------------------------------------- decode errors: header


def test_decode_empty_frame_list():
    """No frames at all is MALFORMED."""
    expect_wire_error([], "missing or short header")


@pytest.mark.parametrize("n", [0, 1, 2, HEADER.size - 1])
def test_decode_short_header(n):
    """A header frame shorter than magic+version+type+session is MALFORMED."""
    expect_wire_error([encode(Envelope(SESSION, Close()))[0][:n]], "missing or short header")


def test_decode_wrong_magic():
    """A frame that does not start with b'ES' is rejected as not ours."""
    frames = encode(Envelope(SESSION, Close()))
    expect_wire_error([b"XX" + frames[0][2:]], "bad magic")


@pytest.mark.parametrize("version", [0, VERSION + 1, 255])
def test_decode_unknown_version(version):
    """Any other protocol version raises UNSUPPORTED_VERSION, naming both versions."""
    frames = [header(version=version) + b'{"arrays":[]}']
    err = expect_wire_error(frames, f"unsupported protocol version {version}", ErrorCode.UNSUPPORTED_VERSION)
    assert str(VERSION) in str(err)


@pytest.mark.parametrize("mtype", [0, max(MsgType) + 2, 31, 38, 255])
def test_decode_unknown_message_type(mtype):
    """A type byte outside MsgType, the compact draft (11) and DRAGON's (32-37) is MALFORMED."""
    expect_wire_error([header(mtype) + b'{"arrays":[]}'], f"unknown message type {mtype}")


# --------------------------------------------------------------------------- decode errors: metadata


@pytest.mark.parametrize("body", [b"", b"not json", b'{"arrays":[]', b"\xff\xfe\xfd", b'{"arrays":[]}\x80'],
                         ids=["empty", "text", "truncated", "not-utf8", "trailing-not-utf8"])
def test_decode_metadata_not_json(body):
    """Metadata that is not UTF-8 JSON is MALFORMED."""
    expect_wire_error(raw_frames(MsgType.CLOSE, body), "metadata is not valid JSON")


@pytest.mark.parametrize("meta", [[], 3, "x", None, {}, {"arrays": None}, {"arrays": {}}, {"arrays": "[]"}])
def test_decode_metadata_not_object_with_arrays_list(meta):
    """Metadata must be a JSON object with an 'arrays' list."""
    expect_wire_error(raw_frames(MsgType.CLOSE, meta), "must be an object with an 'arrays' list")


def test_decode_metadata_too_large():
    """Metadata over MAX_META_BYTES is rejected; exactly MAX_META_BYTES is still parsed."""
    def sized(n: int) -> bytes:
        prefix, suffix = b'{"message":"', b'","code":1,"arrays":[]}'
        return prefix + b"x" * (n - len(prefix) - len(suffix)) + suffix
    expect_wire_error(raw_frames(MsgType.ERROR, sized(codec.MAX_META_BYTES + 1)), "exceeds")
    assert len(decode(raw_frames(MsgType.ERROR, sized(codec.MAX_META_BYTES))).message.message) > 60_000


# --------------------------------------------------------------------------- decode errors: arrays


def tokens_frames(n: int = 3) -> list[bytes]:
    return encode(Envelope(SESSION, Tokens(tokens=np.arange(n, dtype=np.int32), is_final=True)))


def set_desc(index: int, value):
    """An edit for ``rewrite`` that sets item ``index`` of the first array descriptor."""
    def edit(meta):
        meta["arrays"][0][index] = value
    return edit


def test_decode_more_descriptors_than_buffers():
    """A described array without its buffer frame is MALFORMED."""
    expect_wire_error(tokens_frames()[:1], "1 arrays described but 0 buffer frames")


def test_decode_more_buffers_than_descriptors():
    """An extra buffer frame nobody described is MALFORMED."""
    expect_wire_error([*tokens_frames(), b"extra"], "1 arrays described but 2 buffer frames")


@pytest.mark.parametrize("desc", [None, "tokens", {"name": "tokens"}, ["tokens", "int32", [3], "raw"],
                                  ["tokens", "int32", [3], "raw", 12, "extra"]],
                         ids=["null", "string", "object", "four-items", "six-items"])
def test_decode_bad_descriptor_structure(desc):
    """A descriptor must be a 5-item list."""
    frames = rewrite(tokens_frames(), lambda m: m.update(arrays=[desc]))
    expect_wire_error(frames, "bad array descriptor")


@pytest.mark.parametrize("dtype", ["object", "float64", "bool", "<i4", "complex64", "", None, 5])
def test_decode_disallowed_dtype(dtype):
    """Only the allowlisted dtypes decode; 'object' and friends are refused."""
    expect_wire_error(rewrite(tokens_frames(), set_desc(1, dtype)), "not allowed")


def test_decode_descriptor_name_not_string():
    """A non-string array name is MALFORMED."""
    expect_wire_error(rewrite(tokens_frames(), set_desc(0, 7)), "not allowed")


@pytest.mark.parametrize("shape", [3, "3", None, [-1], [3, -1], [3.0], ["3"], [None], [1, 1, 1, 1, 3]],
                         ids=["int", "str", "null", "negative", "negative-2d", "float", "str-dim", "null-dim",
                              "five-dims"])
def test_decode_bad_shape(shape):
    """Shapes must be lists of at most 4 non-negative ints."""
    expect_wire_error(rewrite(tokens_frames(), set_desc(2, shape)), "bad shape")


@pytest.mark.parametrize("shape", [[codec.MAX_ARRAY_BYTES // 4 + 1], [2**20, 2**20], [2**30, 2**30, 4]])
def test_decode_huge_shape_rejected_without_allocation(shape):
    """A shape whose byte size exceeds MAX_ARRAY_BYTES is refused even if nbytes matches it."""
    nbytes = int(np.prod(shape)) * 4
    frames = rewrite(tokens_frames(), lambda m: m.update(arrays=[["tokens", "int32", shape, "raw", nbytes]]))
    expect_wire_error(frames, "exceeds", ErrorCode.TOO_LARGE)


@pytest.mark.parametrize("nbytes", [11, 13, 0, -12, "12", 12.0, None, [12]])
def test_decode_nbytes_mismatch(nbytes):
    """nbytes must be the int the shape and dtype imply."""
    expect_wire_error(rewrite(tokens_frames(), set_desc(4, nbytes)), "does not match shape")


@pytest.mark.parametrize("data", [b"", bytes(11), bytes(13), bytes(24)])
def test_decode_raw_buffer_length_mismatch(data):
    """A raw buffer whose length differs from nbytes is MALFORMED."""
    expect_wire_error([tokens_frames()[0], data], "bytes, expected 12")


def lz4_frames() -> list[bytes]:
    frames = encode(Envelope(SESSION, Tokens(tokens=np.zeros(1024, dtype=np.int32), is_final=True)))
    assert meta_of(frames)["arrays"][0][3] == "lz4"
    return frames


@pytest.mark.parametrize("corrupt", [lambda b: b"\xff" * 10, lambda b: b[: len(b) // 2], lambda b: b""],
                         ids=["garbage", "truncated", "empty"])
def test_decode_corrupt_lz4(corrupt):
    """An LZ4 buffer that does not decompress to nbytes is MALFORMED."""
    frames = lz4_frames()
    expect_wire_error([frames[0], corrupt(frames[1])], r"LZ4 data corrupt|bytes, expected 4096")


def test_decode_lz4_that_decompresses_short():
    """Valid LZ4 data of fewer bytes than nbytes is caught by the length check."""
    frames = lz4_frames()
    short = lz4.block.compress(bytes(1000), store_size=False)
    expect_wire_error([frames[0], short], "1000 bytes, expected 4096")


def test_decode_raw_buffer_labelled_lz4_is_rejected():
    """Raw bytes falsely labelled lz4 are rejected (not silently misread)."""
    raw = np.random.default_rng(5).integers(0, 2**31 - 1, 1024, dtype=np.int32)
    frames = [rewrite(tokens_frames(1024), set_desc(3, "lz4"))[0], raw.tobytes()]
    expect_wire_error(frames, r"LZ4 data corrupt|bytes, expected")


@pytest.mark.parametrize("codec_name", ["zstd", "LZ4", "", None, 1])
def test_decode_unknown_codec(codec_name):
    """Only 'raw' and 'lz4' codecs are understood."""
    expect_wire_error(rewrite(tokens_frames(), set_desc(3, codec_name)), "unknown codec")


# --------------------------------------------------------------------------- decode errors: fields


@pytest.mark.parametrize("cls,field,value", [
    (Opened, "num_layers", "28"),  # string where int expected
    (Opened, "num_layers", True),  # bool where int expected
    (Opened, "num_layers", 28.0),  # float where int expected
    (Opened, "prefill_s", "0.1"),  # string where float expected
    (Opened, "prefill_s", False),  # bool where float expected
    (Opened, "exit_layers", [7, "14"]),  # non-int tuple element
    (Opened, "exit_layers", [7, True]),  # bool tuple element
    (Opened, "exit_layers", 7),  # scalar where tuple expected
    (ExitResult, "is_final", 1),  # int where bool expected
    (ExitResult, "round", None),  # None where int expected
    (Error, "message", 5),  # int where str expected
    (Open, "image", "abc"),  # str where bytes expected
    (DraftBlock, "q", 0.5),  # float where optional array expected
    (Tokens, "tokens", [1, 2, 3]),  # JSON list where array expected
], ids=lambda v: v if isinstance(v, str) else None)
def test_decode_wrong_field_type(cls, field, value):
    """A field value of the wrong JSON type is MALFORMED, naming class and field."""
    def edit(meta):
        meta["arrays"] = [d for d in meta["arrays"] if d[0] != field]
        meta[field] = value
    frames = encode(Envelope(SESSION, SAMPLES[cls]))
    keep = [i + 1 for i, d in enumerate(meta_of(frames)["arrays"]) if d[0] != field]
    frames = [rewrite(frames, edit)[0], *(frames[i] for i in keep)]
    expect_wire_error(frames, f"{cls.__name__}.{field}: .* does not fit")


@pytest.mark.parametrize("desc,data", [
    (["image", "int32", [2], "raw", 8], bytes(8)),  # the protocol fixes image to uint8
    (["image", "uint8", [2, 2], "raw", 4], bytes(4)),  # bytes field from a 2-D array
    (["temperature", "float32", [1], "raw", 4], bytes(4)),  # scalar field sent as an array
])
def test_decode_array_for_wrong_kind_of_field(desc, data):
    """Buffer frames only fit array fields, and bytes fields only from 1-D uint8 buffers."""
    frames = encode(Envelope(SESSION, Open(input_ids=np.zeros(2, np.int32))))
    meta = meta_of(frames)
    meta.pop(desc[0], None)
    meta["arrays"] = [meta["arrays"][0], desc]
    expect_wire_error([frames[0][:HEADER.size] + json.dumps(meta).encode(), frames[1], data],
                      f"(Open.{desc[0]}: ndarray does not fit|array 'image' must be uint8)")


def test_decode_unknown_scalar_field():
    """A metadata key that is not a field of the message type is MALFORMED."""
    frames = rewrite(encode(Envelope(SESSION, SAMPLES[Opened])), lambda m: m.update(bogus=1))
    expect_wire_error(frames, r"Opened: unknown fields \['bogus'\]")


def test_decode_unknown_array_field():
    """A buffer frame with a name that is not a field is MALFORMED."""
    frames = tokens_frames()
    frames = [rewrite(frames, lambda m: m["arrays"].append(["extra", "uint8", [1], "raw", 1]))[0], frames[1], b"x"]
    expect_wire_error(frames, r"Tokens: unknown fields \['extra'\]")


def test_decode_fields_on_fieldless_message():
    """Close has no fields; sending one is MALFORMED."""
    expect_wire_error(raw_frames(MsgType.CLOSE, {"arrays": [], "round": 1}), r"Close: unknown fields")


@pytest.mark.parametrize("cls,field", [(Opened, "num_layers"), (Opened, "exit_layers"), (Error, "message"),
                                       (Tokens, "tokens"), (Open, "input_ids"), (StatsReply, "counters")])
def test_decode_missing_required_field(cls, field):
    """A required field (scalar or array) that is absent is MALFORMED, naming it."""
    frames = encode(Envelope(SESSION, SAMPLES[cls]))
    descs = meta_of(frames)["arrays"]
    keep = [i + 1 for i, d in enumerate(descs) if d[0] != field]

    def edit(meta):
        meta.pop(field, None)
        meta["arrays"] = [d for d in meta["arrays"] if d[0] != field]
    expect_wire_error([rewrite(frames, edit)[0], *(frames[i] for i in keep)],
                      f"{cls.__name__}: missing field '{field}'")


def test_decode_missing_optional_fields_take_defaults():
    """Fields with defaults may be omitted from the metadata."""
    out = decode(raw_frames(MsgType.ERROR, {"arrays": [], "code": 3, "message": "m"})).message
    assert out == Error(code=3, message="m", round=-1)


def test_wire_error_is_value_error_with_default_code():
    """WireError subclasses ValueError and defaults to MALFORMED."""
    err = WireError("x")
    assert isinstance(err, ValueError) and err.code == ErrorCode.MALFORMED and str(err) == "x"


# --------------------------------------------------------------------------- fuzz


def _valid_encodings() -> list[list[bytes]]:
    msgs = [*SAMPLES.values(), *MINIMAL,
            Tokens(tokens=np.zeros(2048, dtype=np.int32), is_final=True)]  # one LZ4 buffer
    return [encode(Envelope(SESSION, m)) for m in msgs]


def _mutate(frames: list[bytes], rng: random.Random) -> list[bytes]:
    frames = list(frames)
    kind = rng.randrange(7)
    i = rng.randrange(len(frames))
    f = bytearray(frames[i])
    if kind == 0 and f:  # flip a few random bytes
        for _ in range(rng.randint(1, 4)):
            f[rng.randrange(len(f))] = rng.randrange(256)
    elif kind == 1:  # truncate
        del f[rng.randrange(len(f) + 1):]
    elif kind == 2:  # insert random bytes
        pos = rng.randrange(len(f) + 1)
        f[pos:pos] = rng.randbytes(rng.randint(1, 8))
    elif kind == 3 and len(frames) > 1:  # drop a frame
        del frames[rng.randrange(len(frames))]
        return frames
    elif kind == 4:  # duplicate a frame
        frames.insert(rng.randrange(len(frames) + 1), frames[i])
        return frames
    elif kind == 5 and len(f) > HEADER.size:  # flip a byte inside the JSON metadata only
        pos = rng.randrange(HEADER.size, len(f))
        f[pos] = rng.choice(b'{}[]",:0123456789-.eE tfn\\x\x00\xff')
    else:  # swap two frames
        j = rng.randrange(len(frames))
        frames[i], frames[j] = frames[j], frames[i]
        return frames
    frames[i] = bytes(f)
    return frames


def _decode_or_wire_error(frames) -> tuple[str | None, bool]:
    """(problem, raised): problem is None when decode returns an Envelope or raises a WireError."""
    try:
        out = decode(frames)
    except WireError as exc:
        ok = exc.code in (ErrorCode.MALFORMED, ErrorCode.UNSUPPORTED_VERSION)
        return (None if ok else f"bad code {exc.code}"), True
    except Exception as exc:  # noqa: BLE001 - the point of the test
        return f"{type(exc).__name__}: {exc} for {[bytes(f[:80]) for f in frames]!r}", True
    return (None if isinstance(out, Envelope) else f"returned {out!r}"), False


def test_fuzz_random_bytes_only_raise_wire_error():
    """2,000 random frame lists (half behind a valid header) either decode or raise WireError."""
    rng = random.Random(20240601)
    failures = []
    for n in range(2000):
        frames = [rng.randbytes(rng.randint(0, 48)) for _ in range(rng.randint(0, 3))]
        if n % 2 and frames:
            frames[0] = header(rng.randrange(256), VERSION if n % 4 == 1 else rng.randrange(3)) + frames[0]
        problem, _ = _decode_or_wire_error(frames)
        if problem:
            failures.append(problem)
    assert not failures, failures[:5]


def test_fuzz_mutated_valid_encodings_only_raise_wire_error():
    """3,000 random mutations/truncations of valid encodings either decode or raise WireError."""
    rng = random.Random(7)
    valid = _valid_encodings()
    failures, errors = [], 0
    for _ in range(3000):
        frames = rng.choice(valid)
        for _ in range(rng.randint(1, 3)):
            frames = _mutate(frames, rng)
        problem, raised = _decode_or_wire_error(frames)
        if problem:
            failures.append(problem)
        errors += raised
    assert not failures, failures[:5]
    assert errors > 1000  # the mutations really do break most frame sets


# --------------------------------------------------------------------------- hostile descriptors and metadata


def _huge_shape_frames(shape, nbytes, codec_name="raw", data=b""):
    return raw_frames(MsgType.TOKENS, {"is_final": True, "arrays": [["tokens", "int32", shape, codec_name, nbytes]]},
                      data)


@pytest.mark.parametrize("dtype", [[], {}], ids=["list", "object"])
def test_rejects_unhashable_dtype_raises_type_error(dtype):
    """An unhashable dtype in a descriptor must raise WireError."""
    expect_wire_error(rewrite(tokens_frames(), set_desc(1, dtype)), "not allowed")


@pytest.mark.parametrize("shape,nbytes", [([2**32, 2**32], 0), ([2**62 + 1, 4], 16), ([2**70], 0)],
                         ids=["wraps-to-zero", "wraps-to-small", "beyond-int64"])
def test_rejects_shape_product_overflow(shape, nbytes):
    """Shapes whose element count overflows int64 must raise WireError."""
    expect_wire_error(_huge_shape_frames(shape, nbytes, data=bytes(nbytes)), None)


def test_rejects_bool_in_shape():
    """A JSON true in a shape must raise WireError."""
    expect_wire_error(_huge_shape_frames([True], 4, data=bytes(4)), "bad shape")


def test_rejects_float_field_with_huge_int():
    """A float field holding 10**400 must raise WireError."""
    frames = rewrite(encode(Envelope(SESSION, SAMPLES[Opened])), lambda m: m.update(prefill_s=10**400))
    expect_wire_error(frames, "Opened.prefill_s")


def test_rejects_deeply_nested_metadata():
    """50,000 nested '[' (under MAX_META_BYTES) must raise WireError."""
    expect_wire_error(raw_frames(MsgType.CLOSE, b"[" * 50_000), None)


def test_rejects_integer_with_too_many_digits():
    """An int literal of 5,000 digits must raise WireError."""
    expect_wire_error(raw_frames(MsgType.ERROR, b'{"arrays":[],"message":"m","code":' + b"9" * 5000 + b"}"), None)


def test_encode_refuses_arrays_the_other_side_cannot_decode():
    """float64, bool and 5-D arrays are refused at encode time, not by the receiver."""
    for arr in (np.zeros(2, np.float64), np.zeros(2, bool), np.zeros((1,) * 5, np.float32)):
        with pytest.raises(TypeError, match="cannot encode"):
            encode(Envelope(SESSION, DraftBlock(round=0, position=0, tokens=np.zeros(1, np.int32), q=arr)))


def test_decode_refuses_a_protocol_array_of_the_wrong_dtype():
    """Token ids are int32 on the wire; a float16 tokens array is MALFORMED."""
    frames = encode(Envelope(SESSION, Tokens(tokens=np.zeros(3, np.int32), is_final=True)))
    meta = meta_of(frames)
    meta["arrays"][0][1] = "float16"
    meta["arrays"][0][4] = 6
    expect_wire_error([frames[0][:HEADER.size] + json.dumps(meta).encode(), bytes(6)], "must be int32")
