"""Priorities across robots, against a real verifier process: two robots' rounds wait while a long
cloud-only generation holds the only worker; the robot in motion (``ClientConfig.priority`` 1) is
served first although the standing robot's round reached the server first."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

from edge_spec_ros import warm_start
from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.server_process import verifier_server
from edge_spec_ros.wire.messages import DraftBlock, ExitResult, Generate, Open, Tokens

EMULATED_TQ_S = 0.5  # each forward (a generation's token, a round): both rounds arrive within one
LONG_GENERATION = 200  # tokens: the worker is busy with it throughout, unless closed
REPLY_S = 30.0
REFUSAL_S = 120.0  # the command loads the verifier before it checks its configuration


@pytest.fixture(scope="module")
def server():
    with verifier_server("--threads", "1", "--emulate-tq-s", str(EMULATED_TQ_S)) as s:
        yield s


@pytest.mark.slow  # the two drafts must both wait behind the hog's step: on a loaded machine a worker can free
# up between the two sends and serve the first alone (seen once in a loaded full run); the ordering
# itself is covered without timing by test/cloud/test_fairness.py's FairQueue tests
def test_a_robot_in_motion_is_served_before_a_standing_one(server, text_prompt):
    ids = text_prompt.input_ids.numpy().astype(np.int32)
    config = ClientConfig(endpoint=server.endpoint, open_timeout_s=REPLY_S, reply_timeout_s=REPLY_S)
    with VerifierClient(config) as hog, VerifierClient(config) as still, \
            VerifierClient(ClientConfig(**{**config.__dict__, "priority": 1})) as moving:
        still_sid, _ = still.open(Open(input_ids=ids, want_exits=False))
        moving_sid, _ = moving.open(Open(input_ids=ids, want_exits=False))
        hog_sid, _ = hog.open(Open(input_ids=ids))
        hog.send(hog_sid, Generate(max_new_tokens=LONG_GENERATION))
        assert isinstance(hog.receive(hog_sid), Tokens)
        assert isinstance(hog.receive(hog_sid), Tokens)  # a token's forward has just begun
        draft = DraftBlock(round=0, position=len(ids), tokens=np.array([20, 21], np.int32))
        still.send(still_sid, draft)  # first
        moving.send(moving_sid, draft)
        arrived, finals = {}, {}

        def wait(name: str, client: VerifierClient, sid: bytes) -> None:
            finals[name] = client.receive(sid)
            arrived[name] = time.monotonic()

        waiters = [threading.Thread(target=wait, args=args) for args in
                   (("still", still, still_sid), ("moving", moving, moving_sid))]
        for t in waiters:
            t.start()
        for t in waiters:
            t.join(2 * REPLY_S)
        assert all(isinstance(f, ExitResult) and f.is_final for f in finals.values()) and len(finals) == 2, finals
        hog.end(hog_sid)
        still.end(still_sid)
        moving.end(moving_sid)
    assert arrived["moving"] < arrived["still"], arrived


def test_serve_passes_its_priority_lead_to_the_server():
    """``serve --priority-lead-s`` is ServerConfig.priority_lead_s: a negative lead is refused by the field's
    range before anything loads."""
    done = warm_start.run([sys.executable, "-m", "edge_spec_ros.cli", "serve", "--bind", "tcp://127.0.0.1:*",
                           "--device", "cpu", "--priority-lead-s", "-1"], capture_output=True, text=True,
                          timeout=REFUSAL_S)
    assert done.returncode == 2 and "--priority-lead-s: -1.0 is outside (>= 0)" in done.stderr
