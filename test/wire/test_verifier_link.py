"""The three verifier links (ZeroMQ, in process, ROS) implement the one protocol the decoder uses,
with the protocol's parameter names."""

from __future__ import annotations

import inspect

import pytest

from edge_spec_ros.edge.client import VerifierClient
from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.nodes.ros_link import RosVerifierLink
from edge_spec_ros.wire.verifier_link import VerifierLink

CALLS = ("open", "send", "receive", "end")


@pytest.mark.parametrize("link", [VerifierClient, LocalVerifierLink, RosVerifierLink])
def test_every_link_offers_the_protocol(link):
    for name in CALLS:
        want = list(inspect.signature(getattr(VerifierLink, name)).parameters)
        got = list(inspect.signature(getattr(link, name)).parameters)
        assert got == want, (link.__name__, name, got, want)


def test_a_local_link_is_a_verifier_link(target_model, encoder):
    from edge_spec_ros.models.verifier import EarlyExitVerifier

    assert isinstance(LocalVerifierLink(EarlyExitVerifier(target_model), encoder), VerifierLink)
    assert not isinstance(object(), VerifierLink)
