"""``describe`` while the drafter is in mode dragon: an empty mode falls back to ``fsd`` (a verify
mode; dragon answers questions and decodes no image), an explicit verify mode is kept, ``dragon``
itself is refused with the reason. Models and verifier are stand-ins (test_describe_service.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from edge_spec_ros.edge.registry import MODES
from edge_spec_ros.nodes.describe_service import FALLBACK_MODE, describe_mode
from edge_spec_ros.srv import Describe

from test_describe_service import FakeEdgeDecoder, drafter, run  # noqa: F401 - the fixture is used by name


def test_describe_mode_rules():
    assert FALLBACK_MODE == "fsd" and FALLBACK_MODE in MODES
    assert describe_mode("", "dragon") == "fsd" and describe_mode("  ", "dragon") == "fsd"
    assert describe_mode("", "dssd") == "dssd"  # a verify drafter mode is still the default
    assert describe_mode(" SD ", "dragon") == "sd"
    with pytest.raises(ValueError, match="answers questions on instruction"):
        describe_mode("dragon", "fsd")
    with pytest.raises(ValueError, match="unknown mode 'warp'"):
        describe_mode("warp", "dragon")


def test_an_empty_mode_in_mode_dragon_describes_with_fsd(drafter):  # noqa: F811
    drafter.config = replace(drafter.config, mode="dragon")
    FakeEdgeDecoder.release.set()
    response = run(drafter.describe.on_request(Describe.Request(prompt="what is ahead?"), Describe.Response()))
    assert response.success and response.stats.mode == "FSD", response.message
    response = run(drafter.describe.on_request(Describe.Request(prompt="what is ahead?", mode="sd"),
                                               Describe.Response()))
    assert response.success and response.stats.mode == "SD", response.message
    response = run(drafter.describe.on_request(Describe.Request(prompt="what is ahead?", mode="dragon"),
                                               Describe.Response()))
    assert not response.success and "answers questions on instruction" in response.message
    assert [call[0] for call in FakeEdgeDecoder.calls] == ["fsd", "sd"]
