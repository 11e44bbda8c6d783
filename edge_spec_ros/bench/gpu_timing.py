r"""Real compute times of a drafter and an early-exit verifier, for the ``go2-paper``-style profiles.

The ``go2-paper`` profile emulates the FSD paper's Go2 figures (Table 8: T_p = 72 ms per draft
forward on the Jetson Orin, T_q = 620 ms per verification of Qwen2-VL-7B with 27 exits, exit l of L
released at l/L of T_q). This script measures the same figures on the hardware it runs on, for the
real pair (Qwen2-VL-2B drafter, Qwen2-VL-7B verifier with exit adapters, bfloat16 on a GPU)::

    edge-spec-ros bench gpu-timing --verifier Qwen/Qwen2-VL-7B-Instruct \
        --drafter Qwen/Qwen2-VL-2B-Instruct --adapters exits_7b/ --dtype bfloat16 --device cuda \
        --out artifacts/gpu_timing.json

and writes, per repeat and as medians: the prefill of each model, T_p (one draft forward, from γ
tokens drafted greedily after the prompt), γ·T_p, T_q (one verification of γ + 1 positions, the
final exit) and the time at which each exit's logits are ready as a fraction of T_q (the profile's
"exit l at l/L" assumption, measured). ``edge-spec-ros bench --profile <the JSON file>`` then emulates
these T_p and T_q over ``go2-paper``'s link (``bench.profiles.profile_named``). The same command runs on the CPU with ``--verifier embedded`` (the tests do);
weights come from a local directory or the Hugging Face cache, as ``models.pairs.load_pair`` loads
them.

Legend: γ — draft length; T_p — one draft forward; T_q — one verification; L — final exit layer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from edge_spec_ros.bench.report import machine_stamp, pair_stamp
from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.config_cli import UsageError, add_config, config_from, doc
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig

INSTRUCTION = "find the silver bottle"
GREEDY = SamplingConfig(0.0)


@dataclass
class TimingConfig:
    """verifier / drafter: model sources (``load_pair``; drafter empty: the verifier source's own);
    adapters: exit-adapter directory for the verifier; dtype, device: of checkpoint weights; gamma:
    draft length γ; repeats: measured rounds (after ``warmup``)."""

    verifier: str = field(default="embedded", metadata=doc("verifier source (load_pair)"))
    drafter: str = field(default="", metadata=doc("drafter source (empty: the verifier's own)"))
    adapters: str = field(default="", metadata=doc("exit-adapter directory for the verifier"))
    dtype: str = field(default="float32", metadata=doc("checkpoint weights: float32, bfloat16, float16"))
    device: str = field(default="cpu", metadata=doc("cpu, cuda, cuda:1, ..."))
    gamma: int = field(default=4, metadata=doc("draft length γ", 1, 64))
    repeats: int = field(default=10, metadata=doc("measured rounds", 1, 10**6))
    warmup: int = field(default=2, metadata=doc("rounds before the measured ones", 0, 10**6))

    def __post_init__(self) -> None:
        if self.gamma < 1 or self.repeats < 1 or self.warmup < 0:
            raise ValueError(f"need gamma >= 1, repeats >= 1, warmup >= 0; got {self.gamma}, {self.repeats}, "
                             f"{self.warmup}")


@dataclass
class Timings:
    """Seconds, medians over the repeats; ``exit_fraction[l]``: exit l ready at that fraction of T_q."""

    prefill_verifier_s: float
    prefill_drafter_s: float
    tp_s: float
    draft_gamma_s: float
    tq_s: float
    exit_fraction: dict[int, float]
    rounds: list[dict] = field(default_factory=list)


def _clock(device: str) -> Callable[[], float]:
    """perf_counter after the device's queued work is done (CUDA kernels run asynchronously)."""
    if device.startswith("cuda"):
        def now() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()
        return now
    return time.perf_counter


def measure(config: TimingConfig, progress: Callable[[str], None] = lambda s: None) -> tuple[Timings, dict]:
    """Load the pair, then time ``warmup + repeats`` prefills and rounds; returns the timings and the stamp."""
    progress(f"loading {config.verifier}" + (f" + drafter {config.drafter}" if config.drafter else ""))
    pair = load_pair(config.verifier, drafter=config.drafter or None, adapters=config.adapters or None,
                     dtype=config.dtype, device=config.device)
    prompt = pair.prompt_encoder().encode(INSTRUCTION, synthetic_camera_image(seed=0))
    now = _clock(config.device)
    rows = []
    for i in range(config.warmup + config.repeats):
        t0 = now()
        vkv = pair.verifier.start(prompt)
        t1 = now()
        dkv = pair.drafter.start(prompt)
        t2 = now()
        prefix = prompt.input_ids.tolist()
        draft = pair.drafter.draft(dkv, prefix, config.gamma, GREEDY, PositionalRNG(0))
        t3 = now()
        sequence = prefix + list(draft.tokens)
        ready: dict[int, float] = {}
        t4 = now()
        with torch.inference_mode():
            for out in pair.verifier.exits(vkv, sequence, len(prefix) - 1):  # γ + 1 positions
                ready[out.layer] = now() - t4
        tq = ready[pair.verifier.num_layers]
        if i >= config.warmup:
            rows.append({"prefill_verifier_s": t1 - t0, "prefill_drafter_s": t2 - t1, "draft_gamma_s": t3 - t2,
                         "tq_s": tq, "exit_fraction": {l: t / tq for l, t in ready.items()}})
        progress(f"round {i + 1}/{config.warmup + config.repeats}: γT_p {(t3 - t2) * 1e3:.1f} ms, "
                 f"T_q {tq * 1e3:.1f} ms" + (" (warm-up)" if i < config.warmup else ""))

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    timings = Timings(prefill_verifier_s=med("prefill_verifier_s"), prefill_drafter_s=med("prefill_drafter_s"),
                      tp_s=med("draft_gamma_s") / config.gamma, draft_gamma_s=med("draft_gamma_s"), tq_s=med("tq_s"),
                      exit_fraction={l: statistics.median(r["exit_fraction"][l] for r in rows)
                                     for l in rows[0]["exit_fraction"]},
                      rounds=rows)
    stamp = {"machine": machine_stamp(), "pair": pair_stamp(config.verifier, pair.parameters()),
             "device": config.device, "dtype": config.dtype}
    return timings, stamp


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench gpu-timing``."""
    add_config(parser, TimingConfig)
    parser.add_argument("--out", default="", help="write the figures as JSON here")


def command(args: argparse.Namespace) -> int:
    config = config_from(TimingConfig, args)
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {config.device}: no CUDA device is visible to torch {torch.__version__}")
    timings, stamp = measure(config, lambda s: print(s, file=sys.stderr, flush=True))
    report = {"config": asdict(config), "stamp": stamp, **asdict(timings)}
    print(f"T_p {timings.tp_s * 1e3:.1f} ms, γT_p {timings.draft_gamma_s * 1e3:.1f} ms (γ = {config.gamma}), "
          f"T_q {timings.tq_s * 1e3:.1f} ms, prefill verifier {timings.prefill_verifier_s * 1e3:.1f} ms / "
          f"drafter {timings.prefill_drafter_s * 1e3:.1f} ms")
    print("exit ready at fraction of T_q: " + ", ".join(f"{l}: {f:.2f}" for l, f in timings.exit_fraction.items()))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2))
        print(f"wrote {args.out}; emulate these figures with: edge-spec-ros bench --profile {args.out}")
    return 0
