"""AR, SD and FSD over ZeroMQ at the published widths and vocabularies (models/real_shapes.py): a 7B-width
verifier (2 layers, V = 152,064, an exit at d/8) in a server process of its own and a 2B-width drafter
(2 layers, V = 151,936) here. Random weights: what is checked is that greedy SD and FSD emit the verifier's
own greedy output (AR over the same server), at the real sizes of q, the LM heads and the image tokens.

Slow: the server builds ~7 GB of weights (about a minute), the drafter 1.5 GB."""

from __future__ import annotations

import pytest

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.decoding.reference import DecodeConfig
from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.models.prompt import decode_image, encode_image

pytestmark = pytest.mark.slow

VERIFIER = "qwen2-vl-7b-shape:layers=2"
DRAFTER = "qwen2-vl-2b-shape:layers=2"


def test_greedy_sd_and_fsd_equal_the_verifiers_own_output_at_real_widths(start_server):
    robot = load_pair(DRAFTER, parts=("drafter",))
    assert robot.drafter.stack.vocab_size == 151_936
    jpg = encode_image(synthetic_camera_image(seed=0))
    prompt = robot.prompt_encoder().encode("find the silver bottle", decode_image(jpg))
    config = DecodeConfig(max_new_tokens=6, gamma=3, stop_tokens=(robot.tokenizer.eos_token_id,))
    with start_server("--verifier", VERIFIER, "--device", "cpu", "--dtype", "float32") as endpoint:
        with VerifierClient(ClientConfig(endpoint=endpoint)) as client:
            with EdgeDecoder(client, robot.drafter, EdgeConfig(decode=config, threads=2)) as decoder:
                results = {mode: decoder.decode(mode, prompt, jpg) for mode in ("ar", "sd", "fsd")}
    own = results["ar"].tokens  # every token from the server verifier's final exit
    assert len(own) == config.max_new_tokens
    for mode in ("sd", "fsd"):
        assert results[mode].tokens == own, mode
        assert results[mode].stats.rounds >= 1 and results[mode].stats.bytes_up > 0, mode
