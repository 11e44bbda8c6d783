"""Reconnect: the verifier is killed (SIGKILL) mid-decision and restarted on the same endpoint. The
client's heartbeat knows the link dead at once (the connection closed), so the decision in progress
fails with VerifierLost instead of waiting out a reply timeout, and it is not opened again while the
link is dead; once the restarted verifier answers the heartbeat the link is alive by itself and the
next decision is exactly the verifier's own greedy output, in every mode. (A decision whose session
a live verifier no longer knows, UNKNOWN_SESSION, is still opened again: test/cloud/test_replicas.py,
a replica lost behind a live front.)"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.server_process import verifier_server
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.edge.client import ClientConfig, VerifierClient, VerifierLost
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.edge.registry import MODES
from edge_spec_ros.models.embedded import embedded_pair
from edge_spec_ros.models.prompt import decode_image, encode_image
from waiting import free_port, wait_until

TQ_S = "0.3"  # emulated verification time: a decision lasts long enough to be cut in the middle
KILL_AFTER_S = 0.8
REPLY_TIMEOUT_S = 30.0  # far beyond how long the loss takes to be known
LOST_WITHIN_S = 5.0  # a generous functional bound (the heartbeat's: at once on a closed connection)
UP_S = 60.0
FAST_MODES = ("ar", "fsd", "dssd")


@pytest.fixture(scope="module")
def pair():
    return embedded_pair()


@pytest.fixture(scope="module")
def decision(pair):
    """(prompt, JPEG, the verifier's own greedy tokens) of one camera frame."""
    jpg = encode_image(synthetic_camera_image(), quality=90)
    prompt = pair.prompt_encoder().encode(
        "find the silver bottle", decode_image(jpg))
    config = DecodeConfig(max_new_tokens=24, gamma=3, stop_tokens=(pair.tokenizer.eos_token_id,))
    return prompt, jpg, config, autoregressive(pair.verifier, prompt, config).tokens


@pytest.mark.parametrize("mode", FAST_MODES)
def test_a_decision_cut_by_a_sigkill_fails_at_once_and_the_next_one_after_a_restart_is_exact(
        pair, decision, mode, caplog):
    prompt, jpg, config, expected = decision
    port = free_port()
    serve = ("--bind", f"tcp://127.0.0.1:{port}", "--emulate-tq-s", TQ_S)
    outcome: dict = {}
    with VerifierClient(ClientConfig(endpoint=f"tcp://127.0.0.1:{port}", open_timeout_s=REPLY_TIMEOUT_S,
                                     reply_timeout_s=REPLY_TIMEOUT_S)) as client:
        decoder = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config, threads=1, reconnect_retries=2))

        def run():
            try:
                outcome["result"] = decoder.decode(mode, prompt, jpg)
            except Exception as exc:  # noqa: BLE001 - the test looks at it
                outcome["error"] = exc
            outcome["ended"] = time.monotonic()

        with caplog.at_level(logging.WARNING, logger="edge_spec_ros.edge.modes"):
            with verifier_server(*serve) as first:
                wait_until(lambda: client.link_state().alive, UP_S, "the link to come alive")
                worker = threading.Thread(target=run, daemon=True)
                worker.start()
                time.sleep(KILL_AFTER_S)
                assert worker.is_alive(), f"{mode}: the decision ended before the verifier was killed"
                killed = time.monotonic()
                first.proc.kill()  # SIGKILL: no goodbye to anyone
                first.proc.wait()
                worker.join(LOST_WITHIN_S + 5)
                assert not worker.is_alive()
            assert isinstance(outcome.get("error"), VerifierLost), outcome
            assert outcome["ended"] - killed < LOST_WITHIN_S
            assert "opening it again" not in caplog.text  # not retried against a dead link
            with verifier_server(*serve):
                wait_until(lambda: client.link_state().alive, UP_S, "the link to recover by itself")
                assert decoder.decode(mode, prompt, jpg).tokens == expected
        decoder.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", [m for m in MODES if m not in FAST_MODES])
def test_every_mode_survives_a_verifier_restart(pair, decision, mode, caplog):
    test_a_decision_cut_by_a_sigkill_fails_at_once_and_the_next_one_after_a_restart_is_exact(
        pair, decision, mode, caplog)
