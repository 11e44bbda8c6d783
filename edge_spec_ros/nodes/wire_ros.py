"""The wire messages (wire/messages.py) as the ROS messages of the bridge's topics (msg/), and back.

The drafter's ROS link (nodes/ros_link.py) and the bridge (nodes/bridge_node.py) convert here and
nowhere else; both keep only their topics, sockets and state. One table, ``CARRIED``, says which ROS
message carries each wire message and which fields it carries (a wire field and its ROS field share
their name):

==============  =======================  ========================================================
robot → bridge  Open, Close              DecisionRequest (``command`` OPEN, CLOSE)
robot → bridge  DraftBlock, Generate     DraftBlock (a Generate is a block without tokens)
bridge → robot  ExitResult, Tokens       ExitResult (Tokens: ``layer`` 0, cloud-only decoding)
bridge → robot  Opened, Error, LinkLost  BridgeStatus (``state`` OPENED, ERROR, LINK_LOST)
==============  =======================  ========================================================

``to_ros(decision, message, stamp)`` writes one, ``from_ros(msg)`` reads it back, and
``from_ros(to_ros(d, m)) == m`` but for the fields of ``NOT_CARRIED`` (each with why: they arrive as
the field's default, 0.0 for ``Opened.prefill_s``) and float scalars, which ROS carries as float32.
``LinkLost`` and the bridge's negative codes (-1, ``VerifierLost.CODE``, ``INACTIVE_CODE``) are the
bridge's own statuses: no wire message carries them.

Ranges: a value its ROS field cannot hold (decisions and rounds are uint32, exit layers uint16,
``priority`` uint8, ``seed`` uint64, token ids and codes int32, float scalars float32) raises
``RangeError`` (a ``ValueError``) naming the message, the field, the value and the field's range:
rclpy would wrap it silently (Kilted's messages check no field unless asked). A message that would
read back as another (an ExitResult of layer 0, a draft block without tokens), an optional array
that is empty (it reads back as None) or a q / q_ids / q_values that is not γ rows raises
``ValueError``; a ROS message whose arrays do not fit its token count raises ``ValueError`` too.

DRAGON's messages (dragon/wire.py) do not travel through ROS: in mode ``dragon`` the drafter talks
ZeroMQ to the verifier itself (nodes/dragon_answer.py), and the ROS interfaces of DRAGON (``Answer``,
``AddNote``, ``Describe``) carry results, never a wire message.

Legend: γ — draft length; V — vocabulary size; K — kept entries of a sparse q or a pruned p_δ.
"""

from __future__ import annotations

import array
import dataclasses
import functools
import math
from dataclasses import dataclass, field

import numpy as np

from edge_spec_ros.msg import BridgeStatus, DecisionRequest, DraftBlock as DraftBlockMsg, ExitResult as ExitResultMsg
from edge_spec_ros.wire.messages import Close, DraftBlock, Error, ExitResult, Generate, Open, Opened, Tokens


class RangeError(ValueError):
    """A wire value that its ROS field cannot hold."""


@dataclass(frozen=True)
class LinkLost:
    """The bridge's status of a decision the verifier did not answer: no reply within the decision's
    timeout (``code`` 0), or the bridge's heartbeat lost the verifier (``VerifierLost.CODE``)."""

    message: str
    code: int = 0


@dataclass(frozen=True)
class Carried:
    """How one wire message travels: ``ros``, the ROS message; ``fields``, the wire fields it carries
    (each in the ROS field of its name); ``fixed``, ROS fields with a value of this message's own."""

    ros: type
    fields: tuple[str, ...]
    fixed: dict[str, object] = field(default_factory=dict)


CARRIED: dict[type, Carried] = {
    Open: Carried(DecisionRequest, ("input_ids", "image", "temperature", "seed", "want_exits", "queue_policy",
                                    "p_top_k", "priority", "pipelined", "grammar"), {"command": DecisionRequest.OPEN}),
    Close: Carried(DecisionRequest, (), {"command": DecisionRequest.CLOSE}),
    DraftBlock: Carried(DraftBlockMsg, ("round", "position", "tokens", "q", "q_ids", "q_values", "q_draft",
                                        "resampled", "chained", "partial")),
    Generate: Carried(DraftBlockMsg, ("max_new_tokens", "stop_tokens", "resampled")),
    ExitResult: Carried(ExitResultMsg, ("round", "layer", "accepted", "tokens", "confidence", "is_final", "compute_s",
                                        "resample", "p", "p_ids", "p_tv", "stale")),
    Tokens: Carried(ExitResultMsg, ("tokens", "is_final", "compute_s"),
                    {"round": 0, "layer": 0, "accepted": 0, "confidence": 1.0}),
    Opened: Carried(BridgeStatus, ("num_layers", "exit_layers"), {"state": BridgeStatus.OPENED}),
    Error: Carried(BridgeStatus, ("code", "message"), {"state": BridgeStatus.ERROR}),
    LinkLost: Carried(BridgeStatus, ("code", "message"), {"state": BridgeStatus.LINK_LOST}),
}

# (wire message, field) -> why ROS does not carry it
NOT_CARRIED: dict[tuple[type, str], str] = {
    (Open, "compute_tq_s"): "refused unless 0: compute emulation is the server's option (serve --emulate-tq-s)",
    (Open, "down_delay_s"): "downlink emulation is the bridge's own configuration (its emulate_* parameters)",
    (Open, "down_jitter_s"): "as down_delay_s",
    (Open, "down_bandwidth_bps"): "as down_delay_s",
    (Open, "down_loss"): "as down_delay_s",
    (Opened, "prefill_s"): "the verifier's prefill time: the drafter times its open itself",
    (Error, "round"): "the round of a refused draft: the drafter fails the decision, whatever its round",
}

# ROS fields no wire field maps to -> what they hold
ROS_ONLY: dict[str, str] = {
    "header": "the publisher's stamp (the bridge knows a repeated OPEN by its decision and stamp)",
    "decision": "the decision, the session on the wire (session_id)",
    "vocab_size": "the length of q's rows (DraftBlock.q is γ × V, flattened)",
}

ROWS = ("q", "q_ids", "q_values")  # DraftBlock's (γ, ·) arrays: one row per draft token, flattened on ROS
FLOAT32_MAX = float(np.finfo(np.float32).max)
INT_RANGES: dict[str, tuple[int, int]] = {
    **{f"int{bits}": (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) for bits in (8, 16, 32, 64)},
    **{f"uint{bits}": (0, 2**bits - 1) for bits in (8, 16, 32, 64)},
}
# a ROS sequence's element type -> (array.array typecode, numpy dtype)
SEQUENCES: dict[str, tuple[str, type]] = {
    "int32": ("i", np.int32), "uint16": ("H", np.uint16), "uint8": ("B", np.uint8), "float": ("f", np.float32),
}
_STATES = {BridgeStatus.OPENED: Opened, BridgeStatus.ERROR: Error, BridgeStatus.LINK_LOST: LinkLost}
_TELLS = {Tokens: "layer 0 marks cloud-only tokens", Generate: "a block without tokens is a generation request"}


def session_id(decision: int) -> bytes:
    """The wire's session id (16 bytes) of a decision."""
    return decision.to_bytes(16, "big")


def decision_of(sid: bytes) -> int:
    return int.from_bytes(sid, "big")


def f32(values) -> array.array:
    """A float32[] field's value: rclpy keeps an ``array.array`` as is, but copies any other sequence
    (numpy included) element by element in Python (about 1 ms per 8,000 values; 80 ms for a γ×V
    q at Qwen2's vocabulary)."""
    return array.array("f", np.ascontiguousarray(values, dtype=np.float32).tobytes())


def i32(values) -> array.array:
    """An int32[] field's value (see ``f32``)."""
    return array.array("i", np.ascontiguousarray(values, dtype=np.int32).tobytes())


@functools.cache
def ros_types(msg_type: type) -> dict[str, str]:
    """A ROS message's field name -> type (``uint32``, ``sequence<int32>``, ``float``, ...)."""
    return dict(msg_type.get_fields_and_field_types())


@functools.cache
def wire_types(cls: type) -> dict[str, str]:
    """A wire dataclass's field name -> annotation (``int``, ``np.ndarray | None``, ...)."""
    return {f.name: f.type for f in dataclasses.fields(cls)}


def wire_type_of(msg) -> type:
    """The wire message (or ``LinkLost``) a ROS message of the bridge's topics carries."""
    if isinstance(msg, DecisionRequest):
        return Close if msg.command == DecisionRequest.CLOSE else Open
    if isinstance(msg, DraftBlockMsg):
        return DraftBlock if len(msg.tokens) else Generate
    if isinstance(msg, ExitResultMsg):
        return ExitResult if msg.layer else Tokens
    if isinstance(msg, BridgeStatus):
        if msg.state not in _STATES:
            raise ValueError(f"BridgeStatus of decision {msg.decision}: unknown state {msg.state}")
        return _STATES[msg.state]
    raise TypeError(f"{type(msg).__name__} carries no wire message")


def to_ros(decision: int, message, stamp=None):
    """``message`` of ``decision`` as the ROS message that carries it (``CARRIED``), stamped ``stamp``
    (builtin_interfaces/Time) if given."""
    carried = CARRIED.get(type(message))
    if carried is None:
        raise TypeError(f"no ROS message of the bridge's topics carries {type(message).__name__}")
    out = carried.ros()
    if stamp is not None:
        out.header.stamp = stamp
    _put(out, "decision", decision, message)
    for name, value in carried.fixed.items():
        setattr(out, name, value)
    for name in carried.fields:
        _put(out, name, getattr(message, name), message)
    if (read := wire_type_of(out)) is not type(message):
        raise ValueError(f"this {type(message).__name__} would read back as {read.__name__} ({_TELLS[read]})")
    return out


def from_ros(msg):
    """The wire message (or ``LinkLost``) a ROS message of the bridge's topics carries."""
    cls = wire_type_of(msg)
    types, kinds = ros_types(type(msg)), wire_types(cls)
    values = {name: _get(kinds[name], getattr(msg, name), types[name]) for name in CARRIED[cls].fields}
    values |= {name: _absent(cls, name) for (wire, name) in NOT_CARRIED if wire is cls}
    if cls is DraftBlock:
        values |= _rows(msg, values)
    if cls is Open and not values["queue_policy"]:
        values["queue_policy"] = Open.queue_policy
    return cls(**values)


def _put(out, name: str, value, message) -> None:
    """Set ``out.name`` (a field of ROS type ``ros_types(type(out))[name]``) to the wire ``value``."""
    kind = ros_types(type(out))[name]
    where = f"{type(message).__name__}.{name}"
    if kind.startswith("sequence<"):
        value = _sequence(out, name, value, message, kind[len("sequence<"):-1], where)
    elif kind in INT_RANGES:
        value = _int(value, kind, where)
    elif kind == "boolean":
        value = bool(value)
    elif kind == "float":
        value = float(value)
        if math.isfinite(value) and abs(value) > FLOAT32_MAX:
            raise RangeError(f"{where} = {value} is outside the ROS field's float32 range (±{FLOAT32_MAX:.6g})")
    setattr(out, name, value)


def _int(value, kind: str, where: str) -> int:
    if not isinstance(value, (int, np.integer)):
        raise TypeError(f"{where} must be an integer, not {type(value).__name__}")
    low, high = INT_RANGES[kind]
    if not low <= value <= high:
        raise RangeError(f"{where} = {value} is outside the ROS field's {kind} range [{low}, {high}]")
    return int(value)


def _sequence(out, name: str, value, message, element: str, where: str):
    """A sequence field's value: None is empty (an optional array); bytes stay bytes; an array is
    range-checked against ``element`` and handed to rclpy as an ``array.array`` (see ``f32``)."""
    optional = "None" in wire_types(type(message))[name]
    if value is None:
        return []
    if isinstance(value, bytes):
        return value
    values = np.asarray(value)
    if optional and values.size == 0:
        raise ValueError(f"{where} is empty: it would read back as None (send None)")
    if name in ROWS:
        _check_rows(out, name, values, message, where)
    elif values.ndim != 1:
        raise ValueError(f"{where} has shape {values.shape}: ROS carries it as one row")
    code, dtype = SEQUENCES[element]
    if element in INT_RANGES:
        if values.size and values.dtype.kind not in "iub":
            raise TypeError(f"{where} must hold integers, not {values.dtype}")
        low, high = INT_RANGES[element]
        if values.size and values.dtype != dtype and not (low <= values.min() and values.max() <= high):
            raise RangeError(f"{where} holds values outside the ROS field's {element} range [{low}, {high}]: "
                             f"{values.min()} .. {values.max()}")
    return array.array(code, np.ascontiguousarray(values, dtype=dtype).tobytes())


def _check_rows(out, name: str, values: np.ndarray, message, where: str) -> None:
    """q, q_ids, q_values are (γ, ·): ROS flattens them (and carries V, the length of q's rows)."""
    gamma = len(message.tokens)
    if values.ndim != 2 or values.shape[0] != gamma:
        raise ValueError(f"{where} has shape {values.shape}, not γ = {gamma} rows")
    if name == "q":
        _put(out, "vocab_size", values.shape[1], message)


def _get(annotation: str, value, kind: str):
    """A ROS field's ``value`` as the wire field of type ``annotation``."""
    if annotation.startswith("np.ndarray"):
        if "None" in annotation and len(value) == 0:
            return None
        return np.asarray(value, dtype=SEQUENCES[kind[len("sequence<"):-1]][1])
    if annotation == "bytes":
        return bytes(value)
    if annotation.startswith("tuple"):
        return tuple(int(v) for v in value)
    return {"int": int, "float": float, "bool": bool, "str": str}[annotation](value)


def _rows(msg: DraftBlockMsg, values: dict) -> dict:
    """q, q_ids and q_values back to (γ, ·) (V for q: ``vocab_size``)."""
    gamma = len(msg.tokens)
    out = {}
    for name in ROWS:
        flat = values[name]
        if flat is None:
            continue
        width = msg.vocab_size if name == "q" else flat.size // gamma
        if width == 0 or flat.size != gamma * width:
            raise ValueError(f"DraftBlock of decision {msg.decision}: {name} holds {flat.size} values, not "
                             f"γ = {gamma} rows" + (f" of vocab_size {msg.vocab_size}" if name == "q" else ""))
        out[name] = flat.reshape(gamma, width)
    return out


def _absent(cls: type, name: str):
    """What a field ROS does not carry arrives as: its default, or zero."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if f.default is not dataclasses.MISSING:
        return f.default
    return {"int": 0, "float": 0.0}[f.type]
