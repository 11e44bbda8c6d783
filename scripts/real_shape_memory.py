"""Memory of the published-shape models (models/real_shapes.py), each built in a child process of its own.

    .venv/bin/python scripts/real_shape_memory.py                      # the sources of docs/real_shapes.md
    .venv/bin/python scripts/real_shape_memory.py qwen2-vl-7b-shape:layers=1

Per source and part: parameters (model, exits), the bytes they weigh, the process's RSS once built (less
its RSS before: Python, torch, the tokenizer) and its peak, the build time, and one prefill of a camera
frame + instruction at PromptConfig's budget (its time, its KV cache's bytes); for a verifier, one
verification round at γ = 4 and its exit heads' time with and without a 4,096-id shortlist. Prints Markdown.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

SOURCES = (("qwen2-vl-2b-shape:layers=2", "drafter"), ("qwen2-vl-2b-shape:layers=2", "verifier"),
           ("qwen2-vl-7b-shape:layers=2", "verifier"))


def rss_kib() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in KiB."""
    fields = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def measure(source: str, part: str) -> dict:
    import torch

    torch.set_num_threads(1)
    from edge_spec_ros.camera.synthetic import synthetic_camera_image
    from edge_spec_ros.models.pairs import count_parameters, load_pair

    load_pair(source, parts=())  # the tokenizer, built and cached before the baseline
    before, _ = rss_kib()
    t = time.perf_counter()
    pair = load_pair(source, parts=(part,))
    build_s = time.perf_counter() - t
    after, peak = rss_kib()
    model = pair.verifier if part == "verifier" else pair.drafter
    params = count_parameters(model.stack.model)
    exits = count_parameters(model.adapters) if part == "verifier" else 0
    prompt = pair.prompt_encoder().encode("find the silver bottle", synthetic_camera_image(seed=0))
    t = time.perf_counter()
    kv = model.start(prompt)
    prefill_s = time.perf_counter() - t
    kv_bytes = sum(x.numel() * x.element_size() for layer in kv.layers for x in (layer.keys, layer.values))
    heads = verification_heads(model, kv, prompt) if part == "verifier" else {}
    return {**heads, "source": source, "part": part, "parameters": params, "exit_parameters": exits,
            "weights_mib": (params + exits) * 4 / 2**20, "rss_mib": (after - before) / 1024,
            "peak_mib": peak / 1024, "build_s": build_s, "prompt_tokens": len(prompt), "prefill_s": prefill_s,
            "kv_kib": kv_bytes / 1024, "kv_kib_per_token": kv_bytes / 1024 / len(prompt)}


def verification_heads(verifier, kv, prompt, gamma: int = 4, shortlist: int = 4096, repeats: int = 3) -> dict:
    """One verification round of γ draft tokens (γ+1 positions), best of ``repeats``: its time, the first
    early exit's head (adapter, norm, LM head over V) and the same head over a ``shortlist`` of ids
    (``--exit-shortlist``); the decoder's time per layer is the round's less its heads, over L layers."""
    import torch

    from edge_spec_ros.cloud.session import shortlist_ids

    seq = prompt.input_ids.tolist() + list(range(1000, 1000 + gamma))
    first, L = len(prompt) - 1, verifier.num_layers
    rounds, heads = [], []
    for _ in range(repeats):
        fork = kv.fork(len(prompt))
        t = time.perf_counter()
        exits = list(verifier.exits(fork, seq, first))
        rounds.append(time.perf_counter() - t)
        heads.append(sum(e.head_s for e in exits if not e.is_final) / max(1, len(exits) - 1))
    short = verifier.stack.shortlist(shortlist_ids(shortlist, verifier.stack.vocab_size, seq[-gamma:]))
    hidden = torch.randn(gamma + 1, verifier.stack.model.config.text_config.hidden_size)
    short_s = []
    for _ in range(repeats):
        t = time.perf_counter()
        verifier.exit_logits(1, hidden, short)
        short_s.append(time.perf_counter() - t)
    round_s, head_s = min(rounds), min(heads)
    return {"round_s": round_s, "head_s": head_s, "head_shortlist_s": min(short_s),
            "layer_s": max(0.0, round_s - L * head_s) / L}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", help="SOURCE or SOURCE@PART (default: docs/real_shapes.md's)")
    parser.add_argument("--one", nargs=2, metavar=("SOURCE", "PART"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*args.one)))
        return
    runs = [tuple(s.split("@")) if "@" in s else (s, "verifier") for s in args.sources] or SOURCES
    print("| source | part | parameters (+ exits) | fp32 weights MiB | RSS built MiB | peak MiB | build s "
          "| prompt tokens | prefill s | KV KiB (per token) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    heads = []
    for source, part in runs:
        run = subprocess.run([sys.executable, __file__, "--one", source, part], capture_output=True, text=True)
        if run.returncode:
            print(f"| {source} | {part} | failed: {run.stderr.strip().splitlines()[-1][:80]} |||||||")
            continue
        r = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"| {source} | {part} | {r['parameters']:,} (+ {r['exit_parameters']:,}) | {r['weights_mib']:,.0f} "
              f"| {r['rss_mib']:,.0f} | {r['peak_mib']:,.0f} | {r['build_s']:.1f} | {r['prompt_tokens']} "
              f"| {r['prefill_s']:.2f} | {r['kv_kib']:,.0f} ({r['kv_kib_per_token']:.0f}) |", flush=True)
        if "round_s" in r:
            heads.append(r)
    if heads:
        print("\n| source | γ=4 round s | decoder layer s | exit head s (V) | exit head s (4,096 ids) |")
        print("|---|---|---|---|---|")
        for r in heads:
            print(f"| {r['source']} | {r['round_s']:.3f} | {r['layer_s']:.3f} | {r['head_s']:.3f} "
                  f"| {r['head_shortlist_s']:.4f} |")


if __name__ == "__main__":
    main()
