"""Fig. 8 with acceptance sequences recorded from real models: the eq. 8 scheduler against always-robot,
always-cloud and random aggregation (dragon/scheduler.compare_policies).

Legend: S^l_t, S^r_t — whether the robot's / cloud's draft at t became the target token; c^s_dec —
a side's time to decode one draft (all its documents); rtt — base round trip plus the extra latency
with a sinusoidal jitter of 1/5 of it (§7.4).

The sequences come from the shipped pair (robot: the drafter, cloud: the verifier; assets/sim_pair),
each over two retrieved documents of its own (dragon/bench/latency's memory and folder), sampled at
T = 1 with one seed per sequence, through DRDG/TW (dragon/aggregation.drdg_tw): Speculative
Aggregation makes exactly these accept/reject decisions for any timing, so the timing can be replayed
(simulate_pipeline). c_dec: measured here per side, and the paper-like settings given.
Run: ``edge-spec-ros bench dragon-schedule [--sequences 50 --tokens 100]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from edge_spec_ros.dragon.aggregation import drdg_tw
from edge_spec_ros.dragon.bench.latency import QUERY, write_world
from edge_spec_ros.dragon.document_lm import build_side, chat_prompt_ids
from edge_spec_ros.dragon.peer import wire_precision
from edge_spec_ros.dragon.scheduler import compare_policies
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig


def timed(fn):
    """fn with the seconds of each call appended to ``.seconds``."""
    def call(context):
        start = time.perf_counter()
        out = fn(context)
        call.seconds.append(time.perf_counter() - start)
        return out

    call.seconds = []
    return call


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench dragon-schedule``."""
    parser.add_argument("--sequences", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--base-rtt-ms", type=float, default=20.0)
    parser.add_argument("--extra-ms", default="0,50,100,200,300,400")
    parser.add_argument("--c-dec-ms", default="measured;60,25;30,30",
                        help="';'-separated robot,cloud decode times (ms) to replay; 'measured': this machine's")


def command(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    pair = load_pair("embedded")
    encoder = pair.prompt_encoder()
    prompt_ids, decode_text = chat_prompt_ids(encoder), pair.tokenizer.decode
    sampling = SamplingConfig(1.0)
    with tempfile.TemporaryDirectory() as tmp:
        memory, store = write_world(Path(tmp))
        robot = build_side(pair.drafter.stack, memory, memory.top_k(QUERY, 2), QUERY, prompt_ids, decode_text,
                           sampling)
        cloud = build_side(pair.verifier.stack, store, store.top_k(QUERY, 2), QUERY, prompt_ids, decode_text,
                           sampling)
        fr, fc = timed(wire_precision(robot.next_distribution)), timed(wire_precision(cloud.next_distribution))
        sequences = []
        for seed in range(args.sequences):
            trace = drdg_tw(fr, fc, [], args.tokens, PositionalRNG(seed), sampling)
            sequences.append((trace.accept_robot, trace.accept_cloud))
    extras = [float(x) / 1e3 for x in args.extra_ms.split(",")]
    measured = [float(np.median(fr.seconds)), float(np.median(fc.seconds))]
    for setting in args.c_dec_ms.split(";"):
        c_dec = measured if setting == "measured" else [float(x) / 1e3 for x in setting.split(",")]
        result = compare_policies(sequences, c_dec[0], c_dec[1], args.base_rtt_ms / 1e3, extras)
        print(json.dumps({
            "sequences": len(sequences), "tokens": args.tokens,
            "mean_accept_robot": float(np.mean([np.mean(a) for a, _ in sequences])),
            "mean_accept_cloud": float(np.mean([np.mean(b) for _, b in sequences])),
            "c_dec_ms": {"robot": 1e3 * c_dec[0], "cloud": 1e3 * c_dec[1], "measured": setting == "measured"},
            "extra_ms": [1e3 * e for e in extras],
            "mean_total_s": {p: [round(v, 3) for v in vals] for p, vals in result.mean_total.items()},
            # (best static − DRAGON) / best static, per extra latency: > 0 where eq. 8 beats both fixed sides
            "dragon_below_best_static_pct": [round(100.0 * (min(r, c) - d) / min(r, c), 1) for d, r, c in zip(
                result.mean_total["dragon"], result.mean_total["robot"], result.mean_total["cloud"])],
            "dragon_below_random_pct": [round(100.0 * (x - d) / x, 1) for d, x in zip(
                result.mean_total["dragon"], result.mean_total["random"])],
        }), flush=True)
    return 0
