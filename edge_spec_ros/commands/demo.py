"""``edge-spec-ros demo``: decode one camera image + instruction locally, target-only vs speculative."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edge_spec_ros.commands.common import SOURCE_HELP, load_pair, log

DEFAULT_INSTRUCTION = "find the silver bottle"


def add_demo(sub) -> None:
    demo = sub.add_parser("demo", help="decode one image + instruction: target-only vs speculative",
                          description=__doc__.splitlines()[0], populate=demo_options)
    demo.set_defaults(func=cmd_demo)


def demo_options(demo: argparse.ArgumentParser) -> None:
    from edge_spec_ros.models.quantize import SCHEMES

    demo.add_argument("--instruction", default=DEFAULT_INSTRUCTION)
    demo.add_argument("--image", help="RGB image file (default: the simulated room's first frame)")
    demo.add_argument("--verifier", help=f"model source: {SOURCE_HELP} (default: embedded)")
    demo.add_argument("--drafter", help="model source of the drafter, sharing the verifier's tokenizer "
                                        "(default: the verifier's source)")
    demo.add_argument("--adapters", help="directory of trained exit adapters for the verifier")
    demo.add_argument("--quantize-drafter", default="none", choices=SCHEMES, metavar="SCHEME",
                      help="the drafter's quantization (docs/quantization.md)")
    demo.add_argument("--gamma", type=int, default=4, help="draft length γ (default 4)")
    demo.add_argument("--max-new-tokens", type=int, default=48)
    demo.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--max-pixels", type=int, default=0,
                      help="image pixel budget after resizing (0: the model's own; 112 x 112 for a checkpoint)")
    demo.add_argument("--json", help="also write the statistics to this JSON file")


def load_image(path: str | None, instruction: str):
    import numpy as np
    from PIL import Image

    if path is None:  # the simulated room's first frame, with the instruction's object in it if it names one
        from edge_spec_ros.sim.world import COLOURS_RGB, SHAPES, World

        words = instruction.lower().split()
        named = len(words) >= 2 and words[-2] in COLOURS_RGB and words[-1] in SHAPES
        return World.random(0, " ".join(words[-2:]) if named else "").render()
    try:
        return np.asarray(Image.open(path).convert("RGB"))
    except OSError as exc:
        raise SystemExit(f"cannot read image {path}: {exc}") from None


def stats_table(results: dict) -> str:
    rows = [
        ("tokens", "tokens", "{:d}"),
        ("rounds", "rounds", "{:d}"),
        ("τ tokens/round", "tau", "{:.2f}"),
        ("α acceptance", "alpha", "{:.2f}"),
        ("TTFT ms", "ttft_s", "ms"),
        ("per token ms", "per_token_s", "ms"),
        ("draft ms (Σ)", "draft_s", "ms"),
        ("verify ms (Σ)", "verify_s", "ms"),
        ("wall ms", "wall_s", "ms"),
    ]
    modes = list(results)
    lines = [f"{'':<16}" + "".join(f"{m:>12}" for m in modes)]
    for label, key, fmt in rows:
        cells = []
        for m in modes:
            v = results[m].stats.as_dict()[key]
            cells.append(f"{v * 1e3:12.1f}" if fmt == "ms" else f"{fmt.format(v):>12}")
        lines.append(f"{label:<16}" + "".join(cells))
    base = results[modes[0]].stats.wall_s
    lines.append(f"{'speedup vs ' + modes[0]:<16}" + "".join(f"{base / results[m].stats.wall_s:11.2f}x" for m in modes))
    return "\n".join(lines)


def cmd_demo(args: argparse.Namespace) -> int:
    from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
    from edge_spec_ros.models.prompt import PromptConfig, PromptEncoder
    from edge_spec_ros.spec.sampling import SamplingConfig

    if args.drafter and not args.verifier:
        raise SystemExit("--drafter needs --verifier (the pair must share one tokenizer)")
    pair = load_pair(args.verifier or "embedded", drafter=args.drafter, adapters=args.adapters,
                      quantize_drafter=args.quantize_drafter)
    encoder = PromptEncoder(pair.tokenizer, PromptConfig(max_pixels=args.max_pixels or pair.max_pixels))
    image = load_image(args.image, args.instruction)
    prompt = encoder.encode(args.instruction, image)
    config = DecodeConfig(
        max_new_tokens=args.max_new_tokens, gamma=args.gamma, sampling=SamplingConfig(args.temperature),
        seed=args.seed, stop_tokens=(pair.tokenizer.eos_token_id,),
    )
    log(f"image {image.shape[1]}x{image.shape[0]}, prompt {len(prompt)} tokens; decoding ...")
    results = {
        "target-only": autoregressive(pair.verifier, prompt, config),
        "speculative": speculative(pair.drafter, pair.verifier, prompt, config),
    }
    print(f"instruction: {args.instruction}")
    for mode, result in results.items():
        print(f"[{mode}] {encoder.decode(result.tokens)!r}")
    same = results["target-only"].tokens == results["speculative"].tokens
    kind = "greedy: identical token for token" if config.sampling.greedy else "sampled: equal in distribution"
    print(f"outputs {'match' if same else 'differ'} ({kind})\n")
    print(stats_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps({m: r.stats.as_dict() for m, r in results.items()}, indent=2))
    if config.sampling.greedy and not same:
        log("error: greedy speculative output differs from the target's own greedy output")
        return 1
    return 0
