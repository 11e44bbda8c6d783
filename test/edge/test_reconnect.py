"""Reconnect: the verifier is killed (SIGKILL) mid-decision and restarted on the same endpoint; the
robot's decoder opens the decision again by itself and finishes it with exactly the verifier's own
greedy output, in every mode. A decoder allowed no retries fails instead (the negative control)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.server_process import verifier_server
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.edge.client import ClientConfig, VerifierClient, VerifierError
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.edge.registry import MODES
from edge_spec_ros.models.embedded import embedded_pair
from edge_spec_ros.models.prompt import decode_image, encode_image

TQ_S = "0.3"  # emulated verification time: a decision lasts long enough to be cut in the middle
KILL_AFTER_S = 0.8
REPLY_TIMEOUT_S = 3.0
DECODE_TIMEOUT_S = 120.0
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def decode_across_a_restart(pair, decision, mode: str, retries: int):
    """Decode in a thread; SIGKILL the verifier mid-decision and start a new one on the same port."""
    prompt, jpg, config, _ = decision
    port = free_port()
    serve = ("--bind", f"tcp://127.0.0.1:{port}", "--emulate-tq-s", TQ_S)
    outcome: dict = {}
    with VerifierClient(ClientConfig(endpoint=f"tcp://127.0.0.1:{port}", reply_timeout_s=REPLY_TIMEOUT_S)) as client:
        decoder = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config, threads=1, reconnect_retries=retries))

        def run():
            try:
                outcome["result"] = decoder.decode(mode, prompt, jpg)
            except VerifierError as exc:
                outcome["error"] = exc

        with verifier_server(*serve) as first:
            worker = threading.Thread(target=run, daemon=True)
            worker.start()
            time.sleep(KILL_AFTER_S)
            first.proc.kill()  # SIGKILL: no goodbye to anyone
            first.proc.wait()
        assert worker.is_alive(), f"{mode}: the decision ended before the verifier was killed"
        with verifier_server(*serve):
            worker.join(DECODE_TIMEOUT_S)
    assert not worker.is_alive()
    return outcome


@pytest.mark.parametrize("mode", FAST_MODES)
def test_a_decision_survives_a_verifier_restart(pair, decision, mode):
    outcome = decode_across_a_restart(pair, decision, mode, retries=2)
    assert "result" in outcome, outcome.get("error")
    assert outcome["result"].tokens == decision[3]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [m for m in MODES if m not in FAST_MODES])
def test_every_mode_survives_a_verifier_restart(pair, decision, mode):
    test_a_decision_survives_a_verifier_restart(pair, decision, mode)


def test_without_retries_the_restart_is_an_error(pair, decision):
    outcome = decode_across_a_restart(pair, decision, "sd", retries=0)
    assert "error" in outcome and "result" not in outcome
