"""The ROS path carries every wire field: each field of the wire dataclasses the bridge relays has
its ROS message field, or is listed here with the reason it does not travel through ROS. A wire
dataclass that gains a field fails this test until the ROS path carries it (or says why not)."""

from __future__ import annotations

import dataclasses

import pytest

from edge_spec_ros.msg import DecisionRequest, DraftBlock as DraftBlockMsg, ExitResult as ExitResultMsg
from edge_spec_ros.wire import messages as wire

NOT_CARRIED = {
    "compute_tq_s": "refused unless 0: compute emulation is the server's option (serve --emulate-tq-s)",
    "down_delay_s": "downlink emulation is the bridge's own configuration (emulate_* parameters)",
    "down_jitter_s": "as down_delay_s",
    "down_bandwidth_bps": "as down_delay_s",
    "down_loss": "as down_delay_s",
}


def ros_fields(msg_type) -> set[str]:
    return set(msg_type.get_fields_and_field_types())


@pytest.mark.parametrize("wire_type,msg_type", [
    (wire.Open, DecisionRequest),
    (wire.DraftBlock, DraftBlockMsg),
    (wire.Generate, DraftBlockMsg),  # a cloud-only generation request travels as a draft without tokens
    (wire.ExitResult, ExitResultMsg),
    (wire.Tokens, ExitResultMsg),  # cloud-only tokens travel as an exit result of layer 0
])
def test_every_wire_field_travels_through_ros(wire_type, msg_type):
    missing = {f.name for f in dataclasses.fields(wire_type)} - ros_fields(msg_type) - set(NOT_CARRIED)
    assert not missing, f"{wire_type.__name__} fields the ROS path drops: {sorted(missing)}"


def test_the_exemptions_are_real_fields():
    open_fields = {f.name for f in dataclasses.fields(wire.Open)}
    assert set(NOT_CARRIED) <= open_fields
