"""Fixtures for node tests: a ROS 2 harness in the test process (see rosharness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rosharness import RosHarness


@pytest.fixture(scope="module")
def ros() -> Iterator[RosHarness]:
    harness = RosHarness()
    yield harness
    harness.close()
