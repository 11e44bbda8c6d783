"""DescribeService's rules without models or a verifier: it refuses while a decision decodes, a
decision's decode waits while a Describe decodes, the answer comes from a worker thread without
blocking the caller, and its sessions are numbered apart from the decisions'. (Through the whole stack:
test_navigate.py.)"""

from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest
import rclpy

from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.decoding.reference import DecodeResult
from edge_spec_ros.edge.modes import EdgeConfig
from edge_spec_ros.nodes import describe_service
from edge_spec_ros.nodes.describe_service import BUSY, FIRST_SESSION, DescribeService, ExclusiveDecoder
from edge_spec_ros.nodes.drafter_node import DrafterNodeConfig
from edge_spec_ros.srv import Describe


class FakeEdgeDecoder:
    """Stands in for EdgeDecoder: records its arguments, blocks until ``release`` is set."""

    release = threading.Event()
    calls: list = []

    def __init__(self, client, drafter, config) -> None:
        self.client, self.config = client, config

    def decode(self, mode, prompt, image):
        FakeEdgeDecoder.calls.append((mode, prompt, self.config.decode.max_new_tokens, self.client.next_decision))
        assert FakeEdgeDecoder.release.wait(10)
        stats = DecodeStats(mode.upper(), tokens=2, rounds=1)
        return DecodeResult([5, 6], stats)


class DecisionDecoder:
    """The drafter's own decoder (the decision cycle's), inside ExclusiveDecoder."""

    def __init__(self) -> None:
        self.config = EdgeConfig()
        self.drafter = object()
        self.decoded = threading.Event()

    def decode(self, mode, prompt, image):
        self.decoded.set()
        return "decided"


@pytest.fixture
def drafter(monkeypatch):
    monkeypatch.setattr(describe_service, "EdgeDecoder", FakeEdgeDecoder)
    FakeEdgeDecoder.release.clear()
    FakeEdgeDecoder.calls.clear()
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("drafter", context=context)
    node.config = DrafterNodeConfig()
    node.encoder = types.SimpleNamespace(encode=lambda text, image: ("prompt", text, image.shape),
                                         decode=lambda tokens: f"text of {tokens}")
    rgb = np.full((48, 64, 3), 128, np.uint8)
    frame = types.SimpleNamespace(rgb=rgb, stamp_ns=12 * 10**9 + 34)
    node.images = types.SimpleNamespace(latest=lambda warn=True: frame, topic="/camera/image_raw",
                                        expected_type="sensor_msgs/msg/Image",
                                        config=types.SimpleNamespace(image_max_age_s=1.0))
    node.decoder = ExclusiveDecoder(DecisionDecoder())
    node.describe = DescribeService(node)
    yield node
    FakeEdgeDecoder.release.set()
    node.destroy_node()
    rclpy.shutdown(context=context)


def run(coro, timeout_s: float = 10.0):
    """Drive the service coroutine as the executor does (resume until it returns)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        assert time.monotonic() < deadline, "the coroutine did not finish"
        time.sleep(0.01)


def test_refused_while_a_decision_decodes(drafter):
    with drafter.decoder.lock:  # the decision thread is decoding
        response = run(drafter.describe.on_request(Describe.Request(prompt="what is ahead?"), Describe.Response()))
    assert not response.success and response.message == BUSY
    assert not FakeEdgeDecoder.calls


def test_a_decision_waits_for_a_describe_and_the_answer_comes_from_a_worker(drafter):
    coro = drafter.describe.on_request(Describe.Request(prompt="what is ahead?", max_new_tokens=7), Describe.Response())
    assert coro.send(None) is None  # suspended: the decode runs on the worker thread, the executor goes on
    decision = threading.Thread(target=drafter.decoder.decode, args=("fsd", "p", b""))
    decision.start()
    time.sleep(0.3)
    assert not drafter.decoder.inner.decoded.is_set()  # waits for the Describe's decode
    FakeEdgeDecoder.release.set()
    response = run(coro)
    decision.join(5)
    assert drafter.decoder.inner.decoded.is_set()
    assert response.success and response.text == "text of [5, 6]", response.message
    assert response.stats.mode == "FSD" and response.stats.decision == FIRST_SESSION
    assert (response.image_stamp.sec, response.image_stamp.nanosec) == (12, 34)
    (mode, prompt, budget, session), = FakeEdgeDecoder.calls
    assert (mode, budget, session) == ("fsd", 7, FIRST_SESSION)
    assert prompt[1] == "what is ahead?" and prompt[2] == (48, 64, 3)
    assert drafter.decoder.lock.acquire(blocking=False)  # released
    drafter.decoder.lock.release()


def test_no_frame_and_a_failing_decode_are_answers(drafter, monkeypatch):
    drafter.images.latest = lambda warn=True: None
    response = run(drafter.describe.on_request(Describe.Request(prompt="x"), Describe.Response()))
    assert not response.success and "no fresh frame on /camera/image_raw" in response.message

    def broken(self, mode, prompt, image):
        raise RuntimeError("the drafter broke")

    monkeypatch.setattr(FakeEdgeDecoder, "decode", broken)
    image = describe_service.Describe.Request().image
    image.height, image.width, image.encoding, image.step = 2, 2, "rgb8", 6
    image.data = bytes(12)
    response = run(drafter.describe.on_request(Describe.Request(prompt="x", image=image), Describe.Response()))
    assert not response.success and response.message == "RuntimeError: the drafter broke"
    assert drafter.decoder.lock.acquire(blocking=False)  # released after a failure too
    drafter.decoder.lock.release()


def test_the_drafter_raises_its_priority_while_a_motion_runs():
    """NavAction STARTED: what the drafter opens next goes at ``motion_priority``; DONE or CANCELLED: 0."""
    from edge_spec_ros.msg import NavAction as NavActionMsg
    from edge_spec_ros.nodes.drafter_node import DrafterNode

    node = types.SimpleNamespace(config=DrafterNodeConfig(motion_priority=2), link=types.SimpleNamespace(priority=0),
                                 _cv=threading.Condition(), _started=set(), _ends={})
    seen = []
    for status in (NavActionMsg.STARTED, NavActionMsg.DONE, NavActionMsg.STARTED, NavActionMsg.CANCELLED):
        msg = NavActionMsg()
        msg.decision, msg.status = 7, status
        DrafterNode.on_action(node, msg)
        seen.append(node.link.priority)
    assert seen == [2, 0, 2, 0]
    assert node._started == {7} and node._ends[7].status == NavActionMsg.CANCELLED
