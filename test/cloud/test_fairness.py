"""Sharing the verifier, against a real server process: a long cloud-only generation gives the worker
back after every token, so another robot's decision is served meanwhile; Close and session expiry
cancel a session's queued and running work."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from edge_spec_ros.server_process import verifier_server
from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.wire.messages import Close, DraftBlock, ExitResult, Generate, Open, Stats, StatsReply, Tokens

EMULATED_TQ_S = 0.05  # every forward: long generations take long on any machine
LONG_GENERATION = 1000  # tokens: 50 s at the emulated pace, unless cancelled
OTHER_BOUND_S = 2.0  # another robot's open + round while the long generation runs (safety bound)
CANCEL_BOUND_S = 2.0  # after Close, the long generation stops within this
REPLY_S = 10.0


@pytest.fixture(scope="module")
def server():
    with verifier_server("--threads", "1", "--emulate-tq-s", str(EMULATED_TQ_S), "--session-timeout", "3") as s:
        yield s


def stats(client: VerifierClient) -> dict:
    sid = bytes(16)
    client.register(sid)
    client.send(sid, Stats())
    reply = client.receive(sid)
    assert isinstance(reply, StatsReply)
    return json.loads(reply.counters)


def start_long_generation(client: VerifierClient, ids: np.ndarray) -> bytes:
    sid, _ = client.open(Open(input_ids=ids))
    client.send(sid, Generate(max_new_tokens=LONG_GENERATION))
    assert isinstance(client.receive(sid), Tokens)  # it runs
    return sid


def test_close_cancels_a_long_generation_and_others_are_served_meanwhile(server, text_prompt):
    ids = text_prompt.input_ids.numpy().astype(np.int32)
    config = ClientConfig(endpoint=server.endpoint, open_timeout_s=REPLY_S, reply_timeout_s=REPLY_S)
    with VerifierClient(config) as hog, VerifierClient(config) as other:
        sid = start_long_generation(hog, ids)
        # another robot's whole round, while the generation holds the only worker between tokens
        t0 = time.monotonic()
        osid, _ = other.open(Open(input_ids=ids, want_exits=False))
        other.send(osid, DraftBlock(round=0, position=len(ids), tokens=np.array([20, 21], np.int32)))
        final = other.receive(osid)
        other_s = time.monotonic() - t0
        assert isinstance(final, ExitResult) and final.is_final
        other.end(osid)
        # Close: the generation stops at its next token
        before = stats(other)
        hog.send(sid, Close())
        t0 = time.monotonic()
        while stats(other).get("jobs_cancelled", 0) <= before.get("jobs_cancelled", 0):
            assert time.monotonic() - t0 < CANCEL_BOUND_S
            time.sleep(0.05)
        cancel_s = time.monotonic() - t0
    print(f"another robot's round during a {LONG_GENERATION}-token generation: {other_s * 1e3:.0f} ms; "
          f"generation cancelled {cancel_s * 1e3:.0f} ms after Close")
    assert other_s < OTHER_BOUND_S


def test_expiry_cancels_running_work(server, text_prompt):
    """A session whose robot went silent mid-generation expires (--session-timeout 3) and its work stops."""
    ids = text_prompt.input_ids.numpy().astype(np.int32)
    config = ClientConfig(endpoint=server.endpoint, open_timeout_s=REPLY_S, reply_timeout_s=REPLY_S)
    with VerifierClient(config) as client:
        before = stats(client)
        start_long_generation(client, ids)
        t0 = time.monotonic()
        while True:
            now = stats(client)
            if now.get("sessions_expired", 0) > before.get("sessions_expired", 0) \
                    and now.get("jobs_cancelled", 0) > before.get("jobs_cancelled", 0):
                break
            assert time.monotonic() - t0 < 3 + CANCEL_BOUND_S + 1.0
            time.sleep(0.1)


def _queued(name: str):
    from edge_spec_ros.cloud.server import _Session

    return _Session(name.encode(), bytes(16), b"c", None, None, "fifo", 0.0, None, None)


def test_fair_queue_serves_a_returning_short_round_first_and_bounds_its_lead():
    """Start-time fair queuing on compute time: a session back from idle goes ahead of a long job that
    keeps the worker busy, by at most the credit; beyond it they alternate (no starvation)."""
    from edge_spec_ros.cloud.server import FairQueue

    queue = FairQueue(credit_s=0.1)
    hog, robot = _queued("hog"), _queued("robot")
    queue.push(hog, fresh=True)
    for _ in range(50):  # the hog alone: 50 steps of 10 ms
        assert queue.pop() is hog
        queue.charge(hog, 0.01)
        queue.push(hog, fresh=False)
    queue.push(robot, fresh=True)  # the robot's round arrives
    served = []
    for _ in range(40):  # both busy from now on: the robot runs 30 ms jobs
        s = queue.pop()
        served.append(s.identity.decode())
        queue.charge(s, 0.01 if s is hog else 0.03)
        queue.push(s, fresh=False)
    assert served[0] == "robot"
    robot_time = 0.03 * served.count("robot")
    hog_time = 0.01 * served.count("hog")
    # the robot's lead is bounded by the credit and one job; then the compute is shared evenly
    first_hog = served.index("hog")
    assert 0.03 * first_hog <= 0.1 + 0.03
    assert abs(robot_time - hog_time) <= 0.1 + 0.03 + 0.01


def test_fair_queue_weights_share_the_compute():
    from edge_spec_ros.cloud.server import FairQueue

    queue = FairQueue(credit_s=0.0)
    a, b = _queued("a"), _queued("b")
    b.weight = 3.0
    queue.push(a, fresh=True)
    queue.push(b, fresh=True)
    used = {"a": 0.0, "b": 0.0}
    for _ in range(400):
        s = queue.pop()
        used[s.identity.decode()] += 0.01
        queue.charge(s, 0.01)
        queue.push(s, fresh=False)
    assert abs(used["b"] / used["a"] - 3.0) < 0.1
