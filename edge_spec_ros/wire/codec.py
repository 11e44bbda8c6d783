"""Pure encode/decode of messages to and from ZeroMQ frames (``list[bytes]``). No sockets, no pickle.

Frame 0, the header: ``MAGIC`` (2 bytes) | version (u8) | type (u8) | session (16 bytes) | JSON
metadata (UTF-8). The metadata holds the scalar fields that differ from their defaults and, under
``"arrays"``, one descriptor per
buffer frame: ``[name, dtype, shape, codec, nbytes]``. Frames 1.. are the buffers, raw or LZ4 block
compressed when that saves at least ``LZ4_MIN_SAVING`` of a buffer of ``LZ4_MIN_BYTES`` or more.

Decoding validates everything (magic, version, type, JSON, field names and types, dtypes, shapes,
sizes, decompressed lengths) and raises ``WireError`` with a clear message on the first problem.
Every descriptor (name, dtype, rank, declared size against ``DecodeLimits``) is checked before any
buffer is decompressed, so a small frame set cannot make the receiver allocate more than the limits.

Versions: ``VERSION`` is the frame layout's; a peer speaking another is refused with
``UNSUPPORTED_VERSION``. Message types are added without changing it (``messages.PROTOCOL_REVISION``:
2 added the heartbeat, ``Ping``/``Pong``): a peer that predates a type answers it with an ``Error``
(MALFORMED, "unknown message type N") on the same session id, so a newer robot can tell an older
server from a dead one.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import struct
import types
import typing
from collections.abc import Mapping

import lz4.block
import numpy as np

from edge_spec_ros.wire import compact
from edge_spec_ros.wire.messages import MESSAGE_TYPES, DraftBlock, Envelope, ErrorCode, Message

MAGIC = b"ES"
VERSION = 1
SESSION_BYTES = 16
HEADER = struct.Struct("!2sBB16s")  # magic, version, type, session
MAX_META_BYTES = 64 * 1024
MAX_ARRAY_BYTES = 64 * 1024 * 1024  # one (γ, V) float32 block at V = 151,657 is 2.4 MB per γ=4
LZ4_MIN_BYTES = 1024
LZ4_MIN_SAVING = 0.1
ALLOWED_DTYPES = {"int32": np.int32, "int64": np.int64, "float32": np.float32, "float16": np.float16,
                  "uint8": np.uint8}
MAX_NDIM = 4
# Arrays whose dtype is fixed by the protocol (others: any allowed dtype); ``register`` adds others'.
FIELD_DTYPES = {"input_ids": "int32", "tokens": "int32", "image": "uint8", "q_ids": "int32", "p_ids": "int32",
                "q_draft": "float32"}
# Every type the frames may carry: the verifier protocol's, and those ``register`` adds (DRAGON's 32-37)
FRAME_TYPES: dict[int, type] = dict(MESSAGE_TYPES)


def register(types: Mapping[int, type], field_dtypes: Mapping[str, str]) -> None:
    """Let the frames carry another protocol's messages beside the verifier protocol's: ``types``
    maps each type byte to its frozen dataclass, ``field_dtypes`` fixes the dtype of its array
    fields. DRAGON's module registers its messages when it is imported (edge_spec_ros/dragon/wire.py,
    types 32-37), so this layer never imports DRAGON; a process that may receive DRAGON's messages
    imports that module (the server through the DRAGON sessions ``serve`` gives it, the robot
    through its DRAGON link), and one that does not answers them as a verifier that predates DRAGON:
    MALFORMED, "unknown message type N". Registering the same class again (a reloaded module) is a
    no-op; a type byte or field dtype taken by another is a ValueError."""
    for number, cls in types.items():
        taken = FRAME_TYPES.get(int(number))
        if number == compact.COMPACT_DRAFT or (taken is not None and _name(taken) != _name(cls)):
            raise ValueError(f"message type {int(number)} is taken ({_name(taken or DraftBlock)})")
    for name, dtype in field_dtypes.items():
        if dtype not in ALLOWED_DTYPES or FIELD_DTYPES.get(name, dtype) != dtype:
            raise ValueError(f"array field {name!r}: dtype {dtype} not allowed or fixed otherwise")
    FRAME_TYPES.update((int(number), cls) for number, cls in types.items())
    FIELD_DTYPES.update(field_dtypes)


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclasses.dataclass(frozen=True)
class DecodeLimits:
    """What a receiver accepts before decompressing anything: bytes per array field (fields not
    listed: ``MAX_ARRAY_BYTES``) and in all arrays of one message together."""

    field_bytes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    max_total_bytes: int = MAX_ARRAY_BYTES

    def for_field(self, name: str) -> int:
        return min(self.field_bytes.get(name, MAX_ARRAY_BYTES), MAX_ARRAY_BYTES)


DEFAULT_LIMITS = DecodeLimits()


class WireError(ValueError):
    """A frame set that cannot be decoded; ``code`` is the ErrorCode to reply with."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.MALFORMED) -> None:
        super().__init__(message)
        self.code = code


def encode(envelope: Envelope, compact_drafts: bool = True) -> list[bytes]:
    """Envelope → frames. A draft block without dense or sparse q travels as one compact frame
    (``wire/compact.py``) unless ``compact_drafts`` is False (the described form, which every receiver
    also accepts)."""
    msg = envelope.message
    if len(envelope.session) != SESSION_BYTES:
        raise ValueError(f"session ids are {SESSION_BYTES} bytes, got {len(envelope.session)}")
    if compact_drafts and isinstance(msg, DraftBlock) and compact.fits(msg):
        return [HEADER.pack(MAGIC, VERSION, compact.COMPACT_DRAFT, envelope.session) + compact.encode_body(msg)]
    meta: dict[str, typing.Any] = {}
    arrays: list[list] = []
    buffers: list[bytes] = []
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name)
        if f.default is not dataclasses.MISSING and not isinstance(value, np.ndarray) and value == f.default:
            continue  # the receiver fills in defaults: they need not travel
        if isinstance(value, bytes):
            value = np.frombuffer(value, dtype=np.uint8)
        if isinstance(value, np.ndarray):
            if value.dtype.name not in ALLOWED_DTYPES or value.ndim > MAX_NDIM:
                raise TypeError(f"{type(msg).__name__}.{f.name}: cannot encode a {value.ndim}-D {value.dtype} array")
            raw = np.ascontiguousarray(value).tobytes()
            codec, data = "raw", raw
            if len(raw) >= LZ4_MIN_BYTES:
                packed = lz4.block.compress(raw, store_size=False)
                if len(packed) <= (1 - LZ4_MIN_SAVING) * len(raw):
                    codec, data = "lz4", packed
            arrays.append([f.name, value.dtype.name, list(value.shape), codec, len(raw)])
            buffers.append(data)
        elif isinstance(value, tuple):
            meta[f.name] = list(value)
        elif value is None or isinstance(value, (bool, int, float, str)):
            meta[f.name] = value
        else:
            raise TypeError(f"{type(msg).__name__}.{f.name}: cannot encode {type(value).__name__}")
    meta["arrays"] = arrays
    head = HEADER.pack(MAGIC, VERSION, int(msg.TYPE), envelope.session)
    return [head + json.dumps(meta, separators=(",", ":")).encode(), *buffers]


def encoded_size(session: bytes, message: Message) -> int:
    """Bytes ``message`` takes on the wire (all frames)."""
    return sum(len(f) for f in encode(Envelope(session, message)))


def decode(frames: list[bytes], limits: DecodeLimits = DEFAULT_LIMITS) -> Envelope:
    """Frames → Envelope, or ``WireError``."""
    if not frames or len(frames[0]) < HEADER.size:
        raise WireError("missing or short header frame")
    magic, version, mtype, session = HEADER.unpack_from(frames[0])
    if magic != MAGIC:
        raise WireError(f"bad magic {magic!r}: not an edge_spec_ros frame")
    if version != VERSION:
        raise WireError(f"unsupported protocol version {version} (this side speaks {VERSION})",
                        ErrorCode.UNSUPPORTED_VERSION)
    if mtype == compact.COMPACT_DRAFT:
        return Envelope(session, _decode_compact(frames, limits))
    cls = FRAME_TYPES.get(mtype)
    if cls is None:
        raise WireError(f"unknown message type {mtype}")
    raw_meta = frames[0][HEADER.size:]
    if len(raw_meta) > MAX_META_BYTES:
        raise WireError(f"metadata of {len(raw_meta)} bytes exceeds {MAX_META_BYTES}")
    try:
        meta = json.loads(raw_meta.decode())
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, too deep, too many digits
        raise WireError(f"metadata is not valid JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("arrays"), list):
        raise WireError("metadata must be an object with an 'arrays' list")
    descriptors = meta.pop("arrays")
    if len(descriptors) != len(frames) - 1:
        raise WireError(f"{len(descriptors)} arrays described but {len(frames) - 1} buffer frames")
    array_fields = _array_fields(cls)
    checked, seen, total = [], set(meta), 0
    for desc, data in zip(descriptors, frames[1:]):  # every descriptor first, nothing decompressed yet
        name, np_dtype, shape, codec, nbytes = _check_descriptor(cls, desc, data, array_fields, limits)
        if name in seen:
            raise WireError(f"{cls.__name__}: field {name!r} given twice")
        seen.add(name)
        total += nbytes
        if total > limits.max_total_bytes:
            raise WireError(f"{cls.__name__}: arrays of {total}+ bytes exceed the limit of {limits.max_total_bytes}",
                            ErrorCode.TOO_LARGE)
        checked.append((name, np_dtype, shape, codec, nbytes, data))
    values = dict(meta)
    for name, np_dtype, shape, codec, nbytes, data in checked:
        values[name] = _decode_array(name, np_dtype, shape, codec, nbytes, data)
    return Envelope(session, _build(cls, values))


def _decode_compact(frames: list[bytes], limits: DecodeLimits) -> DraftBlock:
    if len(frames) != 1:
        raise WireError(f"a compact draft is one frame, got {len(frames)}")
    max_tokens = min(compact.MAX_TOKENS, limits.for_field("tokens") // 4, limits.for_field("q_draft") // 4)
    try:
        return compact.decode_body(frames[0][HEADER.size:], max_tokens)
    except compact.CompactTooLarge as exc:
        raise WireError(str(exc), ErrorCode.TOO_LARGE) from None
    except compact.CompactError as exc:
        raise WireError(str(exc)) from None


@functools.cache
def _array_fields(cls: type) -> frozenset[str]:
    """Fields of ``cls`` that may travel as a buffer frame (numpy arrays and bytes)."""
    hints, fields = _fields(cls)
    out = set()
    for f in fields.values():
        options = typing.get_args(hints[f.name]) if isinstance(hints[f.name], types.UnionType) else (hints[f.name],)
        if np.ndarray in options or bytes in options:
            out.add(f.name)
    return frozenset(out)


def _check_descriptor(cls: type, desc: typing.Any, data: bytes, array_fields: frozenset[str],
                      limits: DecodeLimits):
    if not (isinstance(desc, list) and len(desc) == 5):
        raise WireError(f"bad array descriptor {str(desc)[:100]}")
    name, dtype, shape, codec, nbytes = desc
    if not isinstance(name, str):
        raise WireError(f"array name {str(name)[:40]!r} not allowed")
    if name not in array_fields:
        if name in _fields(cls)[1]:
            raise WireError(f"{cls.__name__}.{name}: ndarray does not fit (not an array field)")
        raise WireError(f"{cls.__name__}: unknown fields [{name[:40]!r}] (array not allowed)")
    if not isinstance(dtype, str) or dtype not in ALLOWED_DTYPES:
        raise WireError(f"array {name!r}: dtype {str(dtype)[:20]!r} not allowed")
    if FIELD_DTYPES.get(name, dtype) != dtype:
        raise WireError(f"array {name!r} must be {FIELD_DTYPES[name]}, got {dtype}")
    if not (isinstance(shape, list) and len(shape) <= MAX_NDIM and all(type(d) is int and d >= 0 for d in shape)):
        raise WireError(f"array {name!r}: bad shape {str(shape)[:60]}")
    np_dtype = np.dtype(ALLOWED_DTYPES[dtype])
    expected = math.prod(shape) * np_dtype.itemsize  # Python ints: no overflow
    cap = limits.for_field(name)
    if not isinstance(nbytes, int) or nbytes != expected:
        raise WireError(f"array {name!r}: size {str(nbytes)[:20]} does not match shape {shape} {dtype}")
    if nbytes > cap:
        raise WireError(f"array {name!r}: {nbytes} bytes exceeds the limit of {cap}", ErrorCode.TOO_LARGE)
    if codec == "raw":
        if len(data) != nbytes:
            raise WireError(f"array {name!r}: {len(data)} bytes, expected {nbytes}")
    elif codec == "lz4":
        if len(data) > nbytes:  # the sender only compresses what shrinks
            raise WireError(f"array {name!r}: {len(data)} compressed bytes for {nbytes}")
    else:
        raise WireError(f"array {name!r}: unknown codec {str(codec)[:20]!r}")
    return name, np_dtype, shape, codec, nbytes


def _decode_array(name: str, np_dtype: np.dtype, shape: list[int], codec: str, nbytes: int,
                  data: bytes) -> np.ndarray:
    if codec == "lz4":
        try:
            data = lz4.block.decompress(data, uncompressed_size=nbytes)
        except lz4.block.LZ4BlockError as exc:
            raise WireError(f"array {name!r}: LZ4 data corrupt: {exc}") from None
        if len(data) != nbytes:
            raise WireError(f"array {name!r}: {len(data)} bytes, expected {nbytes}")
    return np.frombuffer(data, dtype=np_dtype).reshape(shape)


@functools.cache
def _fields(cls: type) -> tuple[dict[str, typing.Any], dict[str, dataclasses.Field]]:
    """A message class's resolved type hints and fields (resolved once per class: it is costly)."""
    return typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}


def _build(cls: type, values: dict[str, typing.Any]) -> Message:
    hints, fields = _fields(cls)
    unknown = set(values) - set(fields)
    if unknown:
        raise WireError(f"{cls.__name__}: unknown fields {sorted(unknown)}")
    kwargs = {}
    for name, f in fields.items():
        if name not in values:
            if f.default is dataclasses.MISSING:
                raise WireError(f"{cls.__name__}: missing field {name!r}")
            continue
        kwargs[name] = _check(cls.__name__, name, values[name], hints[name])
    return cls(**kwargs)


def _check(owner: str, name: str, value: typing.Any, hint: typing.Any) -> typing.Any:
    """Coerce/validate one field value against its annotation."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        if option is type(None) and value is None:
            return None
        if option is np.ndarray and isinstance(value, np.ndarray):
            return value
        if option is bytes and isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 1:
            return value.tobytes()
        if option is bool and isinstance(value, bool):
            return value
        if option is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if option is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise WireError(f"{owner}.{name}: {str(value)[:20]}... does not fit a float") from None
        if option is str and isinstance(value, str):
            return value
        if typing.get_origin(option) is tuple and isinstance(value, list) \
                and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return tuple(value)
    raise WireError(f"{owner}.{name}: {type(value).__name__} does not fit {hint}")
