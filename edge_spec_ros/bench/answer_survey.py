"""What mode dragon's answers look like: the question set of ``dragon/bench/quality.py`` asked through
the robot's answer path (``dragon/robot.RobotDragon`` over a ``ZmqDragonLink`` to a ``VerifierServer``
with the item's documents, as ``nodes/dragon_answer.DragonAnswerer`` and ``serve --documents DIR
--dragon-model SOURCE`` run it), greedy, ending at eos or ``<|im_end|>``.

    edge-spec-ros bench answer-survey --model smollm2     # SmolLM2-135M-Instruct on both sides
    edge-spec-ros bench answer-survey --model embedded    # the shipped navigation pair

One JSON line per item on stdout (the answer's text, whether it holds a reference answer, tokens,
wall time from the question to the last token, S^l and S^r rates, memory entries read), then the
accuracy per kind of item (robot memory, cloud documents, both). The model source is loaded as
the node and ``serve`` load it: its drafter part on the robot, its verifier part in the cloud (one
checkpoint for ``smollm2``; the shipped pair's 3-layer drafter and 6-layer verifier for ``embedded``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from edge_spec_ros.cloud.server import ServerConfig, VerifierServer
from edge_spec_ros.dragon.bench.quality import DATA, NEEDS, contains_answer, load_items, write_item_world
from edge_spec_ros.dragon.document_lm import chat_prompt_ids, stop_token_ids
from edge_spec_ros.dragon.robot import DragonConfig, RobotDragon, ZmqDragonLink
from edge_spec_ros.dragon.session import DragonService, dragon_sessions
from edge_spec_ros.models.tokenizer import tokenizer_fingerprint

OPEN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class SurveyRow:
    id: str
    need: str
    question: str
    answer: str
    correct: bool
    tokens: int
    wall_s: float
    robot_acceptance: float
    cloud_acceptance: float
    memory_entries: int


def survey(model: str, data: str | Path = DATA, items: int = 0, max_new_tokens: int = 32,
           policy: str = "dragon") -> list[SurveyRow]:
    from edge_spec_ros.models.pairs import load_pair

    robot_pair = load_pair(model, parts=("drafter",))
    cloud_pair = load_pair(model, parts=("verifier",))
    encoder = robot_pair.prompt_encoder()
    stops = stop_token_ids(robot_pair.tokenizer)
    top_k, qa = load_items(data)
    rows = []
    for item in qa[:items] if items else qa:
        with tempfile.TemporaryDirectory(prefix="dragon-survey-") as tmp:
            memory, _ = write_item_world(item, Path(tmp))
            service = DragonService(cloud_pair.verifier.stack, cloud_pair.prompt_encoder(), Path(tmp) / "docs")
            server = VerifierServer(cloud_pair.verifier, cloud_pair.prompt_encoder(), ServerConfig(
                bind="tcp://127.0.0.1:*", idle_exit_s=OPEN_TIMEOUT_S), dragon_sessions(service))
            endpoint = server.start()
            try:
                robot = RobotDragon(robot_pair.drafter.stack, memory, chat_prompt_ids(encoder),
                                    robot_pair.tokenizer.decode, DragonConfig(
                                        max_new_tokens=max_new_tokens, robot_top_k=top_k, cloud_top_k=top_k,
                                        policy=policy, timeout_s=OPEN_TIMEOUT_S),
                                    tokenizer_fingerprint=tokenizer_fingerprint(robot_pair.tokenizer))
                start = time.monotonic()
                out = robot.decode(item.question, ZmqDragonLink(endpoint, open_timeout_s=OPEN_TIMEOUT_S), stops)
                wall = time.monotonic() - start
            finally:
                server.stop()
        text = encoder.decode(list(out.tokens)).strip()
        n = max(1, len(out.trace.accept_robot))
        rows.append(SurveyRow(item.id, item.need, item.question, text, contains_answer(text, item.answers),
                              len(out.tokens), wall, sum(map(bool, out.trace.accept_robot)) / n,
                              sum(map(bool, out.trace.accept_cloud)) / n, out.memory_entries))
    return rows


def summary(rows: Sequence[SurveyRow]) -> list[dict]:
    out = []
    for need in (*NEEDS, "all"):
        sel = [r for r in rows if need == "all" or r.need == need]
        if sel:
            out.append({"need": need, "items": len(sel), "accuracy": sum(r.correct for r in sel) / len(sel),
                        "mean_tokens": sum(r.tokens for r in sel) / len(sel),
                        "mean_wall_s": sum(r.wall_s for r in sel) / len(sel)})
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench answer-survey``."""
    parser.add_argument("--model", default="smollm2", help="model source (models/pairs.py) on both sides")
    parser.add_argument("--data", default=str(DATA),
                        help="the question set (default: the package's dragon/bench/data/dragon_qa.json)")
    parser.add_argument("--items", type=int, default=0, help="the first N items (0: all)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--policy", default="dragon", help="aggregator placement: dragon | robot | cloud")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both sides share them)")


def command(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    rows = survey(args.model, args.data, args.items, args.max_new_tokens, args.policy)
    for r in rows:
        print(json.dumps(asdict(r)), flush=True)
    for s in summary(rows):
        print(json.dumps(s), file=sys.stderr, flush=True)
    return 0
