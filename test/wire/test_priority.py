"""Open.priority on the wire: it travels only when set (an Open at the default priority is the same
frames as before the field existed, so older peers read it), round-trips, and a value of the wrong
type is refused as MALFORMED by the codec (its range is the server's check, test/cloud/test_refusals.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edge_spec_ros.wire.codec import HEADER, WireError, decode, encode
from edge_spec_ros.wire.messages import Envelope, ErrorCode, Open

SESSION = bytes(range(16))
IDS = np.arange(5, 12, dtype=np.int32)


def meta(frames: list[bytes]) -> dict:
    return json.loads(frames[0][HEADER.size:])


def test_default_priority_does_not_travel():
    frames = encode(Envelope(SESSION, Open(input_ids=IDS)))
    assert "priority" not in meta(frames)
    assert decode(frames).message.priority == 0


@pytest.mark.parametrize("priority", [1, 3])
def test_priority_round_trips(priority):
    frames = encode(Envelope(SESSION, Open(input_ids=IDS, priority=priority)))
    assert meta(frames)["priority"] == priority
    msg = decode(frames).message
    assert isinstance(msg, Open) and msg.priority == priority and np.array_equal(msg.input_ids, IDS)


@pytest.mark.parametrize("bad", [1.5, "1", True, None, [1]])
def test_priority_of_another_type_is_malformed(bad):
    frames = encode(Envelope(SESSION, Open(input_ids=IDS, priority=1)))
    m = meta(frames)
    m["priority"] = bad
    frames[0] = frames[0][:HEADER.size] + json.dumps(m).encode()
    with pytest.raises(WireError, match="Open.priority") as err:
        decode(frames)
    assert err.value.code == ErrorCode.MALFORMED
