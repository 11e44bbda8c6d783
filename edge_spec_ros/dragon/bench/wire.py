"""DRAGON's wire cost: bytes per message and per generated token, payload ``full`` against the exact
``on_demand`` variant, at a given vocabulary (default: Qwen2's V = 151,657).

Legend: V — vocabulary; p^s_t — a side's locally aggregated distribution (float32 on the wire);
up — robot → cloud, down — cloud → robot; the aggregator sits where ``aggregator`` says.

The sides are synthetic (no model of that vocabulary runs here): p^s_t = softmax(z_t + ε^s_t) with
z_t ~ N(0, σ²) drawn from a hash of the context and ε^s_t ~ N(0, ν²) per side, so ν sets how often
the two sides' drafts disagree. Messages are encoded with the project's codec (LZ4 where it saves
≥ 10 %), exactly as the server and robot send them. Run: ``edge-spec-ros bench dragon-wire``.
"""

from __future__ import annotations

import argparse
import json
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from edge_spec_ros.dragon.aggregation import CLOUD, ROBOT, LocalAggregate
from edge_spec_ros.dragon.peer import DragonPeer, FrameLog, PeerConfig, run_interleaved
from edge_spec_ros.dragon.wire import (
    DragonDist,
    DragonDistRequest,
    DragonDraft,
    DragonOpen,
    DragonOpened,
    DragonTarget,
)
from edge_spec_ros.spec.sampling import SamplingConfig
from edge_spec_ros.wire.codec import encoded_size
from edge_spec_ros.wire.messages import Close

QWEN2_VOCAB = 151_657
SESSION = bytes(16)


def synthetic_side(v: int, side_seed: int, sigma: float = 4.0, nu: float = 0.5):
    """context → LocalAggregate: softmax(z(context) + ε_side(context)), log h̃ = 0 / 0.3."""

    def side(context: Sequence[int]) -> LocalAggregate:
        key = zlib.crc32(np.asarray(list(context), dtype=np.int64).tobytes())
        z = torch.randn(v, generator=torch.Generator().manual_seed(key), dtype=torch.float64) * sigma
        eps = torch.randn(v, generator=torch.Generator().manual_seed(key ^ (side_seed * 7919 + 1)),
                          dtype=torch.float64) * nu
        return LocalAggregate(torch.softmax(z + eps, -1), 0.3 * side_seed)

    return side


SAMPLE_FINGERPRINT = "0123456789abcdef" * 2  # a tokenizer fingerprint's size (32 hex digits)


def message_sizes(v: int) -> dict[str, int]:
    """Encoded bytes of one message of each DRAGON type at vocabulary V (a softmax-shaped p^s_t)."""
    probs = torch.softmax(torch.randn(v, generator=torch.Generator().manual_seed(0)) * 4.0, -1).numpy()
    msgs = {
        "DragonOpen": DragonOpen(query="where did you see the red chair?", max_new_tokens=64, temperature=0.7,
                                 seed=12345, top_k=2, tokenizer_fingerprint=SAMPLE_FINGERPRINT),
        "DragonOpened": DragonOpened(vocab_size=v, prefill_s=0.21, tokenizer_fingerprint=SAMPLE_FINGERPRINT),
        "DragonDraft (full)": DragonDraft(position=17, epoch=3, token=v - 5, log_h=1.2345678901234,
                                          probs=probs, decode_s=0.0123456, echo_stamp=1234.56789, echo_hold_s=0.00123),
        "DragonDraft (on_demand)": DragonDraft(position=17, epoch=3, token=v - 5, log_h=1.2345678901234,
                                               p_token=0.123456789, decode_s=0.0123456, echo_stamp=1234.56789,
                                               echo_hold_s=0.00123),
        "DragonTarget": DragonTarget(position=17, token=v - 5, accept_robot=True, accept_cloud=False, switch=False,
                                     stamp=1234.56789, decode_s=0.0123456, rtt_s=0.0456789),
        "DragonDistRequest": DragonDistRequest(position=17, epoch=3),
        "DragonDist": DragonDist(position=17, epoch=3, probs=probs),
        "Close": Close(),
    }
    return {name: encoded_size(SESSION, m) for name, m in msgs.items()}  # type: ignore[arg-type]


@dataclass(frozen=True)
class WireRun:
    v: int
    payload: str
    greedy: bool
    aggregator: str
    tokens: int
    up_bytes_per_token: float
    down_bytes_per_token: float
    requests_per_token: float
    accept_robot: float
    accept_cloud: float


def run(v: int, payload: str, greedy: bool, aggregator: str = ROBOT, n: int = 24, nu: float = 0.5,
        seed: int = 0, max_queue: int = 4) -> WireRun:
    """One decision of ``n`` tokens between two synthetic sides through encoded frames (``max_queue``
    = 1: the DRDG/TW schedule, one draft per side per token)."""
    sampling = SamplingConfig(0.0 if greedy else 1.0)
    config = PeerConfig(n, sampling, seed=seed, payload=payload, first_aggregator=aggregator, policy=aggregator,
                        max_queue=max_queue)
    robot = DragonPeer(ROBOT, synthetic_side(v, 1, nu=nu), config, v)
    cloud = DragonPeer(CLOUD, synthetic_side(v, 2, nu=nu), config, v)
    log = FrameLog()
    run_interleaved(robot, cloud, seed, SESSION, log)
    k = len(robot.tokens)
    return WireRun(v, payload, greedy, aggregator, k, log.bytes["up"] / k, log.bytes["down"] / k,
                   (robot.requests + cloud.requests) / k, float(np.mean(robot.accept_robot)),
                   float(np.mean(robot.accept_cloud)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench dragon-wire``."""
    parser.add_argument("--vocab", type=int, default=QWEN2_VOCAB)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--nu", type=float, default=0.5, help="per-side noise: how much the two sides disagree")


def command(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    print(json.dumps({"message_bytes": message_sizes(args.vocab)}, indent=1))
    for aggregator in (ROBOT, CLOUD):
        for greedy in (True, False):
            for payload in ("full", "on_demand"):
                print(json.dumps(asdict(run(args.vocab, payload, greedy, aggregator, args.tokens, args.nu))))
    for greedy in (True, False):  # the DRDG/TW schedule: the same messages, one draft per side per token
        for payload in ("full", "on_demand"):
            print(json.dumps({"schedule": "DRDG/TW", **asdict(run(args.vocab, payload, greedy, ROBOT, args.tokens,
                                                                  args.nu, max_queue=1))}))
    print(json.dumps({"baselines_bytes_per_token": sequence_wise_bytes(args.vocab, args.tokens)}))
    return 0


def sequence_wise_bytes(v: int, n: int) -> dict[str, float]:
    """DRDG/SW (dragon/bench/baselines.SequenceWise) per generated token: y^l up; y^r and the cloud's
    distributions along both sequences (2·n·V float32) down, each message with the baselines' header."""
    from edge_spec_ros.dragon.bench.baselines import HEADER_BYTES, PROB_BYTES, TOKEN_BYTES

    up = HEADER_BYTES + n * TOKEN_BYTES
    down = 2 * HEADER_BYTES + n * TOKEN_BYTES + 2 * n * v * PROB_BYTES + 8
    return {"DRDG/SW up": up / n, "DRDG/SW down": down / n}
