"""Fair sharing of one verifier: how much a hog slows another robot's decisions.

``edge-spec-ros bench fairness`` starts ``edge-spec-ros serve`` on 127.0.0.1 with the
embedded pair, once per server setting, and in each one measures a robot's decisions (the same greedy
decision, repeated) beside each of two hogs:

- a hog opening long prompts back to back (``--hog-prompt-tokens``, 16,384 by default: the server's
  prefill of them is cut into slices, each slice layer by layer, and the worker runs other sessions'
  work between the steps);
- a hog running cloud-only generations back to back (``--hog-generate-tokens`` each, 1,000 by default:
  generation yields after every token).

The robot's drafter runs on one torch thread (``ROBOT_THREADS``). Each hog is a process of its own (its client work does not compete with the robot's drafter for one
interpreter lock), bounded in time (``HOG_DEADLINE_S``, and it stops when the benchmark's process is
gone) and in requests. The measurement alternates: ``--block`` decisions alone (the hog paused: its
session closed, which cancels its work on the server), then the hog resumed, ``--hog-warm-s`` seconds
for its request to get under way, ``--block`` decisions beside it, ..., and a last alone block, until
``--decisions`` decisions beside the hog are taken. Alone and beside are thus taken seconds apart, so
a drift of the shared machine's load shows in both; each beside block's ratio to the alone blocks
around it is reported too (the spread). The load average is recorded at each block.

The settings are the server's ``--prefill-chunk-tokens`` (0: no bound in positions),
``--prefill-chunk-cells`` (query-key pairs per slice, 0: no bound; both 0: one slice of the whole
prompt) and ``--workers``. Reported per setting and hog: the robot's median and p95 decision latency
beside the hog and alone, their ratios, the blocks' ratios, the hog's completed requests, and whether
every decision was the verifier's own greedy output. Exit status 1 if a decision differed or failed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_spec_ros.config_cli import UsageError

REPLY_S = 600.0  # a long prefill on a slow machine (the hog waits; the robot's decisions are measured)
HOG_DEADLINE_S = 1800.0  # a hog process ends by itself after this, whatever the benchmark does
HOG_MAX_REQUESTS = 10_000  # and after this many requests
HOG_POLL_S = 0.1  # how often a hog looks at its run/stop events and its parent
HOG_START_S = 120.0  # a hog process's start (imports) on a loaded machine
HOG_PAUSE_S = 60.0  # a paused hog has closed its session within this
HOG_WARM_S = 3.0  # after resuming a hog, before the robot's block beside it: its request is under way
BLOCK = 2  # robot decisions per block (alone or beside), alternating
ROBOT_THREADS = 1  # torch threads of the robot's drafter (the benchmark's process)


@dataclass(frozen=True)
class Setting:
    """A server setting: prefill slices' bounds in positions and in attention cells (0: none; both 0:
    unsliced) and verification worker threads."""

    prefill_chunk_tokens: int
    workers: int
    prefill_chunk_cells: int = 0

    @property
    def label(self) -> str:
        bounds = ([f"{self.prefill_chunk_tokens} positions"] if self.prefill_chunk_tokens else []) \
            + ([f"{self.prefill_chunk_cells} cells"] if self.prefill_chunk_cells else [])
        chunk = f"prefill slices of {' / '.join(bounds)}" if bounds else "unsliced prefill"
        return f"{chunk}, {self.workers} worker{'s' if self.workers > 1 else ''}"


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def _hog_process(kind: str, endpoint: str, ids: np.ndarray, tokens: int, run, paused, quit_, sent, done,
                 errors, parent: int) -> None:
    """A hog in its own process: while ``run`` is set, long prompts (``kind`` "long_prompts") or long
    generations ("long_generations") back to back; when ``run`` is cleared, it closes its session (the
    server cancels its work) and sets ``paused``. Ends on ``quit_``, when its parent is gone, after
    ``HOG_DEADLINE_S`` or ``HOG_MAX_REQUESTS`` requests."""
    import torch

    torch.set_num_threads(1)
    from edge_spec_ros.edge.client import ClientConfig, VerifierClient, VerifierTimeout
    from edge_spec_ros.wire.messages import Generate, Open, Opened

    deadline = time.monotonic() + HOG_DEADLINE_S
    requests = 0

    def go_on() -> bool:
        return not quit_.is_set() and os.getppid() == parent and time.monotonic() < deadline \
            and requests < HOG_MAX_REQUESTS

    try:
        with VerifierClient(ClientConfig(endpoint=endpoint, open_timeout_s=REPLY_S, reply_timeout_s=REPLY_S)) as c:
            paused.set()
            while go_on():
                if not run.wait(HOG_POLL_S):
                    continue
                paused.clear()
                sid = uuid.uuid4().bytes
                c.register(sid)
                c.send(sid, Open(input_ids=ids, want_exits=False))
                requests += 1
                sent.value += 1
                stage = "prompt"
                while go_on() and run.is_set():
                    try:
                        reply = c.receive(sid, HOG_POLL_S)
                    except VerifierTimeout:
                        continue
                    if kind == "long_prompts" or stage == "generate" and reply.is_final:
                        done.value += 1
                        break
                    if isinstance(reply, Opened):  # then the whole budget, no stop token
                        c.send(sid, Generate(max_new_tokens=tokens))
                        stage = "generate"
                c.end(sid)  # Close cancels the work still under way
                if not run.is_set():
                    paused.set()
    except Exception as exc:  # a hog that fails measures nothing: reported, exit status 1
        errors.put(f"{kind}: {type(exc).__name__}: {exc}")
    finally:
        paused.set()


class Hog:
    """A hog process and its controls (``_hog_process``)."""

    def __init__(self, kind: str, endpoint: str, ids: np.ndarray, tokens: int) -> None:
        ctx = mp.get_context("spawn")  # no copy of the robot's threads and torch state
        self.run, self.paused, self.quit = ctx.Event(), ctx.Event(), ctx.Event()
        self.sent, self.done, self.errors = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Queue()
        self.proc = ctx.Process(target=_hog_process, args=(kind, endpoint, ids, tokens, self.run, self.paused,
                                                           self.quit, self.sent, self.done, self.errors,
                                                           os.getpid()),
                                daemon=True)
        self.proc.start()
        if not self.paused.wait(HOG_START_S):
            raise RuntimeError(f"the {kind} hog did not start within {HOG_START_S:.0f} s")

    def resume(self) -> None:
        self.paused.clear()
        self.run.set()

    def pause(self) -> None:
        self.run.clear()
        if not self.paused.wait(HOG_PAUSE_S):
            raise RuntimeError(f"a hog did not pause within {HOG_PAUSE_S:.0f} s")

    def stop(self) -> list[str]:
        self.run.clear()
        self.quit.set()
        self.proc.join(HOG_PAUSE_S)
        if self.proc.is_alive():
            self.proc.kill()
        errors = []
        while not self.errors.empty():
            errors.append(self.errors.get())
        return errors


def _load() -> float:
    return os.getloadavg()[0]


@dataclass(frozen=True)
class _Plan:
    """What every setting measures: the robot's decisions, in blocks, beside hogs of these sizes."""

    decisions: int
    mode: str
    hog_prompt_tokens: int
    hog_generate_tokens: int
    block: int
    hog_warm_s: float
    progress: Callable[[str], None]


@dataclass(frozen=True)
class _Workload:
    """The robot's decision (its prompt, image and the verifier's greedy reply) and the hogs' prompts."""

    pair: object
    config: object  # the decoding's DecodeConfig
    prompt: object
    jpg: bytes
    expected: list[int]
    long_ids: np.ndarray
    short_ids: np.ndarray


def _workload(hog_prompt_tokens: int, max_new_tokens: int) -> _Workload:
    from edge_spec_ros.camera.synthetic import synthetic_camera_image
    from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
    from edge_spec_ros.models.pairs import load_pair
    from edge_spec_ros.models.prompt import decode_image, encode_image

    pair = load_pair("embedded")
    encoder = pair.prompt_encoder()
    config = DecodeConfig(max_new_tokens=max_new_tokens, stop_tokens=(pair.tokenizer.eos_token_id,))
    jpg = encode_image(synthetic_camera_image())
    prompt = encoder.encode("find the silver bottle", decode_image(jpg))
    expected = autoregressive(pair.verifier, prompt, config).tokens
    text = pair.tokenizer("the robot walks past the red chair and looks for the silver bottle. ")["input_ids"]
    long_ids = np.resize(np.asarray(text, dtype=np.int32), hog_prompt_tokens)  # text only, no image tokens
    return _Workload(pair, config, prompt, jpg, expected, long_ids, long_ids[:64])


@dataclass(frozen=True)
class _Robot:
    """The robot's decisions in one setting: timed, and each compared with the verifier's greedy reply
    (a mismatch recorded in ``report``)."""

    decoder: object  # the EdgeDecoder on the setting's server
    work: _Workload
    mode: str
    setting: Setting
    report: dict

    def __call__(self, label: str, n: int) -> list[float]:
        latencies = []
        for _ in range(n):
            t0 = time.perf_counter()
            tokens = self.decoder.decode(self.mode, self.work.prompt, self.work.jpg).tokens
            latencies.append(time.perf_counter() - t0)
            if tokens != self.work.expected:
                self.report["exact"] = False
                self.report["mismatches"].append({"setting": self.setting.label, "measurement": label,
                                                  "tokens": tokens, "expected": self.work.expected})
        return latencies


@dataclass
class _Blocks:
    """One hog's measurement: the robot's blocks alone and beside it, the load average at each alone block."""

    alone: list[list[float]]
    loads: list[float]
    beside: list[list[float]] = field(default_factory=list)
    hog_sent: int = 0  # the hog's requests sent (each under way beside the robot or cancelled by a pause)
    hog_requests: int = 0  # the hog's completed requests

    def flat(self, blocks: list[list[float]]) -> list[float]:
        return [x for b in blocks for x in b]

    def row(self) -> dict:
        """Medians, p95s and their ratios beside / alone; each beside block against the alone blocks
        just before and after it."""
        alone, beside = self.flat(self.alone), self.flat(self.beside)
        block_ratios = [statistics.median(b) / statistics.median(self.alone[i] + self.alone[i + 1])
                        for i, b in enumerate(self.beside)]
        return {"median_ms": statistics.median(beside) * 1e3, "p95_ms": _percentile(beside, 95) * 1e3,
                "alone_median_ms": statistics.median(alone) * 1e3, "alone_p95_ms": _percentile(alone, 95) * 1e3,
                "slowdown_median": statistics.median(beside) / statistics.median(alone),
                "slowdown_p95": _percentile(beside, 95) / _percentile(alone, 95),
                "block_ratios": block_ratios,
                "beside_ms": [x * 1e3 for x in beside], "alone_ms": [x * 1e3 for x in alone],
                "load_average": self.loads,
                "hog_requests_sent": self.hog_sent, "hog_requests_completed": self.hog_requests}


def _alternate(robot: _Robot, hog: Hog, name: str, plan: _Plan, blocks: _Blocks) -> None:
    """Blocks beside the hog (resumed, warmed up) and alone (paused), until ``plan.decisions`` beside it."""
    while sum(map(len, blocks.beside)) < plan.decisions:
        hog.resume()
        time.sleep(plan.hog_warm_s)  # the hog's request is under way
        blocks.beside.append(robot(f"beside {name}", plan.block))
        hog.pause()
        blocks.alone.append(robot(f"alone, {name}", plan.block))
        blocks.loads.append(_load())


def _beside_hog(robot: _Robot, endpoint: str, name: str, ids: np.ndarray, tokens: int, plan: _Plan) -> _Blocks:
    """Start hog ``name``, measure the robot alone and beside it, stop the hog (its errors into the report)."""
    hog = Hog(name, endpoint, ids, tokens)
    blocks = _Blocks([robot(f"alone, {name}", plan.block)], [_load()])
    try:
        _alternate(robot, hog, name, plan, blocks)
    finally:
        robot.report["hog_errors"] += [f"{robot.setting.label}, {e}" for e in hog.stop()]
    blocks.hog_sent, blocks.hog_requests = hog.sent.value, hog.done.value
    return blocks


def _hog_line(label: str, name: str, entry: dict) -> str:
    ratios, loads = entry["block_ratios"], entry["load_average"]
    return (f"{label}, beside {name}: median {entry['median_ms']:.0f} ms, alone "
            f"{entry['alone_median_ms']:.0f} ms: {entry['slowdown_median']:.2f}× "
            f"(p95 {entry['slowdown_p95']:.2f}×; blocks "
            f"{', '.join(f'{r:.2f}' for r in ratios)}; load {min(loads):.1f}-{max(loads):.1f})")


def _server_args(setting: Setting, plan: _Plan) -> list[str]:
    return ["--threads", "1", "--workers", str(setting.workers),
            "--prefill-chunk-tokens", str(setting.prefill_chunk_tokens),
            "--prefill-chunk-cells", str(setting.prefill_chunk_cells),
            "--max-prompt-tokens", str(plan.hog_prompt_tokens), "--max-new-tokens", str(plan.hog_generate_tokens)]


def _measure_setting(setting: Setting, work: _Workload, plan: _Plan, report: dict) -> dict:
    """One server setting: its own server, the robot beside each hog in turn; the setting's row."""
    from edge_spec_ros.edge.client import ClientConfig, VerifierClient
    from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
    from edge_spec_ros.server_process import verifier_server

    row: dict = {"setting": setting.label, "prefill_chunk_tokens": setting.prefill_chunk_tokens,
                 "prefill_chunk_cells": setting.prefill_chunk_cells, "workers": setting.workers}
    with verifier_server(*_server_args(setting, plan)) as server, \
            VerifierClient(ClientConfig(endpoint=server.endpoint, reply_timeout_s=REPLY_S)) as client, \
            EdgeDecoder(client, work.pair.drafter, EdgeConfig(decode=work.config, threads=1)) as decoder:
        robot = _Robot(decoder, work, plan.mode, setting, report)
        robot("warm-up", plan.block)
        alone_all: list[float] = []
        for name, ids, tokens in (("long_prompts", work.long_ids, 0),
                                  ("long_generations", work.short_ids, plan.hog_generate_tokens)):
            blocks = _beside_hog(robot, server.endpoint, name, ids, tokens, plan)
            alone_all += blocks.flat(blocks.alone)
            row[name] = blocks.row()
            plan.progress(_hog_line(setting.label, name, row[name]))
        row["alone_ms"] = {"median": statistics.median(alone_all) * 1e3, "p95": _percentile(alone_all, 95) * 1e3}
    return row


def fairness(settings: list[Setting], decisions: int = 10, mode: str = "sd", hog_prompt_tokens: int = 16384,
             hog_generate_tokens: int = 1000, max_new_tokens: int = 24, block: int = BLOCK,
             hog_warm_s: float = HOG_WARM_S, progress: Callable[[str], None] = lambda line: None) -> dict:
    import torch

    # The robot's drafter on one thread, as on a robot's own computer: with torch's default (one thread
    # per core) its operations wait at a barrier for a thread the scheduler has given to the verifier's
    # hog, and the robot measures this machine's core count rather than the verifier's sharing.
    torch.set_num_threads(ROBOT_THREADS)
    block = max(1, min(block, decisions))
    plan = _Plan(decisions, mode, hog_prompt_tokens, hog_generate_tokens, block, hog_warm_s, progress)
    work = _workload(hog_prompt_tokens, max_new_tokens)
    report: dict = {"mode": mode, "decisions": decisions, "block": block, "hog_warm_s": hog_warm_s,
                    "hog_prompt_tokens": hog_prompt_tokens, "hog_generate_tokens": hog_generate_tokens,
                    "settings": [], "exact": True, "hog_errors": [], "mismatches": []}
    for setting in settings:
        report["settings"].append(_measure_setting(setting, work, plan, report))
    return report


def table(report: dict) -> str:
    lines = [f"robot: {report['decisions']} greedy {report['mode']} decisions beside each hog, in blocks of "
             f"{report['block']} alternating with blocks alone; hogs (own processes): {report['hog_prompt_tokens']}-token "
             f"prompts / {report['hog_generate_tokens']}-token generations back to back; slowdown = median (p95) "
             "latency beside the hog / alone, same server; [blocks: lowest-highest beside/alone ratio]; load average",
             "| server | alone ms (median) | beside long prompts | beside long generations | load |",
             "|---|---|---|---|---|"]
    for row in report["settings"]:
        cells = [f"{row[h]['slowdown_median']:.2f}× ({row[h]['slowdown_p95']:.2f}×) "
                 f"[{min(row[h]['block_ratios']):.2f}-{max(row[h]['block_ratios']):.2f}]"
                 for h in ("long_prompts", "long_generations")]
        loads = row["long_prompts"]["load_average"] + row["long_generations"]["load_average"]
        lines.append(f"| {row['setting']} | {row['alone_ms']['median']:.0f} | {cells[0]} | {cells[1]} | "
                     f"{min(loads):.1f}-{max(loads):.1f} |")
    lines.append("every decision equal to the verifier's greedy output" if report["exact"]
                 else "DIFFERENT decisions: see the JSON")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench fairness``."""
    parser.add_argument("--decisions", type=int, default=10, help="robot decisions per measurement")
    parser.add_argument("--mode", default="sd")
    parser.add_argument("--hog-prompt-tokens", type=int, default=16384)
    parser.add_argument("--hog-generate-tokens", type=int, default=1000)
    parser.add_argument("--chunks", default="256,0", help="server --prefill-chunk-tokens values (0: no bound)")
    parser.add_argument("--cells", default="262144", help="server --prefill-chunk-cells values (0: no bound)")
    parser.add_argument("--workers", default="1", help="server --workers values")
    parser.add_argument("--block", type=int, default=BLOCK, help="robot decisions per block, alone and beside")
    parser.add_argument("--hog-warm-s", type=float, default=HOG_WARM_S,
                        help="seconds between resuming a hog and the robot's block beside it")
    parser.add_argument("--out", default="artifacts/fairness.json")


def command(args: argparse.Namespace) -> int:
    if Path(args.out).is_dir():  # found before the run, not after it
        raise UsageError(f"--out {args.out} is a directory: give the JSON file's path")
    settings = [Setting(int(c), int(w), int(k)) for w in args.workers.split(",") for c in args.chunks.split(",")
                for k in args.cells.split(",")]
    report = fairness(settings, args.decisions, args.mode, args.hog_prompt_tokens, args.hog_generate_tokens,
                      block=args.block, hog_warm_s=args.hog_warm_s, progress=lambda line: print(line, flush=True))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(table(report))
    print(f"wrote {args.out}")
    for error in report["hog_errors"]:
        print(f"hog failed: {error}")
    return 0 if report["exact"] and not report["hog_errors"] else 1
