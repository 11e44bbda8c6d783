"""Every exact mode over ZeroMQ at the published widths and vocabularies (models/real_shapes.py): a
7B-width verifier (2 layers, V = 152,064, an exit at d/8) in a server process of its own and a 2B-width
drafter (2 layers, V = 151,936) here. Random weights: what is checked is that each greedy mode emits the
verifier's own greedy output (AR over the same server), at the real sizes of q, the LM heads and the
image tokens; and, sampled, that SD (the server pads the drafter's (γ, 151,936) q to 152,064) and DSSD
(the robot meets p_δ of 152,064 with its q of 151,936) draw the same tokens at the same seed.

Slow: each server builds ~7 GB of weights (about 40 s), the drafter 1.5 GB."""

from __future__ import annotations

import pytest

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.decoding.reference import DecodeConfig
from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.edge.modes import LOSSY_MODES, EdgeConfig, EdgeDecoder
from edge_spec_ros.edge.registry import MODES
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.models.prompt import decode_image, encode_image
from edge_spec_ros.spec.sampling import SamplingConfig

pytestmark = pytest.mark.slow

VERIFIER = ("--verifier", "qwen2-vl-7b-shape:layers=2", "--device", "cpu", "--dtype", "float32")
DRAFTER = "qwen2-vl-2b-shape:layers=2"
EXACT_MODES = tuple(m for m in MODES if m not in LOSSY_MODES)  # ar, sd, fsd, dssd, tkslt, lowpay, pico, pico-fsd


@pytest.fixture(scope="module")
def robot():
    pair = load_pair(DRAFTER, parts=("drafter",))
    assert pair.drafter.stack.vocab_size == 151_936
    return pair


def decode_all(start_server, robot, server_args: tuple[str, ...], modes: tuple[str, ...],
               config: DecodeConfig | None = None) -> dict:
    jpg = encode_image(synthetic_camera_image(seed=0))
    prompt = robot.prompt_encoder().encode("find the silver bottle", decode_image(jpg))
    config = config or DecodeConfig(max_new_tokens=6, gamma=3, stop_tokens=(robot.tokenizer.eos_token_id,))
    with start_server(*server_args) as endpoint:
        with VerifierClient(ClientConfig(endpoint=endpoint)) as client:
            with EdgeDecoder(client, robot.drafter, EdgeConfig(decode=config, threads=2)) as decoder:
                return {mode: decoder.decode(mode, prompt, jpg) for mode in modes}


def assert_the_verifiers_own(results: dict) -> None:
    own = results["ar"].tokens  # every token from the server verifier's final exit
    assert len(own) == 6
    for mode, result in results.items():
        assert result.tokens == own, mode
        assert result.stats.rounds >= 1 and result.stats.bytes_down > 0, mode


def test_greedy_modes_equal_the_verifiers_own_output_at_real_widths(start_server, robot):
    assert_the_verifiers_own(decode_all(start_server, robot, VERIFIER, EXACT_MODES))


def test_a_batching_verifier_at_real_widths(start_server, robot):
    assert_the_verifiers_own(decode_all(start_server, robot, (*VERIFIER, "--batch"), ("ar", "sd", "fsd")))


def test_sampled_sd_and_dssd_across_the_two_vocabularies(start_server, robot):
    """T = 1, seeded: the drafter's q (151,936 columns) meets the verifier's p (152,064) on the server (SD)
    and on the robot (DSSD's resample); both draw the same tokens. The ids only the verifier has end the
    decode (the drafter has no row to read them back)."""
    stops = (robot.tokenizer.eos_token_id, *range(151_936, 152_064))
    config = DecodeConfig(max_new_tokens=6, gamma=3, sampling=SamplingConfig(1.0), seed=5, stop_tokens=stops)
    results = decode_all(start_server, robot, VERIFIER, ("sd", "dssd"), config)
    assert results["sd"].tokens == results["dssd"].tokens and len(results["sd"].tokens) >= 1
    assert results["dssd"].stats.resamples > 0  # the robot resampled from p_δ over 152,064 ids
