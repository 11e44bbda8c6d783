"""The drafter's quantization schemes side by side, in one run: draft speed and agreement.

For each pair and each scheme of ``models/quantize.py`` that runs on the CPU, the drafter (the same
float weights, quantized by the scheme) decodes every prompt by greedy speculative decoding at γ = 4
against the pair's own float verifier (``decoding.reference.speculative``). Reported per scheme:
T_p, the drafter's time per drafted token (ms), the ratio to the
float drafter's T_p, τ (tokens committed per round) and α (accepted / drafted), and whether every
output equals the verifier's own greedy answer (it must: the verifier decides every token). Every
scheme decodes a prompt before the next prompt, so a load that comes and goes on the machine falls
on all of them alike. The figures of torch.ao.quantization's dynamic int8, which this replaced, are
in docs/quantization.md.

Pairs: ``embedded`` (the shipped pair, ``load_pair()``; frames of the simulated room with a "find the
<colour> <shape>" instruction) and ``smollm2`` (SmolLM2-135M converted locally, ``models/smollm2.py``;
its self-drafter: the first ``--draft-layers`` layers, headed by the exit adapters of ``--adapters``
or by the final norm and LM head (the logit lens) without; the text tasks' prompts).

Run: ``edge-spec-ros bench quant-survey [--pairs embedded,smollm2] [--prompts 8] [--smollm2-prompts 3]
[--threads 1] [--out FILE.json]`` (docs/quantization.md).

Legend: γ — draft length; τ — tokens committed per round; α — acceptance rate; T_p — one draft step.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from dataclasses import asdict, dataclass

import torch

from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.pairs import EMBEDDED, SMOLLM2, load_pair
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.models.quantize import SCHEMES, quantize
from edge_spec_ros.models.verifier import EarlyExitVerifier

GAMMA = 4
CPU_SCHEMES = tuple(name for name, s in SCHEMES.items() if "cpu" in s.devices)


@dataclass(frozen=True)
class Row:
    pair: str
    scheme: str
    prompts: int
    tokens: int
    tp_ms: float  # drafter time per drafted token
    tp_ratio: float  # tp_ms / the float drafter's
    tau: float
    alpha: float
    exact: bool  # every output equals the verifier's own greedy answer


def embedded_prompts(pair, count: int) -> list[EncodedPrompt]:
    """``count`` frames of the simulated room, each with a "find the <colour> <shape>" instruction."""
    from edge_spec_ros.sim.world import COLOURS_RGB, SHAPES, World

    encoder = pair.prompt_encoder()
    targets = [f"{c} {s}" for s in SHAPES for c in COLOURS_RGB]
    return [encoder.encode(f"find the {targets[i * 7 % len(targets)]}",
                           World.random(i, targets[i * 7 % len(targets)]).render()) for i in range(count)]


def smollm2_prompts(pair, count: int) -> list[EncodedPrompt]:
    """The text tasks' first prompts, one kind after another."""
    from edge_spec_ros.bench.tasks import TASK_KINDS, task_prompts, text_encoder

    found = task_prompts(text_encoder(pair.tokenizer), per_task=-(-count // len(TASK_KINDS)))
    by_kind = [p for i in range(len(found)) for p in found[i::len(found)]]
    return [p.prompt for p in by_kind[:count]]


def survey(name: str, drafter_model: torch.nn.Module, verifier: EarlyExitVerifier,
           prompts: list[EncodedPrompt], schemes: dict, max_new_tokens: int, stop: tuple[int, ...],
           log=print) -> list[Row]:
    """One Row per scheme: each quantizes a copy of ``drafter_model``; prompt by prompt, every scheme
    decodes it in turn (a load that comes and goes on the machine falls on all of them alike)."""
    config = DecodeConfig(max_new_tokens=max_new_tokens, gamma=GAMMA, stop_tokens=stop)
    drafters = {scheme: Drafter(apply(copy.deepcopy(drafter_model))) for scheme, apply in schemes.items()}
    totals = {scheme: dict(tokens=0, rounds=0, drafted=0, accepted=0, draft_s=0.0, exact=True) for scheme in schemes}
    for i, prompt in enumerate(prompts):
        answer = autoregressive(verifier, prompt, config).tokens
        for scheme, drafter in drafters.items():
            result = speculative(drafter, verifier, prompt, config)
            s, t = result.stats, totals[scheme]
            t["exact"] &= result.tokens == answer
            for key in ("tokens", "rounds", "drafted", "accepted", "draft_s"):
                t[key] += getattr(s, key)
        log(f"{name}: prompt {i + 1}/{len(prompts)} done")
    rows: list[Row] = []
    for scheme, t in totals.items():
        tp_ms = 1e3 * t["draft_s"] / max(t["drafted"], 1)
        base = rows[0].tp_ms if rows else tp_ms
        rows.append(Row(name, scheme, len(prompts), t["tokens"], round(tp_ms, 3), round(tp_ms / base, 3),
                        round(t["tokens"] / max(t["rounds"], 1), 3), round(t["accepted"] / max(t["drafted"], 1), 3),
                        t["exact"]))
        log(f"{name:9s} {scheme:14s} T_p {tp_ms:8.2f} ms ({tp_ms / base:5.2f}x)  τ {rows[-1].tau:.2f}  "
            f"α {rows[-1].alpha:.2f}  exact {t['exact']}")
    return rows


def cpu_schemes() -> dict:
    """Scheme name → model → quantized model, for every scheme that runs on the CPU."""
    return {name: (lambda m, n=name: quantize(m, n, "cpu")) for name in CPU_SCHEMES}


def run(pairs: list[str], prompts: int, smollm2_prompts_n: int, max_new_tokens: int, draft_layers: int,
        adapters: str | None, log=print) -> list[Row]:
    rows: list[Row] = []
    if "embedded" in pairs:
        pair = load_pair(EMBEDDED)
        rows += survey("embedded", pair.drafter.stack.model, pair.verifier, embedded_prompts(pair, prompts),
                       cpu_schemes(), max_new_tokens, (pair.tokenizer.eos_token_id,), log)
    if "smollm2" in pairs:
        pair = load_pair(SMOLLM2, adapters=adapters, draft_layers=draft_layers)
        prompts_ = smollm2_prompts(pair, smollm2_prompts_n)
        rows += survey("smollm2", pair.drafter.stack.model, pair.verifier, prompts_, cpu_schemes(), max_new_tokens,
                       (pair.tokenizer.eos_token_id,), log)
    return rows


def table(rows: list[Row]) -> str:
    """A Markdown table of the rows."""
    lines = ["| pair | scheme | prompts | tokens | T_p (ms / draft token) | T_p / float | τ (γ = 4) | α | "
             "output = verifier's |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.pair} | {r.scheme} | {r.prompts} | {r.tokens} | {r.tp_ms:.2f} | {r.tp_ratio:.2f}× | "
              f"{r.tau:.2f} | {r.alpha:.2f} | {'yes' if r.exact else 'NO'} |" for r in rows]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench quant-survey``."""
    parser.add_argument("--pairs", default="embedded,smollm2", help="comma-separated: embedded, smollm2")
    parser.add_argument("--prompts", type=int, default=8, help="prompts of the embedded pair")
    parser.add_argument("--smollm2-prompts", type=int, default=3, help="prompts of smollm2")
    parser.add_argument("--max-new-tokens", type=int, default=24, help="tokens per answer")
    parser.add_argument("--draft-layers", type=int, default=24,
                        help="smollm2's self-drafter depth (of 30: the logit lens agrees from about there)")
    parser.add_argument("--adapters", help="smollm2's exit adapters (default: none, the logit lens)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", help="also write the rows to this JSON file")


def command(args: argparse.Namespace) -> int:
    pairs = [p for p in args.pairs.split(",") if p]
    unknown = set(pairs) - {"embedded", "smollm2"}
    if unknown:
        raise SystemExit(f"unknown pairs {sorted(unknown)}: choose from embedded, smollm2")
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    rows = run(pairs, args.prompts, args.smollm2_prompts, args.max_new_tokens, args.draft_layers, args.adapters)
    print(f"\n{table(rows)}\n\n(torch {torch.__version__}, {args.threads} thread(s), {time.perf_counter() - t0:.0f} s)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=1)
    return 0
