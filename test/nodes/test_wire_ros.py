"""nodes/wire_ros.py: every wire message of the ROS path goes wire -> ROS -> wire unchanged (but for
the fields ``NOT_CARRIED`` lists with why), for representative and edge values; the table ``CARRIED``
maps every wire field and uses every ROS field, with types that agree; a value a ROS field cannot hold
is refused with ``RangeError``, and the bridge answers a verifier reply it cannot carry with an ERROR.

A wire dataclass or a ROS message that gains, loses or narrows a field fails here until the converter
carries it (or says why not)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pytest
import rclpy
from builtin_interfaces.msg import Time

from edge_spec_ros.msg import BridgeStatus, DecisionRequest, DraftBlock as DraftBlockMsg, ExitResult as ExitResultMsg
from edge_spec_ros.nodes.bridge_node import BridgeNode, _Session
from edge_spec_ros.nodes.wire_ros import (
    CARRIED, INT_RANGES, NOT_CARRIED, ROS_ONLY, LinkLost, RangeError, from_ros, ros_types, session_id, to_ros,
    wire_types,
)
from edge_spec_ros.wire.messages import (
    Close, DraftBlock, Error, ErrorCode, ExitResult, Generate, Open, Opened, Stats, Tokens,
)

I32 = np.iinfo(np.int32)
U16, U32, U64 = 2**16 - 1, 2**32 - 1, 2**64 - 1
F32_MAX = float(np.finfo(np.float32).max)
ROS_TYPES = (DecisionRequest, DraftBlockMsg, ExitResultMsg, BridgeStatus)


def ids(*values) -> np.ndarray:
    return np.array(values, dtype=np.int32).reshape(-1)


def probs(*shape) -> np.ndarray:
    """float32 values ROS carries exactly (multiples of 1/8)."""
    return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 8) / 8 + 0.125


# Per message: representative values (the first: every carried field away from its default), then
# edge values: empty arrays, the ends of each ROS field's range, optional arrays None or set.
SAMPLES: dict[type, list] = {
    Open: [
        Open(input_ids=ids(1, 151655, 2), image=b"\xff\xd8 jpeg", temperature=0.75, seed=1234, want_exits=False,
             queue_policy="fifo", p_top_k=20, priority=1, pipelined=True, grammar="action"),
        Open(input_ids=ids(), grammar='root ::= "Action: stop"'),
        Open(input_ids=ids(I32.min, I32.max), seed=U64, p_top_k=U16, priority=255, temperature=F32_MAX,
             queue_policy="random"),
        Open(input_ids=ids(5), down_delay_s=0.1, down_loss=0.5, compute_tq_s=0.0),  # not carried: arrive as 0
    ],
    Close: [Close()],
    DraftBlock: [
        DraftBlock(round=3, position=17, tokens=ids(4, 5), q=probs(2, 6), q_ids=ids(1, 2, 3, 4).reshape(2, 2),
                   q_values=probs(2, 2), q_draft=probs(2), resampled=9, chained=True, partial=True),
        DraftBlock(round=0, position=0, tokens=ids(7)),
        DraftBlock(round=U32, position=U32, tokens=ids(I32.max, I32.min), q_ids=ids(I32.max, 0).reshape(2, 1),
                   q_values=probs(2, 1), resampled=I32.min),
        DraftBlock(round=1, position=3, tokens=ids(8), q=probs(1, 3)),
    ],
    Generate: [Generate(max_new_tokens=64, stop_tokens=(2, 151645), resampled=7), Generate(max_new_tokens=0),
               Generate(max_new_tokens=U32, stop_tokens=(I32.max, I32.min), resampled=I32.max)],
    ExitResult: [
        ExitResult(round=2, layer=8, accepted=3, tokens=ids(4, 5, 6, 7), confidence=0.875, is_final=True,
                   compute_s=0.25, resample=True, p=probs(4), p_ids=ids(9, 3, 1, 0), p_tv=0.125, stale=True),
        ExitResult(round=0, layer=1, accepted=0, tokens=ids(), confidence=0.0, is_final=False),
        ExitResult(round=U32, layer=U16, accepted=U16, tokens=ids(I32.max), confidence=1.0, is_final=True,
                   p=probs(6)),
    ],
    Tokens: [Tokens(tokens=ids(3, 2, 1), is_final=True, compute_s=0.5), Tokens(tokens=ids(), is_final=False)],
    Opened: [Opened(num_layers=24, exit_layers=(8, 16, 24), prefill_s=0.0), Opened(0, (), 0.0),
             Opened(U16, (1, U16), 0.0), Opened(4, (2,), prefill_s=0.3)],  # prefill_s is not carried
    Error: [Error(code=5, message="ids out of vocabulary", round=-1), Error(I32.min, ""), Error(I32.max, "x", 4)],
    LinkLost: [LinkLost("no reply within 10.0 s", 7), LinkLost("", 0), LinkLost("gone", -3)],
}
SAMPLE_CASES = [pytest.param(m, id=f"{type(m).__name__}-{i}") for ms in SAMPLES.values() for i, m in enumerate(ms)]


def arrived(message):
    """What reaches the other end: the message, its uncarried fields at their default (or zero)."""
    absent = {name: (f.default if f.default is not dataclasses.MISSING else 0.0)
              for f in dataclasses.fields(message) for name in [f.name] if (type(message), name) in NOT_CARRIED}
    return replace(message, **absent)


def same(a, b) -> bool:
    """Equal messages, arrays compared by value, dtype and shape."""
    if type(a) is not type(b):
        return False
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.dtype == y.dtype
                    and np.array_equal(x, y)):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


@pytest.mark.parametrize("message", SAMPLE_CASES)
def test_wire_to_ros_to_wire_is_the_message(message):
    stamp = Time(sec=12, nanosec=345)
    out = to_ros(U32, message, stamp)
    assert type(out) is CARRIED[type(message)].ros
    assert out.decision == U32 and out.header.stamp == stamp
    back = from_ros(out)
    assert same(back, arrived(message)), f"{message!r}\n-> {out!r}\n-> {back!r}"


def _differs(value, default) -> bool:
    return isinstance(value, np.ndarray) or value != default


@pytest.mark.parametrize("cls", list(CARRIED), ids=lambda c: c.__name__)
def test_the_samples_move_every_field_on_both_sides(cls):
    """Some sample sets each carried field away from its wire default, and some sample's ROS message
    holds it away from the ROS message's default: a field a converter drops on either way (write or
    read) fails a round trip above."""
    carried, blank = CARRIED[cls], CARRIED[cls].ros()
    messages = [to_ros(1, m) for m in SAMPLES[cls]]
    for f in dataclasses.fields(cls):
        if f.name not in carried.fields:
            continue
        if f.default is not dataclasses.MISSING:
            assert any(_differs(getattr(m, f.name), f.default) for m in SAMPLES[cls]), \
                f"{cls.__name__}.{f.name} keeps its default in every sample"
        assert any(getattr(out, f.name) != getattr(blank, f.name) for out in messages), \
            f"{cls.__name__}.{f.name} reaches {carried.ros.__name__} in no sample"


def test_every_message_has_samples():
    assert set(SAMPLES) == set(CARRIED)


@pytest.mark.parametrize("cls", list(CARRIED), ids=lambda c: c.__name__)
def test_every_wire_field_is_carried_or_says_why(cls):
    fields = set(wire_types(cls))
    carried = set(CARRIED[cls].fields)
    not_carried = {name for (wire, name) in NOT_CARRIED if wire is cls}
    assert carried | not_carried == fields, f"{cls.__name__} fields the ROS path drops: " \
                                            f"{sorted(fields - carried - not_carried)}"
    assert not carried & not_carried
    assert carried <= set(ros_types(CARRIED[cls].ros)), f"{cls.__name__}: carried in no ROS field"


def test_the_exemptions_are_real_fields_with_reasons():
    for (cls, name), why in NOT_CARRIED.items():
        assert name in wire_types(cls) and why
    for name, what in ROS_ONLY.items():
        assert any(name in ros_types(t) for t in ROS_TYPES) and what


@pytest.mark.parametrize("ros", ROS_TYPES, ids=lambda t: t.__name__)
def test_every_ros_field_is_used(ros):
    used = set(ROS_ONLY)
    for carried in CARRIED.values():
        if carried.ros is ros:
            used |= set(carried.fields) | set(carried.fixed)
    unused = set(ros_types(ros)) - used
    assert not unused, f"{ros.__name__} fields no wire field fills: {sorted(unused)}"


INTS = set(INT_RANGES)
COMPATIBLE = {  # wire annotation -> ROS field types that carry it
    "int": INTS, "float": {"float", "double"}, "bool": {"boolean"}, "str": {"string"},
    "bytes": {"sequence<uint8>"},
    "np.ndarray": {"sequence<int32>", "sequence<float>"},
    "np.ndarray | None": {"sequence<int32>", "sequence<float>"},
    "tuple[int, ...]": {f"sequence<{t}>" for t in INTS},
}


@pytest.mark.parametrize("cls", list(CARRIED), ids=lambda c: c.__name__)
def test_wire_and_ros_types_agree(cls):
    ros = ros_types(CARRIED[cls].ros)
    for name in CARRIED[cls].fields:
        annotation = wire_types(cls)[name]
        assert ros[name] in COMPATIBLE[annotation], f"{cls.__name__}.{name}: {annotation} in a ROS {ros[name]}"


def _too_big_and_small(cls, name):
    """Values one past each end of ``cls.name``'s ROS field, in the wire field's own form."""
    kind = ros_types(CARRIED[cls].ros)[name]
    element = kind[len("sequence<"):-1] if kind.startswith("sequence<") else kind
    if element == "float" and not kind.startswith("sequence"):
        return [1e39, -1e39]
    if element not in INT_RANGES or kind == "sequence<uint8>":
        return []
    low, high = INT_RANGES[element]
    value = getattr(SAMPLES[cls][0], name)
    if isinstance(value, np.ndarray):
        return [np.full(value.shape, v, dtype=np.int64) for v in (high + 1, low - 1)]
    if isinstance(value, tuple):
        return [(high + 1,), (low - 1,)]
    return [high + 1, low - 1]


RANGED = [pytest.param(cls, name, bad, id=f"{cls.__name__}.{name}={np.asarray(bad).reshape(-1)[0]:g}")
          for cls, carried in CARRIED.items() for name in carried.fields for bad in _too_big_and_small(cls, name)]


@pytest.mark.parametrize("cls,name,bad", RANGED)
def test_a_value_the_ros_field_cannot_hold_is_refused(cls, name, bad):
    with pytest.raises(RangeError, match=rf"{cls.__name__}\.{name}\b.*range"):
        to_ros(1, replace(SAMPLES[cls][0], **{name: bad}))


def test_every_narrower_field_is_range_checked():
    """Each int and float32 scalar, int array and int tuple carried has out-of-range cases above."""
    checked = {(p.values[0], p.values[1]) for p in RANGED}
    for cls, carried in CARRIED.items():
        for name in carried.fields:
            kind = ros_types(carried.ros)[name]
            if kind in INTS | {"float"} or kind in {f"sequence<{t}>" for t in INTS} - {"sequence<uint8>"}:
                assert (cls, name) in checked, f"{cls.__name__}.{name} ({kind}) has no out-of-range case"


@pytest.mark.parametrize("decision", [-1, U32 + 1])
def test_a_decision_out_of_uint32_is_refused(decision):
    with pytest.raises(RangeError, match="decision"):
        to_ros(decision, Close())


@pytest.mark.parametrize("message,error,match", [
    (ExitResult(round=0, layer=0, accepted=0, tokens=ids(1), confidence=1.0, is_final=True), ValueError, "Tokens"),
    (DraftBlock(round=0, position=0, tokens=ids()), ValueError, "Generate"),
    (DraftBlock(round=0, position=0, tokens=ids(1, 2), q=probs(3, 4)), ValueError, "rows"),
    (DraftBlock(round=0, position=0, tokens=ids(1, 2), q_ids=ids(1, 2)), ValueError, "rows"),
    (DraftBlock(round=0, position=0, tokens=ids(1), q_draft=np.zeros(0, np.float32)), ValueError, "None"),
    (ExitResult(round=0, layer=2, accepted=0, tokens=ids(1), confidence=1.0, is_final=True, p=probs(2, 2)),
     ValueError, "one row"),
    (Open(input_ids=np.array([0.5])), TypeError, "integers"),
    (Open(input_ids=ids(1), seed=1.5), TypeError, "integer"),
    (Stats(), TypeError, "Stats"),
])
def test_a_message_that_would_not_read_back_is_refused(message, error, match):
    with pytest.raises(error, match=match):
        to_ros(1, message)


def test_a_draft_whose_arrays_do_not_fit_its_tokens_is_refused():
    msg = to_ros(1, SAMPLES[DraftBlock][0])
    msg.vocab_size = 5  # q holds 2 x 6 values
    with pytest.raises(ValueError, match="vocab_size 5"):
        from_ros(msg)
    msg = to_ros(1, SAMPLES[DraftBlock][0])
    msg.q_ids = msg.q_ids[:3]
    with pytest.raises(ValueError, match="q_ids holds 3 values"):
        from_ros(msg)


def test_an_unknown_status_is_refused():
    msg = BridgeStatus(decision=2, state=9)
    with pytest.raises(ValueError, match="unknown state 9"):
        from_ros(msg)


def test_an_open_without_queue_policy_reads_as_the_default():
    msg = to_ros(1, SAMPLES[Open][0])
    msg.queue_policy = ""
    assert from_ros(msg).queue_policy == Open.queue_policy


class _Published(list):
    def publish(self, msg) -> None:
        self.append(msg)


@pytest.fixture
def bridge():
    rclpy.init()  # the default context: BridgeNode takes none
    try:
        node = BridgeNode()
        node.results, node.status = _Published(), _Published()
        yield node
        node.destroy_node()
    finally:
        rclpy.shutdown()


def test_the_bridge_answers_a_reply_it_cannot_carry_with_an_error(bridge):
    session = _Session(7, session_id(7), 1.0)
    bridge._publish_reply(session, Opened(num_layers=U16 + 1, exit_layers=(4,), prefill_s=0.1))
    bridge._publish_reply(session, ExitResult(round=0, layer=U16 + 1, accepted=0, tokens=ids(1), confidence=1.0,
                                              is_final=True))
    bridge._publish_reply(session, Tokens(tokens=ids(3), is_final=True))
    assert [(s.decision, s.state, s.code) for s in bridge.status] == [(7, BridgeStatus.ERROR, ErrorCode.INTERNAL)] * 2
    assert "Opened.num_layers = 65536" in bridge.status[0].message
    assert "ExitResult.layer = 65536" in bridge.status[1].message
    assert isinstance(session.answer, Error)  # a repeated OPEN hears the error, not the Opened
    assert [(r.decision, r.layer, list(r.tokens)) for r in bridge.results] == [(7, 0, [3])]
