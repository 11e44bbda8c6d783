"""DRAGON's per-token latency and TTFT under an emulated network (issue 13 item 5, Figs. 6-7 in small).

Legend: rtt — the extra round trip added by the emulated link (each direction delays rtt/2 ± rtt/10,
uniform, no reordering: jitter 1/5 of the latency as the issue asks); max_queue — how far a side
drafts ahead; DRDG/TW schedule — max_queue = 1: a side decodes x^s_{t+1} only after x_t arrived,
so every token pays the round trip, as token-wise synchronisation does (same messages, same
tokens); DRAGON — max_queue = 4 with the aggregator on the robot, on the cloud, or moved by eq. 8.

With ``--link zmq`` the cloud side is a real VerifierServer (ZeroMQ on 127.0.0.1) that emulates the
downlink (wire/emulator.LinkShape: rtt/2·0.9 + uniform [0, rtt/5·½]) while ZmqDragonLink emulates the
uplink the same way. Median of ``--repeats`` decisions per cell. Both sides run in this process (the robot's thread and the cloud's, cloud/dragon.LocalDragonLink),
every message encoded and decoded; the models are the shipped pair (robot: the drafter, cloud: the
verifier; assets/sim_pair), each over two retrieved documents of its own (a robot memory and a cloud
folder written here). Greedy, so every configuration must give the same tokens (checked).
Run: ``python -m edge_spec_ros.bench.dragon_latency [--tokens N] [--rtts-ms 0,50,...]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from edge_spec_ros.cloud.dragon import LocalDragonLink
from edge_spec_ros.cloud.server import ServerConfig, VerifierServer
from edge_spec_ros.edge.dragon import DragonConfig, RobotDragon, ZmqDragonLink
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.rag.document_lm import chat_prompt_ids
from edge_spec_ros.rag.stores import DocumentStore, RobotMemory
from edge_spec_ros.wire.emulator import LinkShape

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
}


@dataclass(frozen=True)
class LatencyRow:
    config: str
    rtt_ms: float
    tokens: int
    per_token_ms: float
    ttft_ms: float  # robot retrieval + prefill, open (cloud retrieval + prefill) and the first token
    accept_robot: float
    accept_cloud: float
    aggregator_switches: int


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--rtts-ms", default="0,50,100,200,300")
    parser.add_argument("--repeats", type=int, default=3, help="decisions per cell; the median is reported")
    parser.add_argument("--link", choices=("local", "zmq"), default="local",
                        help="local: both sides in threads, delays in the in-process link; zmq: the cloud in a "
                             "VerifierServer of this process on 127.0.0.1, downlink emulated by the server, "
                             "uplink by ZmqDragonLink")
    parser.add_argument("--payload", choices=("full", "on_demand"), default="full")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    pair = load_pair("embedded")
    encoder = pair.prompt_encoder()
    prompt_ids, decode_text = chat_prompt_ids(encoder), pair.tokenizer.decode
    with tempfile.TemporaryDirectory() as tmp:
        memory, store = write_world(Path(tmp))
        reference = None
        server = None
        endpoint = ""
        if args.link == "zmq":
            server = VerifierServer(pair.verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*", idle_exit_s=600.0,
                                                                         documents=str(Path(tmp) / "docs")))
            endpoint = server.start()
        for rtt_ms in (float(x) for x in args.rtts_ms.split(",")):
            for name, (max_queue, policy) in CONFIGS.items():
                config = DragonConfig(max_new_tokens=args.tokens, aggregator="cloud" if policy == "cloud" else "robot",
                                      policy=policy, max_queue=max_queue, timeout_s=60.0)
                runs = []
                for rep in range(args.repeats):
                    one_way = rtt_ms / 2000.0
                    config = dataclasses.replace(config, payload=args.payload)
                    if args.link == "zmq":
                        config = dataclasses.replace(config, down_delay_s=one_way * 0.9, down_jitter_s=one_way * 0.2)
                        link = ZmqDragonLink(endpoint, uplink=LinkShape(one_way * 0.9, one_way * 0.2),
                                             seed=int(rtt_ms) * 100 + rep)
                    else:
                        link = LocalDragonLink(pair.verifier.stack, store, prompt_ids, decode_text, one_way_s=one_way,
                                               jitter_s=one_way / 5.0, seed=int(rtt_ms) * 100 + rep)
                    robot = RobotDragon(pair.drafter.stack, memory, prompt_ids, decode_text, config)
                    out = robot.decode(QUERY, link)
                    if reference is None:
                        reference = out.tokens
                        print(json.dumps({"text": decode_text(list(out.tokens)), "vocab": pair.verifier.stack.vocab_size}))
                    if out.tokens != reference:
                        raise AssertionError(f"{name} at {rtt_ms} ms gave other tokens: exactness broken")
                    runs.append(out)
                n = len(reference)
                out = runs[0]
                row = LatencyRow(name, rtt_ms, n, float(np.median([1e3 * r.decode_s / n for r in runs])),
                                 float(np.median([1e3 * (r.prefill_s + r.first_token_s) for r in runs])),
                                 sum(out.trace.accept_robot) / n, sum(out.trace.accept_cloud) / n,
                                 sum(a != b for a, b in zip(out.trace.aggregator, out.trace.aggregator[1:])))
                print(json.dumps({**asdict(row), "link": args.link, "payload": args.payload}), flush=True)
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
