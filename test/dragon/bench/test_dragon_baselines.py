"""The paper's baselines for DRAGON's latency bench (dragon/bench/baselines.py): timelines over an
emulated link add up as the message sequence says; DRCG/KV's cache bytes follow the formula and its
reuse gives DRCG/Text's tokens; teacher forcing gives the same p^s_t as decoding step by step."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from edge_spec_ros.dragon.bench.baselines import (
    HEADER_BYTES,
    PROB_BYTES,
    TOKEN_BYTES,
    Centralised,
    Decoded,
    Fetched,
    SequenceWise,
    greedy_decode,
    kv_bytes,
    kv_bytes_formula,
    link_shape,
    measure_fetched,
    teacher_forced,
)
from edge_spec_ros.dragon.bench.latency import QUERY, write_world
from edge_spec_ros.dragon.document_lm import build_side, chat_prompt_ids, text_prompt
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.spec.sampling import SamplingConfig
from edge_spec_ros.wire.emulator import LinkEmulator, LinkShape

DECODED = Decoded((5, 6, 7, 8), prefill_s=0.030, step_s=(0.010, 0.012, 0.014))


def fixed(delay_s: float, bandwidth_bps: float = 0.0) -> tuple[LinkEmulator, LinkEmulator]:
    shape = LinkShape(delay_s, 0.0, bandwidth_bps)
    return LinkEmulator(shape), LinkEmulator(shape)


def test_link_shape_has_the_papers_jitter():
    shape = link_shape(0.300, 1e8)
    assert shape.delay_s == pytest.approx(0.135) and shape.jitter_s == pytest.approx(0.030)
    # mean round trip = rtt, spread of the round trip = rtt / 5
    assert 2 * (shape.delay_s + shape.jitter_s / 2) == pytest.approx(0.300) and 2 * shape.jitter_s == pytest.approx(0.06)


def test_centralised_timelines():
    robot = Centralised("robot", 0.002, DECODED, 20).timeline(*fixed(0.1))
    assert robot.ttft_s == pytest.approx(0.032) and robot.per_token_s == pytest.approx(0.012)
    assert robot.up_bytes == robot.down_bytes == 0  # no link
    cloud = Centralised("cloud", 0.002, DECODED, 20).timeline(*fixed(0.1))
    assert cloud.ttft_s == pytest.approx(0.1 + 0.002 + 0.030 + 0.1)  # query up, compute, token down
    assert cloud.per_token_s == pytest.approx(0.012) and cloud.total_s == pytest.approx(0.1 + 0.068 + 0.1)
    assert cloud.down_bytes == 4 * (HEADER_BYTES + TOKEN_BYTES)


def test_fetched_waits_for_the_transfer_and_pays_its_bytes():
    kv = Fetched("DRCG/KV", 0.005, 0.003, 1_000_000, 20, DECODED).timeline(*fixed(0.05, 8e6))  # 1 MB at 8 Mbit/s
    up = (HEADER_BYTES + 20) * 8 / 8e6
    down = (HEADER_BYTES + 1_000_000) * 8 / 8e6
    assert kv.ttft_s == pytest.approx(up + 0.05 + 0.003 + down + 0.05 + 0.030)
    assert kv.per_token_s == pytest.approx(0.012)  # the fetch costs TTFT only
    text = Fetched("DRCG/Text", 0.5, 0.003, 100, 20, DECODED).timeline(*fixed(0.0))
    assert text.ttft_s == pytest.approx(0.5 + 0.030)  # the robot's own retrieval is the later one


def test_sequence_wise_timeline_by_hand():
    sw = SequenceWise(robot_retrieve_s=0.001, robot_prefill_s=0.010, cloud_retrieve_s=0.002, cloud_prefill_s=0.020,
                      robot_generate_s=0.100, cloud_generate_s=0.050, robot_force_s=0.007, cloud_force_s=0.009,
                      aggregate_s=0.001, tokens=(1, 2, 3, 4), chosen="robot", n=4, vocab=1000, query_bytes=20)
    line = sw.timeline(*fixed(0.1))
    robot_done = 0.111
    cloud_done = 0.1 + 0.072
    robot_forced = max(robot_done, cloud_done + 0.1) + 0.007  # y^r comes down
    dists = max(cloud_done, robot_done + 0.1) + 0.009 + 0.1  # y^l goes up, the cloud forces it, 2·n·V down
    end = max(robot_forced, dists) + 0.001
    assert line.token_times == (pytest.approx(end),) * 4 and line.ttft_s == pytest.approx(end)
    assert line.per_token_s == pytest.approx((end - 0.011) / 4)
    assert line.down_bytes == 2 * HEADER_BYTES + 4 * TOKEN_BYTES + 2 * 4 * 1000 * PROB_BYTES + 8


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    pair = load_pair("embedded")
    tmp = tempfile.TemporaryDirectory()
    memory, store = write_world(Path(tmp.name))
    yield pair, memory, store, chat_prompt_ids(pair.prompt_encoder())
    tmp.cleanup()


def test_kv_fetch_bytes_and_tokens(shipped):
    pair, memory, store, prompt_ids = shipped
    stack = pair.drafter.stack
    fetched = measure_fetched(stack, memory, store, QUERY, prompt_ids, 5)
    text = stack.text.config
    head_dim = text.hidden_size // text.num_attention_heads
    assert fetched.kv_tokens > 20
    assert fetched.kv.payload_bytes == kv_bytes_formula(text.num_hidden_layers, text.num_key_value_heads, head_dim,
                                                        fetched.kv_tokens, 4)
    assert fetched.text.payload_bytes == sum(len(h.text.encode()) for h in store.top_k(QUERY, 2))
    assert fetched.kv.decoded.tokens == fetched.text.decoded.tokens  # reusing the cloud's cache is the same prompt
    ids = prompt_ids("a blue door", QUERY)
    kv = stack.prefill(text_prompt(ids[:10]))
    assert kv_bytes(kv) == kv_bytes_formula(text.num_hidden_layers, text.num_key_value_heads, head_dim, 9, 4)
    assert greedy_decode(stack, ids, 4, kv=kv).tokens == greedy_decode(stack, ids, 4).tokens


def test_teacher_forcing_equals_stepwise_decoding(shipped):
    pair, memory, store, prompt_ids = shipped
    side = build_side(pair.verifier.stack, store, store.top_k(QUERY, 2), QUERY, prompt_ids, pair.tokenizer.decode,
                      SamplingConfig(0.0))
    y = [11, 40, 7, 99, 3]
    forced = teacher_forced(side, y)
    for t in range(len(y)):
        step = side.next_distribution(y[:t])
        torch.testing.assert_close(forced[t].probs, step.probs, atol=1e-5, rtol=1e-4)
        assert forced[t].log_h == pytest.approx(step.log_h)
