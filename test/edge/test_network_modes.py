"""AR, SD and FSD against a real verifier process on 127.0.0.1.

Greedy: every mode's output equals the target's own greedy output token for token.
Sampled: FSD equals SD at the same seed (and both equal the in-process speculative reference).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.embedded import embedded_pair
from edge_spec_ros.models.prompt import decode_image, encode_image
from edge_spec_ros.spec.sampling import SamplingConfig
from edge_spec_ros.wire.emulator import LinkShape


@pytest.fixture(scope="module")
def pair():
    return embedded_pair()  # the same weights the server process builds


def pair_prompt(pair, instruction, image):
    return pair.prompt_encoder().encode(instruction, image)


@pytest.fixture(scope="module")
def images():
    """(jpeg bytes, what the verifier decodes from them) for a few camera frames."""
    frames = [synthetic_camera_image(seed=s) for s in range(2)]
    frames.append((np.random.default_rng(5).random((112, 140, 3)) * 255).astype(np.uint8))
    return [(jpg, decode_image(jpg)) for jpg in (encode_image(f) for f in frames)]


def run_modes(endpoint, pair, prompt, jpg, decode: DecodeConfig, **edge) -> dict:
    with VerifierClient(ClientConfig(endpoint=endpoint)) as client:
        decoder = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=decode, **edge))
        return {mode: decoder.decode(mode, prompt, jpg) for mode in ("ar", "sd", "fsd")}


def test_greedy_over_the_network_equals_target_greedy(server_endpoint, pair, images):
    eos = pair.tokenizer.eos_token_id
    for (jpg, seen), instruction in zip(images, ("find the silver bottle", "go to the red chair", "stop")):
        prompt = pair_prompt(pair, instruction, seen)
        config = DecodeConfig(max_new_tokens=32, gamma=4, stop_tokens=(eos,))
        target = autoregressive(pair.verifier, prompt, config)
        results = run_modes(server_endpoint, pair, prompt, jpg, config, threads=3)
        for mode, result in results.items():
            assert result.tokens == target.tokens, mode
            s = result.stats  # the first verdict's tokens, and the decode after it
            assert 1 <= s.first_tokens <= config.gamma + 1 and s.steady_tokens == s.tokens - s.first_tokens, mode
            assert s.steady_rounds == s.rounds - 1, mode
            assert 0 < s.steady_s < s.wall_s and math.isclose(s.steady_s, s.wall_s - s.ttft_s), mode
        fsd = results["fsd"].stats
        assert fsd.cache_hits + fsd.cache_misses == fsd.rounds - 1  # every round but the last needed a draft
        assert results["sd"].stats.rounds == fsd.rounds and fsd.bytes_up > 0 and fsd.bytes_down > 0


@pytest.mark.parametrize("policies", [("priority", "priority"), ("fifo", "random")])
def test_sampled_fsd_equals_sd_at_the_same_seed(server_endpoint, pair, images, policies):
    jpg, seen = images[0]
    prompt = pair_prompt(pair, "find the silver bottle", seen)
    for seed in (0, 1):
        config = DecodeConfig(max_new_tokens=32, gamma=3, sampling=SamplingConfig(0.9), seed=seed,
                              stop_tokens=(pair.tokenizer.eos_token_id,))
        reference = speculative(pair.drafter, pair.verifier, prompt, config)
        results = run_modes(server_endpoint, pair, prompt, jpg, config, threads=2,
                            client_policy=policies[0], server_policy=policies[1])
        assert results["sd"].tokens == reference.tokens
        assert results["fsd"].tokens == results["sd"].tokens
        assert results["fsd"].stats.accepted == results["sd"].stats.accepted


def test_emulated_link_delays_rounds_but_not_tokens(server_endpoint, pair, images):
    """A shaped link (delay, jitter, bandwidth, loss) changes timing only: every round whose round trip
    measures the link (not the first block's, counted from when both ``Opened`` and the block were
    there, which its verdict follows by about a verification: ``edge.first_block.Opening``) takes at
    least two one-way delays beyond the server's T_q."""
    jpg, seen = images[1]
    prompt = pair_prompt(pair, "go to the red chair", seen)
    config = DecodeConfig(max_new_tokens=12, gamma=4, stop_tokens=(pair.tokenizer.eos_token_id,))
    target = autoregressive(pair.verifier, prompt, config)
    shape = LinkShape(delay_s=0.02, jitter_s=0.005, bandwidth_bps=20e6, loss=0.05)
    with VerifierClient(ClientConfig(endpoint=server_endpoint, uplink=shape, downlink=shape)) as client:
        result = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config)).decode("sd", prompt, jpg)
    assert result.tokens == target.tokens
    overheads = result.stats.round_overheads_s  # round trip less T_q, per round that measures the link
    assert result.stats.rounds == len(overheads) + 1 and min(overheads) >= 0.04, result.stats


def test_concurrent_robots(server_endpoint, pair, images):
    """Several robots decode at once against one server; each gets the target's own greedy output."""
    import threading

    eos = pair.tokenizer.eos_token_id
    config = DecodeConfig(max_new_tokens=16, gamma=3, stop_tokens=(eos,))
    jobs = [(images[i % len(images)], mode) for i, mode in enumerate(("sd", "fsd", "ar", "fsd"))]
    prompts = [pair_prompt(pair, "find the silver bottle", seen) for (_, seen), _ in jobs]
    expected = [autoregressive(pair.verifier, p, config).tokens for p in prompts]
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def robot(i: int) -> None:
        try:
            with VerifierClient(ClientConfig(endpoint=server_endpoint)) as client:
                decoder = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config, threads=2))
                results[i] = decoder.decode(jobs[i][1], prompts[i], jobs[i][0][0]).tokens
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=robot, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert [results[i] for i in range(len(jobs))] == expected


EXACT_PROTOCOLS = ("dssd", "tkslt", "lowpay", "pico", "pico-fsd")


def test_protocols_greedy_equal_target_greedy(server_endpoint, pair, images):
    """DSSD, TK-SLT, the low-payload mode (and the lossy one, greedy) reproduce the target's greedy output."""
    jpg, seen = images[2]
    prompt = pair_prompt(pair, "stop at the blue box", seen)
    config = DecodeConfig(max_new_tokens=24, gamma=4, stop_tokens=(pair.tokenizer.eos_token_id,))
    target = autoregressive(pair.verifier, prompt, config).tokens
    with VerifierClient(ClientConfig(endpoint=server_endpoint)) as client:
        decoder = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config))
        for mode in (*EXACT_PROTOCOLS, "dssd-topk-lossy"):
            assert decoder.decode(mode, prompt, jpg).tokens == target, mode


def test_sampled_protocols_equal_their_in_process_reference(server_endpoint, pair, images):
    """Sampled, each exact protocol reproduces the in-process speculative decoder with the same q
    (full for DSSD, top-K for TK-SLT and the low-payload mode) over the same blocks (PicoSpec's are cut
    short where a verdict came first) draw for draw; DSSD resamples on the robot; the uplink shrinks as
    promised; the lossy mode reports its TV error."""
    jpg, seen = images[0]
    prompt = pair_prompt(pair, "find the silver bottle", seen)
    config = DecodeConfig(max_new_tokens=32, gamma=4, sampling=SamplingConfig(0.9), seed=8,
                          stop_tokens=(pair.tokenizer.eos_token_id,))
    edge = EdgeConfig(decode=config, tkslt_k=20, lowpay_k=4)
    with VerifierClient(ClientConfig(endpoint=server_endpoint)) as client:
        decoder = EdgeDecoder(client, pair.drafter, edge)
        results = {m: decoder.decode(m, prompt, jpg) for m in ("sd", *EXACT_PROTOCOLS, "dssd-topk-lossy")}
    for mode in ("sd", *EXACT_PROTOCOLS):  # over each mode's own blocks (pico's: cut short at its verdicts)
        reference = speculative(pair.drafter, pair.verifier, prompt, config, edge.draft_distribution(mode),
                                gammas=results[mode].stats.block_gammas)
        assert results[mode].tokens == reference.tokens, mode
    assert results["dssd"].tokens == results["sd"].tokens  # same q, verification split differently
    up = {m: r.stats.bytes_up_per_round for m, r in results.items()}
    assert up["lowpay"] < up["tkslt"] < up["sd"] and up["dssd"] < up["tkslt"]
    assert results["dssd"].stats.resamples > 0 and results["dssd"].stats.mean_tv == 0.0
    lossy = results["dssd-topk-lossy"].stats
    assert lossy.resamples > 0 and 0.0 < lossy.mean_tv < 1.0


def test_adaptive_draft_length_and_cloud_fallback_stay_exact(server_endpoint, pair, images):
    """ODLD-chosen γ per round and AS²'s switch to cloud-only decoding change the schedule, never the
    greedy output; with priors under which speculation cannot pay, AS² decodes in the cloud at once."""
    jpg, seen = images[1]
    prompt = pair_prompt(pair, "go to the red chair", seen)
    config = DecodeConfig(max_new_tokens=20, gamma=4, stop_tokens=(pair.tokenizer.eos_token_id,))
    target = autoregressive(pair.verifier, prompt, config).tokens
    with VerifierClient(ClientConfig(endpoint=server_endpoint)) as client:
        adaptive = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config, adaptive_gamma=True, alpha_prior=0.9,
                                                                b_prior=0.01, c_prior=0.01, threads=2))
        for mode in ("sd", "fsd", *EXACT_PROTOCOLS):
            assert adaptive.decode(mode, prompt, jpg).tokens == target, mode
        hopeless = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config, adaptive_gamma=True, alpha_prior=0.05,
                                                                b_prior=0.5, c_prior=0.5))
        result = hopeless.decode("tkslt", prompt, jpg)
    assert result.tokens == target
    assert result.stats.cloud_fallback == 1 and result.stats.drafted == 0


def test_pico_overlapped_rounds(start_server, pair, images):
    """PicoSpec's chained blocks: with a drafter as good as the target (all its layers) every block is
    fully accepted and guessed right, so blocks are sent before their predecessor's verdict (some
    two rounds before) and verified at once (hits); sampled hot (T = 3, the trained pair is peaked)
    some guesses miss and the cloud answers stale. Either way the output is exact: greedy equals the
    target's own, sampled equals speculative sampling's with the same seed."""
    from edge_spec_ros.models.tiny import truncated_copy

    jpg, seen = images[0]
    prompt = pair_prompt(pair, "find the silver bottle", seen)
    perfect = Drafter(truncated_copy(pair.verifier.stack.model, pair.verifier.num_layers))
    greedy = DecodeConfig(max_new_tokens=24, gamma=3, stop_tokens=(pair.tokenizer.eos_token_id,))
    target = autoregressive(pair.verifier, prompt, greedy).tokens
    # an emulated T_q long enough for the next block to be drafted while this one is verified
    with start_server("--emulate-tq-s", "0.15") as endpoint, VerifierClient(ClientConfig(endpoint=endpoint)) as client:
        result = EdgeDecoder(client, perfect, EdgeConfig(decode=greedy)).decode("pico", prompt, jpg)
        assert result.tokens == target
        assert result.stats.cache_hits >= result.stats.rounds - 2 and result.stats.full_rounds == result.stats.rounds
        assert result.stats.after_next_held >= 1  # blocks drafted two rounds ahead held (Pipeline.depth 2)
        sampled = DecodeConfig(max_new_tokens=24, gamma=3, sampling=SamplingConfig(3.0), seed=5,
                               stop_tokens=(pair.tokenizer.eos_token_id,))
        result = EdgeDecoder(client, perfect, EdgeConfig(decode=sampled)).decode("pico", prompt, jpg)
        assert result.stats.cache_misses > 0 and len(result.tokens) > 0
        # sampled, the pipeline (stale blocks and separate rejection sampling included) emits exactly the
        # tokens of speculative sampling over the same blocks with the same seed: the draws are
        # position-indexed, so the distribution is the target's (test_protocol_distributions.py checks it
        # by chi-square)
        blocks = result.stats.block_gammas
        assert result.tokens == speculative(perfect, pair.verifier, prompt, sampled, gammas=blocks).tokens
        # with FSD pre-drafting inside the pipeline, the same exactness
        combined = EdgeDecoder(client, perfect, EdgeConfig(decode=greedy, threads=2))
        assert combined.decode("pico-fsd", prompt, jpg).tokens == target


def test_pico_branch_blocks_hold_and_leave_the_output_exact(start_server, pair):
    """Branch blocks (edge/pipeline.py): with the shipped drafter some rounds end in a verdict the
    drafter ranked among its likeliest, and the branch drafted for it is verified at once (it held);
    greedy pico and pico-fsd still give the target's own output, sampled pico-fsd still equals
    speculative sampling over the same blocks with the same seed, with one branch per round or three
    (pico-fsd); without branch blocks none holds (the control)."""
    from edge_spec_ros.bench.runner import bench_prompts

    eos = pair.tokenizer.eos_token_id
    prompts = [bench_prompts(pair.prompt_encoder(), 5)[i] for i in (0, 4)]  # decisions with such rounds
    greedy = DecodeConfig(max_new_tokens=40, gamma=4, stop_tokens=(eos,))
    sampled = DecodeConfig(max_new_tokens=40, gamma=4, sampling=SamplingConfig(1.0), seed=3, stop_tokens=(eos,))
    held: dict[tuple[str, bool, int], int] = {}
    # an emulated T_q long enough for the blocks to be drafted while the one before them is verified, on a
    # loaded machine too (the gate drafts no branch where the verdict is expected within the drafting)
    runs = [(1, greedy, ("pico", "pico-fsd")), (1, sampled, ("pico-fsd",)), (3, greedy, ("pico-fsd",)),
            (3, sampled, ("pico-fsd",)), (0, greedy, ("pico", "pico-fsd"))]  # 0: the control
    with start_server("--emulate-tq-s", "0.25") as endpoint, VerifierClient(ClientConfig(endpoint=endpoint)) as client:
        for branches, config, modes in runs:
            decoder = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config, threads=2,
                                                                   branch_blocks=branches))
            for prompt, jpg in prompts:
                target = autoregressive(pair.verifier, prompt, config).tokens if config is greedy else None
                for mode in modes:
                    result = decoder.decode(mode, prompt, jpg)
                    # sampled: speculative sampling's tokens over the same blocks (a block cut short
                    # when its verdict came first moves the bonus tokens) and the same seed
                    reference = target or speculative(pair.drafter, pair.verifier, prompt, config,
                                                      gammas=result.stats.block_gammas).tokens
                    assert result.tokens == reference, (mode, branches, config.sampling)
                    key = (mode, config is greedy, branches)
                    held[key] = held.get(key, 0) + result.stats.branches_held
    assert held[("pico", True, 1)] >= 1, held
    for branches in (1, 3):
        assert held[("pico-fsd", True, branches)] >= 1 and held[("pico-fsd", False, branches)] >= 1, held
    assert not any(n for (_, _, branches), n in held.items() if not branches), held
    with pytest.raises(ValueError, match="branch_blocks"):
        EdgeConfig(branch_blocks=-1)


def test_shortlisted_exit_heads_leave_fsd_exact(start_server, pair, images):
    """A verifier whose early-exit heads score only 64 of the shipped pair's ids (and the decision's own
    tokens): FSD and pico-fsd still give the target's greedy output, and sampled FSD still equals SD."""
    assert pair.verifier.stack.vocab_size > 64
    jpg, seen = images[1]
    prompt = pair_prompt(pair, "go to the red chair", seen)
    eos = pair.tokenizer.eos_token_id
    greedy = DecodeConfig(max_new_tokens=24, gamma=4, stop_tokens=(eos,))
    sampled = DecodeConfig(max_new_tokens=24, gamma=4, sampling=SamplingConfig(0.9), seed=3, stop_tokens=(eos,))
    target = autoregressive(pair.verifier, prompt, greedy).tokens
    with start_server("--exit-shortlist", "64") as endpoint, \
            VerifierClient(ClientConfig(endpoint=endpoint)) as client:
        decoder = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=greedy, threads=2))
        for mode in ("fsd", "pico-fsd"):
            assert decoder.decode(mode, prompt, jpg).tokens == target, mode
        decoder.config = EdgeConfig(decode=sampled, threads=2)
        assert decoder.decode("fsd", prompt, jpg).tokens == decoder.decode("sd", prompt, jpg).tokens


def test_the_first_block_rides_with_the_open_and_saves_a_round_trip(start_server, pair, images):
    """Over a link of 150 ms each way (emulated T_q 0.1 s): the first block drafted while the Open travels
    brings the first verdict about a round trip (2T_c) sooner than Open, Opened, then the first draft
    (the least of three decisions each after a warm-up: this machine's CPU is shared); the output is the
    target's own either way, in every speculative mode, with the server's batching on."""
    jpg, seen = images[0]
    prompt = pair_prompt(pair, "find the silver bottle", seen)
    config = DecodeConfig(max_new_tokens=16, gamma=3, stop_tokens=(pair.tokenizer.eos_token_id,))
    target = autoregressive(pair.verifier, prompt, config).tokens
    shape = LinkShape(delay_s=0.15)
    with start_server("--emulate-tq-s", "0.1", "--max-batch", "4") as endpoint, \
            VerifierClient(ClientConfig(endpoint=endpoint, uplink=shape, downlink=shape)) as client:
        decoder = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config, threads=2))
        for mode in ("sd", "fsd", "dssd", "pico"):  # the first one warms up
            assert decoder.decode(mode, prompt, jpg).tokens == target, mode
        ttft: dict[bool, float] = {}
        for _ in range(3):
            for first in (True, False):
                decoder.config = EdgeConfig(decode=config, threads=2, first_block=first)
                result = decoder.decode("sd", prompt, jpg)
                assert result.tokens == target, first
                ttft[first] = min(ttft.get(first, math.inf), result.stats.ttft_s)
    # a third of the round trip saved at least: under load the drafter's prefill and first block can outlast
    # the Open's way up and prefill (measured 0.13 s saved beside three busy workers, 0.3 s idle); without
    # the first block the difference is the noise of the least of three
    assert ttft[True] < ttft[False] - 0.1, ttft


def test_a_refused_open_fails_the_decision_with_its_own_error(start_server, pair, images):
    """A prompt too long for the server's limits: the Open is refused (TOO_LARGE) and the decision fails
    with that error, not with the answer to the first block behind it (no session: UNKNOWN_SESSION, never
    read); a short prompt on the same client then decodes as before."""
    from edge_spec_ros.wire.verifier_link import VerifierError

    jpg, seen = images[0]
    long_prompt = pair_prompt(pair, "find the silver bottle", seen)
    short = pair.prompt_encoder().encode("stop")
    limit = len(short.input_ids) + 1
    assert len(long_prompt.input_ids) > limit
    config = DecodeConfig(max_new_tokens=8, gamma=3)
    with start_server("--max-prompt-tokens", str(limit)) as endpoint, \
            VerifierClient(ClientConfig(endpoint=endpoint)) as client:
        decoder = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config, threads=2))
        with pytest.raises(VerifierError) as refused:
            decoder.decode("sd", long_prompt, jpg)
        assert refused.value.code == 8  # TOO_LARGE
        assert decoder.decode("sd", short, b"").tokens == autoregressive(pair.verifier, short, config).tokens


def test_open_with_closes_the_session_when_the_first_block_fails(server_endpoint, pair):
    """``VerifierClient.open_with``: a first block that cannot be drafted ends the session on the server
    (Close) and the error goes on; the client forgets the session."""
    from edge_spec_ros.wire.messages import Open

    prompt = pair.prompt_encoder().encode("stop")
    seen: list[bytes] = []

    def first(sid: bytes) -> None:
        seen.append(sid)
        raise RuntimeError("the drafter failed")

    with VerifierClient(ClientConfig(endpoint=server_endpoint)) as client:
        with pytest.raises(RuntimeError, match="drafter failed"):
            client.open_with(Open(input_ids=prompt.input_ids.numpy().astype(np.int32)), first)
        with pytest.raises(KeyError):
            client.receive(seen[0], 0.1)
