"""The robot's decoders with a drafter of fewer vocabulary rows than the verifier (V_q < V_p, as
Qwen2-VL-2B's 151,936 to -7B's 152,064): q is sent (γ, V_q) whole, as its top K, or only at the drafted
ids, and DSSD's resample meets the server's p_δ (V_p) with the robot's q (V_q).

Over a real verifier process (the embedded pair, V_p = 640, against its drafter cut to the
tokenizer's 633 ids): greedy modes emit the verifier's own output, sampled modes reproduce the
in-process reference draw for draw, and a wider q or a drafted id ≥ V_p is answered with an Error that
says why. Against an in-process session on a vocabulary of 8 (drafter: 6, the extra ids carrying about
40 % of the mass; slow): SD, DSSD and TK-SLT follow the verifier by chi-square, and the lossy top-1
downlink fails. The drafter cannot read an id it has no row for, so those ids end a decode."""

from __future__ import annotations

import numpy as np
import pytest

from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.embedded import embedded_pair
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.sampling import SamplingConfig
from edge_spec_ros.wire.messages import DraftBlock, Open, Opened
from edge_spec_ros.wire.verifier_link import VerifierError

from narrow_vocab import as_pair, narrow_copy, stopped_two_token_distribution
from small_vocab import SAMPLING, VOCAB, chi_square_pvalue, exact_two_token_distribution, small_target

GREEDY_MODES = ("sd", "dssd", "tkslt", "pico")
SAMPLED_MODES = ("sd", "dssd", "tkslt")


@pytest.fixture(scope="module")
def pair():
    return embedded_pair()  # the weights the server process builds


@pytest.fixture(scope="module")
def narrow(pair):
    """The embedded drafter without its padding rows: V_q = the tokenizer's ids < V_p."""
    v_q, v_p = len(pair.tokenizer), pair.verifier.stack.vocab_size
    assert v_q < v_p
    return Drafter(narrow_copy(pair.drafter.stack.model, v_q))


def stops(pair) -> tuple[int, ...]:
    return (pair.tokenizer.eos_token_id, *range(len(pair.tokenizer), pair.verifier.stack.vocab_size))


def test_greedy_over_the_network_is_the_verifiers_own(server_endpoint, pair, narrow):
    prompt = pair.prompt_encoder().encode("find the silver bottle")
    config = DecodeConfig(max_new_tokens=10, gamma=4, stop_tokens=stops(pair))
    target = autoregressive(pair.verifier, prompt, config).tokens
    with VerifierClient(ClientConfig(endpoint=server_endpoint)) as client:
        decoder = EdgeDecoder(client, narrow, EdgeConfig(decode=config))
        for mode in GREEDY_MODES:
            assert decoder.decode(mode, prompt, b"").tokens == target, mode


def test_sampled_over_the_network_equals_the_in_process_reference(server_endpoint, pair, narrow):
    """The server pads the (γ, V_q) q (SD), rebuilds the top K over V_p (TK-SLT); the robot resamples from
    p_δ (V_p) with its q (DSSD): each draws what the in-process reference draws."""
    prompt = pair.prompt_encoder().encode("go to the red chair")
    config = DecodeConfig(max_new_tokens=12, gamma=4, sampling=SamplingConfig(1.0), seed=3, stop_tokens=stops(pair))
    edge = EdgeConfig(decode=config, tkslt_k=20)
    with VerifierClient(ClientConfig(endpoint=server_endpoint)) as client:
        decoder = EdgeDecoder(client, narrow, edge)
        results = {mode: decoder.decode(mode, prompt, b"") for mode in SAMPLED_MODES}
    for mode, result in results.items():
        reference = speculative(narrow, pair.verifier, prompt, config, edge.draft_distribution(mode),
                                gammas=result.stats.block_gammas)
        assert result.tokens == reference.tokens, mode
    assert results["dssd"].tokens == results["sd"].tokens and results["dssd"].stats.resamples > 0


def refusal(endpoint: str, prompt, block: DraftBlock) -> str:
    """The reason of the Error a sampled session answers ``block`` with."""
    with VerifierClient(ClientConfig(endpoint=endpoint)) as client:
        sid, opened = client.open(Open(input_ids=prompt.input_ids.numpy().astype(np.int32), temperature=1.0,
                                       want_exits=False))
        assert isinstance(opened, Opened)
        client.send(sid, block)
        with pytest.raises(VerifierError) as refused:
            client.receive(sid)
        client.end(sid)
    return str(refused.value)


def test_a_wider_q_or_a_drafted_id_past_the_verifier_is_refused_with_the_reason(server_endpoint, pair):
    prompt = pair.prompt_encoder().encode("stop")
    v_p, n = pair.verifier.stack.vocab_size, len(prompt.input_ids)
    tokens = np.array([20, 21], np.int32)
    wide = np.full((2, v_p + 64), 1.0 / (v_p + 64), np.float32)
    assert f"drafter's vocabulary ({v_p + 64} ids) is larger than the verifier's ({v_p})" in \
        refusal(server_endpoint, prompt, DraftBlock(round=0, position=n, tokens=tokens, q=wide))
    past = np.array([20, v_p], np.int32)
    narrow_q = np.full((2, v_p - 7), 1.0 / (v_p - 7), np.float32)
    assert f"DraftBlock.tokens: ids must be in [0, {v_p}), the verifier's vocabulary" in \
        refusal(server_endpoint, prompt, DraftBlock(round=0, position=n, tokens=past, q=narrow_q))


# --- in distribution, over an in-process session (vocabulary of 8, drafter of 6) ----------------------

V_Q = 6
N_RUNS = 600


def run_mode(target, prompt, encoder, mode: str, **edge) -> list[tuple[int, int]]:
    decoder = EdgeDecoder(LocalVerifierLink(EarlyExitVerifier(target), encoder),
                          Drafter(narrow_copy(truncated_copy(target, 1), V_Q)), EdgeConfig(threads=1, **edge))
    out = []
    for seed in range(N_RUNS):
        decoder.config = EdgeConfig(decode=DecodeConfig(max_new_tokens=2, gamma=2, sampling=SAMPLING, seed=seed,
                                                        stop_tokens=tuple(range(V_Q, VOCAB))), threads=1, **edge)
        out.append(as_pair(decoder.decode(mode, prompt, b"").tokens))
    return out


@pytest.fixture(scope="module")
def small_pair(tokenizer):
    target, prompt = small_target(tokenizer)
    expected = stopped_two_token_distribution(exact_two_token_distribution(target, prompt), VOCAB,
                                              range(V_Q, VOCAB))
    return target, prompt, PromptEncoder(tokenizer), expected


@pytest.mark.slow
@pytest.mark.parametrize("mode,edge", [("sd", {}), ("dssd", {}), ("tkslt", {"tkslt_k": 3})])
def test_sampled_modes_follow_the_verifier_over_its_extra_ids(small_pair, mode, edge):
    target, prompt, encoder, expected = small_pair
    samples = run_mode(target, prompt, encoder, mode, **edge)
    assert chi_square_pvalue(samples, expected) > 1e-3
    assert sum(a >= V_Q or b >= V_Q for a, b in samples) > N_RUNS // 10  # residuals reached the extra ids


@pytest.mark.slow
def test_the_lossy_downlink_is_detectably_wrong(small_pair):
    """Negative control: resampling from a top-1 pruned p_δ must fail the same test."""
    target, prompt, encoder, expected = small_pair
    samples = run_mode(target, prompt, encoder, "dssd-topk-lossy", lossy_p_k=1)
    assert chi_square_pvalue(samples, expected) < 1e-6
