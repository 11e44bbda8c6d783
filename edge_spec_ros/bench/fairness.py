"""Fair sharing of one verifier: how much a hog slows another robot's decisions.

``python -m edge_spec_ros.bench.fairness`` starts ``edge-spec-ros serve`` on 127.0.0.1 with the
embedded pair, once per server setting, and in each one measures a robot's decisions (the same greedy
decision, repeated) side by side:

- alone, just before and just after each hog (their median is the reference: load drifts);
- while a hog client opens long prompts back to back (``--hog-prompt-tokens``, 16,384 by default: the
  server's prefill of them is cut into slices of ``--prefill-chunk-tokens`` positions, each slice
  layer by layer, and the worker runs other sessions' work between the steps);
- while a hog client runs cloud-only generations back to back (``--hog-generate-tokens`` each,
  generation yields after every token).

The settings are the server's ``--prefill-chunk-tokens`` (0: no bound in positions),
``--prefill-chunk-cells`` (query-key pairs per slice, 0: no bound; both 0: one slice of the whole
prompt) and ``--workers``. Reported per setting and hog: the robot's median and p95 decision latency, the ratio to
"alone" in the same server, the hog's completed requests, and whether every decision was the
verifier's own greedy output. Exit status 1 if a decision differed or failed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPLY_S = 600.0  # a long prefill on a slow machine (the hog waits; the robot's decisions are measured)
HOG_JOIN_S = 60.0
HOG_POLL_S = 0.2


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


def _hog_prompts(endpoint: str, ids: np.ndarray, stop: threading.Event, done: list[int]) -> None:
    from edge_spec_ros.edge.client import ClientConfig, VerifierClient, VerifierTimeout
    from edge_spec_ros.wire.messages import Open

    with VerifierClient(ClientConfig(endpoint=endpoint)) as c:
        while not stop.is_set():
            sid = uuid.uuid4().bytes
            c.register(sid)
            c.send(sid, Open(input_ids=ids, want_exits=False))
            while not stop.is_set():
                try:
                    c.receive(sid, HOG_POLL_S)  # Opened: the whole prompt is prefilled
                    done[0] += 1
                    break
                except VerifierTimeout:
                    pass
            c.end(sid)  # Close cancels a prefill still under way


def _hog_generations(endpoint: str, ids: np.ndarray, tokens: int, stop: threading.Event, done: list[int]) -> None:
    from edge_spec_ros.edge.client import ClientConfig, VerifierClient
    from edge_spec_ros.wire.messages import Generate, Open

    with VerifierClient(ClientConfig(endpoint=endpoint, open_timeout_s=REPLY_S, reply_timeout_s=REPLY_S)) as c:
        while not stop.is_set():
            sid, _ = c.open(Open(input_ids=ids, want_exits=False))
            c.send(sid, Generate(max_new_tokens=tokens))  # no stop token: the whole budget
            while not c.receive(sid).is_final and not stop.is_set():
                pass
            c.end(sid)
            done[0] += 1


def fairness(settings: list[Setting], decisions: int = 10, mode: str = "sd", hog_prompt_tokens: int = 16384,
             hog_generate_tokens: int = 1000, max_new_tokens: int = 24,
             progress: Callable[[str], None] = lambda line: None) -> dict:
    from edge_spec_ros.camera.synthetic import synthetic_camera_image
    from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
    from edge_spec_ros.edge.client import ClientConfig, VerifierClient
    from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
    from edge_spec_ros.models.pairs import load_pair
    from edge_spec_ros.models.prompt import decode_image, encode_image
    from edge_spec_ros.server_process import verifier_server

    pair = load_pair("embedded")
    encoder = pair.prompt_encoder()
    config = DecodeConfig(max_new_tokens=max_new_tokens, stop_tokens=(pair.tokenizer.eos_token_id,))
    jpg = encode_image(synthetic_camera_image())
    prompt = encoder.encode("find the silver bottle", decode_image(jpg))
    expected = autoregressive(pair.verifier, prompt, config).tokens
    text = pair.tokenizer("the robot walks past the red chair and looks for the silver bottle. ")["input_ids"]
    long_ids = np.resize(np.asarray(text, dtype=np.int32), hog_prompt_tokens)  # text only, no image tokens
    short_ids = long_ids[:64]
    report: dict = {"mode": mode, "decisions": decisions, "hog_prompt_tokens": hog_prompt_tokens,
                    "hog_generate_tokens": hog_generate_tokens, "settings": [], "exact": True,
                    "hog_errors": [], "mismatches": []}

    for setting in settings:
        args = ["--threads", "1", "--workers", str(setting.workers),
                "--prefill-chunk-tokens", str(setting.prefill_chunk_tokens),
                "--prefill-chunk-cells", str(setting.prefill_chunk_cells),
                "--max-prompt-tokens", str(hog_prompt_tokens), "--max-new-tokens", str(hog_generate_tokens)]
        row: dict = {"setting": setting.label, "prefill_chunk_tokens": setting.prefill_chunk_tokens,
                     "prefill_chunk_cells": setting.prefill_chunk_cells, "workers": setting.workers}
        with verifier_server(*args) as server, \
                VerifierClient(ClientConfig(endpoint=server.endpoint, reply_timeout_s=REPLY_S)) as client, \
                EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config, threads=1)) as decoder:

            def robot(label: str) -> list[float]:
                latencies = []
                for _ in range(decisions):
                    t0 = time.perf_counter()
                    tokens = decoder.decode(mode, prompt, jpg).tokens
                    latencies.append(time.perf_counter() - t0)
                    if tokens != expected:
                        report["exact"] = False
                        report["mismatches"].append({"setting": setting.label, "measurement": label,
                                                     "tokens": tokens, "expected": expected})
                progress(f"{setting.label}, {label}: median {statistics.median(latencies) * 1e3:.0f} ms")
                return latencies

            robot("warm-up")
            alone_all: list[float] = []
            for name, (target, extra) in {"long_prompts": (_hog_prompts, (long_ids,)),
                                          "long_generations": (_hog_generations, (short_ids, hog_generate_tokens)),
                                          }.items():
                # alone just before and just after the hog: a baseline that drifts with the machine's load
                # shows as a spread between the two, and their median is the reference
                before = robot(f"alone before {name}")
                stop, done = threading.Event(), [0]

                def run_hog(target=target, extra=extra, stop=stop, done=done, name=name) -> None:
                    try:
                        target(server.endpoint, *extra, stop, done)
                    except Exception as exc:  # a hog that fails measures nothing: reported, exit status 1
                        report["hog_errors"].append(f"{setting.label}, {name}: {type(exc).__name__}: {exc}")

                hog = threading.Thread(target=run_hog, daemon=True)
                hog.start()
                time.sleep(1.0)  # the hog's first request is under way
                with_hog = robot(f"beside {name}")
                stop.set()
                hog.join(HOG_JOIN_S)
                after = robot(f"alone after {name}")
                alone = before + after
                alone_all += alone
                row[name] = {"median_ms": statistics.median(with_hog) * 1e3, "p95_ms": _percentile(with_hog, 95) * 1e3,
                             "alone_before_ms": statistics.median(before) * 1e3,
                             "alone_after_ms": statistics.median(after) * 1e3,
                             "slowdown_median": statistics.median(with_hog) / statistics.median(alone),
                             "slowdown_p95": _percentile(with_hog, 95) / _percentile(alone, 95),
                             "hog_requests_completed": done[0]}
            row["alone_ms"] = {"median": statistics.median(alone_all) * 1e3, "p95": _percentile(alone_all, 95) * 1e3}
        report["settings"].append(row)
    return report


def table(report: dict) -> str:
    lines = [f"robot: {report['decisions']} greedy {report['mode']} decisions per measurement; hogs: "
             f"{report['hog_prompt_tokens']}-token prompts / {report['hog_generate_tokens']}-token generations "
             "back to back; slowdown = median (p95) latency beside the hog / alone just before and after it, same server",
             "| server | alone ms (median) | beside long prompts | beside long generations |",
             "|---|---|---|---|"]
    for row in report["settings"]:
        cells = [f"{row[h]['slowdown_median']:.2f}× ({row[h]['slowdown_p95']:.2f}×)"
                 for h in ("long_prompts", "long_generations")]
        lines.append(f"| {row['setting']} | {row['alone_ms']['median']:.0f} | {cells[0]} | {cells[1]} |")
    lines.append("every decision equal to the verifier's greedy output" if report["exact"]
                 else "DIFFERENT decisions: see the JSON")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=10, help="robot decisions per measurement")
    parser.add_argument("--mode", default="sd")
    parser.add_argument("--hog-prompt-tokens", type=int, default=16384)
    parser.add_argument("--hog-generate-tokens", type=int, default=1000)
    parser.add_argument("--chunks", default="256,0", help="server --prefill-chunk-tokens values (0: no bound)")
    parser.add_argument("--cells", default="262144", help="server --prefill-chunk-cells values (0: no bound)")
    parser.add_argument("--workers", default="1", help="server --workers values")
    parser.add_argument("--out", default="artifacts/fairness.json")
    args = parser.parse_args(argv)
    if Path(args.out).is_dir():  # found before the run, not after it
        parser.error(f"--out {args.out} is a directory: give the JSON file's path")
    settings = [Setting(int(c), int(w), int(k)) for w in args.workers.split(",") for c in args.chunks.split(",")
                for k in args.cells.split(",")]
    report = fairness(settings, args.decisions, args.mode, args.hog_prompt_tokens, args.hog_generate_tokens,
                      progress=lambda line: print(line, flush=True))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(table(report))
    print(f"wrote {args.out}")
    for error in report["hog_errors"]:
        print(f"hog failed: {error}")
    return 0 if report["exact"] and not report["hog_errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
