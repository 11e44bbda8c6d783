"""A bounded structure-aware fuzz of the codec (edge_spec_ros/wire/fuzz.py): valid frame sets of every
message type mutated field by field, plus random bytes. ``decode`` returns an Envelope or raises
WireError with a message and an error code, and nothing else, on every case."""

from __future__ import annotations

import collections

from edge_spec_ros.wire import fuzz
from edge_spec_ros.wire.codec import WireError, decode
from edge_spec_ros.wire.messages import ErrorCode

CASES = 4000
SEED = 10


def test_decode_never_fails_other_than_with_a_wire_error():
    outcomes: collections.Counter[str] = collections.Counter()
    for frames in fuzz.cases(SEED, CASES):
        try:
            decode(frames)
        except WireError as exc:
            assert str(exc) and isinstance(exc.code, ErrorCode)
            outcomes[exc.code.name] += 1
        else:
            outcomes["decoded"] += 1
    print(f"{CASES} cases: {dict(outcomes)}")
    # the mix exercises both sides: some cases still decode, most are refused, for several reasons
    assert outcomes["decoded"] > CASES // 20 and outcomes["MALFORMED"] > CASES // 4
    assert outcomes["UNSUPPORTED_VERSION"] > 0


def test_the_fuzzer_is_deterministic():
    assert list(fuzz.cases(3, 50)) == list(fuzz.cases(3, 50))
