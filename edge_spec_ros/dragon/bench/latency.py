"""DRAGON's per-token latency and TTFT under an emulated network, beside the paper's baselines in the
same run (Liu et al. 2025, Figs. 6-7 in small).

Legend: rtt — the extra round trip added by the emulated link (each direction delays rtt/2 ± rtt/10,
uniform, no reordering: jitter 1/5 of the latency); max_queue — how far a side drafts ahead; DRDG/TW
schedule — max_queue = 1: a side decodes x^s_{t+1} only after x_t arrived, so every token pays the
round trip, as token-wise synchronisation does (same messages, same tokens); DRAGON — max_queue = 4
with the aggregator on the robot, on the cloud, or moved by eq. 8, and max_queue = 64 (the paper's
queues are unbounded; 64 is the protocol's limit, more than the tokens decoded here); payload ``full`` (the paper's: p^s_t
with every draft) and ``on_demand`` (exact, fewer bytes; dragon/peer.partial_aggregate).
Baselines (dragon/bench/baselines): CRCG per side, DRCG/Text, DRCG/KV, DRDG/SW — their compute
measured here, their transfers timed over the same emulated link with their real byte counts.

Figures: TTFT — from the query (before the robot's retrieval) to the first token known at the robot;
per-token — mean time between later tokens, (t_n − t_1)/(n − 1) (DRDG/SW delivers all tokens at once:
its decoding span / n); total — the query to the last token.

With ``--link zmq`` the cloud side is a real VerifierServer (ZeroMQ on 127.0.0.1) that emulates the
downlink (wire/emulator.LinkShape: rtt/2·0.9 + uniform [0, rtt/5·½]) while ZmqDragonLink emulates the
uplink the same way. Median of ``--repeats`` decisions per cell. Both sides run in this process (the robot's thread and the cloud's, dragon/session.LocalDragonLink),
every message encoded and decoded; the models are the shipped pair (robot: the drafter, cloud: the
verifier; assets/sim_pair), each over two retrieved documents of its own (a robot memory and a cloud
folder written here). Greedy, so every DRAGON and DRDG/TW configuration must give the same tokens
(checked). Run: ``edge-spec-ros bench dragon-latency [--link zmq] [--tokens N] [--rtts-ms 0,50,...]
[--payloads full,on_demand] [--bandwidth-mbps B]``; one JSON line per cell, progress on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from edge_spec_ros.cloud.server import ServerConfig, VerifierServer
from edge_spec_ros.config_cli import UsageError
from edge_spec_ros.dragon.bench.baselines import (
    emulators,
    kv_bytes_formula,
    link_shape,
    measure_centralised,
    measure_fetched,
    measure_sequence_wise,
    median,
)
from edge_spec_ros.dragon.document_lm import chat_prompt_ids
from edge_spec_ros.dragon.robot import DragonConfig, RobotDragon, ZmqDragonLink
from edge_spec_ros.dragon.session import DragonService, LocalDragonLink, dragon_sessions
from edge_spec_ros.dragon.stores import DocumentStore, RobotMemory
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.models.tokenizer import tokenizer_fingerprint

QUERY = "Where did you see the red chair?"
MEMORY = [("observation", "I see a red chair next to the window, two metres ahead.", (2.0, 0.5, 0.1)),
          ("instruction", "go to the red chair", (0.0, 0.0, 0.0)),
          ("observation", "A blue door is on the left wall.", (1.0, 1.5, 1.6)),
          ("note", "The red chair belongs to the kitchen table.", (0.0, 0.0, 0.0))]
DOCUMENTS = ("A chair is a seat for one person. Red chairs are common in kitchens.\n\n"
             "Windows let light into a room; furniture is often placed next to them.\n\n"
             "Doors connect rooms. A robot should stop in front of a closed door.")


def write_world(directory: Path) -> tuple[RobotMemory, DocumentStore]:
    """The benches' two sides' documents under ``directory``: the robot's memory (``MEMORY``) and the
    cloud's folder ``docs/`` (``DOCUMENTS``)."""
    memory = RobotMemory(directory / "memory")
    for i, (kind, text, pose) in enumerate(MEMORY):
        memory.add(kind, text, pose, time=float(i))
    (directory / "docs").mkdir()
    (directory / "docs" / "house.md").write_text(DOCUMENTS)
    return memory, DocumentStore(directory / "docs")


CONFIGS = {  # name → (max_queue, policy)
    "DRDG/TW schedule": (1, "robot"),
    "DRAGON robot aggregates": (4, "robot"),
    "DRAGON cloud aggregates": (4, "cloud"),
    "DRAGON eq. 8": (4, "dragon"),
    "DRAGON robot aggregates (queue 64)": (64, "robot"),  # ~ the paper's unbounded queues at these lengths
    "DRAGON eq. 8 (queue 64)": (64, "dragon"),
}


@dataclass(frozen=True)
class LatencyRow:
    config: str
    payload: str  # full | on_demand (DRAGON, DRDG/TW); "-" for the baselines
    rtt_ms: float
    tokens: int
    per_token_ms: float  # (t_n - t_1) / (n - 1); DRDG/SW: decoding span / n
    ttft_ms: float  # the query (before the robot's retrieval) to the first token at the robot
    total_ms: float  # the query to the last token
    up_bytes: float
    down_bytes: float
    accept_robot: float = float("nan")
    accept_cloud: float = float("nan")
    aggregator_switches: int = 0
    same_tokens_as_dragon: bool = True
    measured: str = "wall clock"  # or: compute measured + emulated link


def progress(message: str) -> None:
    print(f"[dragon_latency {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def measure_baselines(pair, memory, store, prompt_ids, decode_text, n: int, repeats: int) -> dict[str, list]:
    """Each baseline's compute, ``repeats`` times (the link is added per rtt)."""
    robot, cloud = pair.drafter.stack, pair.verifier.stack
    out: dict[str, list] = {"CRCG/robot": [], "CRCG/cloud": [], "DRCG/Text": [], "DRCG/KV": [], "DRDG/SW": []}
    for rep in range(repeats):
        progress(f"baselines' compute, repeat {rep + 1}/{repeats}")
        out["CRCG/robot"].append(measure_centralised("robot", robot, memory, QUERY, prompt_ids, n))
        out["CRCG/cloud"].append(measure_centralised("cloud", cloud, store, QUERY, prompt_ids, n))
        fetched = measure_fetched(robot, memory, store, QUERY, prompt_ids, n, robot_model="the robot's (drafter)")
        out["DRCG/Text"].append(fetched.text)
        out["DRCG/KV"].append(fetched.kv)
        out["DRDG/SW"].append(measure_sequence_wise(robot, memory, cloud, store, QUERY, prompt_ids, decode_text, n))
    text = pair.drafter.stack.text.config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv = out["DRCG/KV"][0]
    print(json.dumps({"drcg_kv": {"model": "the robot's (drafter)", "bytes": kv.payload_bytes,
                                  "tokens": fetched.kv_tokens,
                                  "formula_bytes": kv_bytes_formula(text.num_hidden_layers, text.num_key_value_heads,
                                                                    head_dim, fetched.kv_tokens, 4),
                                  "layers": text.num_hidden_layers, "kv_heads": text.num_key_value_heads,
                                  "head_dim": head_dim, "dtype_bytes": 4},
                      "drcg_text_bytes": out["DRCG/Text"][0].payload_bytes,
                      "drdg_sw_chosen": out["DRDG/SW"][0].chosen}), flush=True)
    return out


def baseline_rows(measured: dict[str, list], rtt_ms: float, bandwidth_bps: float, reference,
                  paper_vocab: int = 0) -> list[LatencyRow]:
    """The baselines' rows at one rtt; with ``paper_vocab`` also DRDG/SW sending distributions of that
    vocabulary (its one large message is the bytes that scale with V)."""
    rows = []
    items = list(measured.items())
    if paper_vocab and "DRDG/SW" in measured:
        items.append((f"DRDG/SW, V = {paper_vocab:,} bytes",
                      [dataclasses.replace(m, vocab=paper_vocab) for m in measured["DRDG/SW"]]))
    for name, runs in items:
        lines = [m.timeline(*emulators(rtt_ms / 1e3, bandwidth_bps, int(rtt_ms) * 100 + rep))
                 for rep, m in enumerate(runs)]
        rows.append(LatencyRow(name, "-", rtt_ms, len(lines[0].tokens), median(1e3 * t.per_token_s for t in lines),
                               median(1e3 * t.ttft_s for t in lines), median(1e3 * t.total_s for t in lines),
                               lines[0].up_bytes, lines[0].down_bytes,
                               same_tokens_as_dragon=reference is not None and lines[0].tokens == reference,
                               measured="compute measured, link emulated (wire/emulator.LinkEmulator)"))
    return rows


def _cell(args: argparse.Namespace, pair, world: tuple, endpoint: str, rtt_ms: float, payload: str, name: str,
          reference: tuple | None) -> tuple[LatencyRow, tuple]:
    """One configuration at one RTT and payload, ``--repeats`` decisions: its row (medians), and the tokens
    every cell must give (the first decision's, printed once)."""
    memory, store, prompt_ids, decode_text, fingerprint = world
    one_way, bandwidth = rtt_ms / 2000.0, args.bandwidth_mbps * 1e6
    max_queue, policy = CONFIGS[name]
    config = DragonConfig(max_new_tokens=args.tokens, policy=policy, max_queue=max_queue,
                          aggregator="cloud" if policy == "cloud" else "robot",
                          timeout_s=60.0, payload=payload)
    runs, logs = [], []
    for rep in range(args.repeats):
        seed = int(rtt_ms) * 100 + rep
        if args.link == "zmq":
            config = dataclasses.replace(config, down_delay_s=one_way * 0.9,
                                         down_jitter_s=one_way * 0.2, down_bandwidth_bps=bandwidth)
            link = ZmqDragonLink(endpoint, uplink=link_shape(rtt_ms / 1e3, bandwidth), seed=seed)
        else:
            link = LocalDragonLink(pair.verifier.stack, store, prompt_ids, decode_text,
                                   one_way_s=one_way, jitter_s=one_way / 5.0, seed=seed,
                                   tokenizer_fingerprint=fingerprint)
        robot = RobotDragon(pair.drafter.stack, memory, prompt_ids, decode_text, config,
                            tokenizer_fingerprint=fingerprint)
        out = robot.decode(QUERY, link)
        if reference is None:
            reference = out.tokens
            print(json.dumps({"text": decode_text(list(out.tokens)),
                              "vocab": pair.verifier.stack.vocab_size}))
        if out.tokens != reference:
            raise AssertionError(f"{name} at {rtt_ms} ms gave other tokens: exactness broken")
        times = robot.last_peer.commit_times
        runs.append((out, (times[-1] - times[0]) / max(len(times) - 1, 1)))
        logs.append(link.log.bytes)
    n = len(reference)
    out = runs[0][0]
    row = LatencyRow(name, payload, rtt_ms, n, median(1e3 * r[1] for r in runs),
                     median(1e3 * (r.prefill_s + r.first_token_s) for r, _ in runs),
                     median(1e3 * (r.prefill_s + r.decode_s) for r, _ in runs),
                     median(b["up"] for b in logs), median(b["down"] for b in logs),
                     sum(out.trace.accept_robot) / n, sum(out.trace.accept_cloud) / n,
                     sum(a != b for a, b in zip(out.trace.aggregator, out.trace.aggregator[1:])))
    return row, reference


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench dragon-latency``."""
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--rtts-ms", default="0,50,100,200,300")
    parser.add_argument("--repeats", type=int, default=3, help="decisions per cell; the median is reported")
    parser.add_argument("--link", choices=("local", "zmq"), default="local",
                        help="local: both sides in threads, delays in the in-process link; zmq: the cloud in a "
                             "VerifierServer of this process on 127.0.0.1, downlink emulated by the server, "
                             "uplink by ZmqDragonLink")
    parser.add_argument("--payloads", default="full,on_demand", help="DRAGON's payloads to run (full, on_demand)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="which of the DRAGON/TW configurations")
    parser.add_argument("--bandwidth-mbps", type=float, default=0.0,
                        help="cap each direction (0: unlimited); needs --link zmq for DRAGON's runs")
    parser.add_argument("--no-baselines", action="store_true", help="DRAGON and the DRDG/TW schedule only")
    parser.add_argument("--paper-vocab", type=int, default=151_657,
                        help="also time DRDG/SW's distributions at this vocabulary (0: no); Qwen2's by default")


def command(args: argparse.Namespace) -> int:
    payloads = args.payloads.split(",")
    configs = args.configs.split(",")
    if set(payloads) - {"full", "on_demand"} or set(configs) - set(CONFIGS):
        raise UsageError(f"payloads from full,on_demand; configs from {','.join(CONFIGS)}")
    if args.bandwidth_mbps and args.link == "local":
        raise UsageError("--bandwidth-mbps needs --link zmq (the in-process link emulates delay and jitter only)")
    bandwidth = args.bandwidth_mbps * 1e6
    torch.set_num_threads(1)
    pair = load_pair("embedded")
    encoder = pair.prompt_encoder()
    prompt_ids, decode_text = chat_prompt_ids(encoder), pair.tokenizer.decode
    fingerprint = tokenizer_fingerprint(pair.tokenizer)  # both sides: the pair's one tokenizer
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        memory, store = write_world(Path(tmp))
        reference = None
        server = None
        endpoint = ""
        baselines = {} if args.no_baselines else measure_baselines(pair, memory, store, prompt_ids, decode_text,
                                                                    args.tokens, args.repeats)
        if args.link == "zmq":
            service = DragonService(pair.verifier.stack, encoder, Path(tmp) / "docs")
            server = VerifierServer(pair.verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*", idle_exit_s=600.0),
                                    dragon_sessions(service))
            endpoint = server.start()
        try:
            for rtt_ms in (float(x) for x in args.rtts_ms.split(",")):
                for payload in payloads:
                    for name in configs:
                        progress(f"rtt {rtt_ms:g} ms, {name}, {payload} ({time.monotonic() - started:.0f} s so far)")
                        row, reference = _cell(args, pair, (memory, store, prompt_ids, decode_text, fingerprint),
                                               endpoint, rtt_ms, payload, name, reference)
                        print(json.dumps({**asdict(row), "link": args.link}), flush=True)
                for row in baseline_rows(baselines, rtt_ms, bandwidth, reference, args.paper_vocab):
                    print(json.dumps({**asdict(row), "link": "emulated"}), flush=True)
        finally:
            if server is not None:
                server.stop()
    progress(f"done in {time.monotonic() - started:.0f} s")
    return 0
