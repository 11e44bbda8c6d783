"""What several commands share: the log line, loading a model source, the source's help."""

from __future__ import annotations

import argparse
import sys

SOURCE_HELP = ("'embedded' (the shipped pair), 'smollm2' (SmolLM2-135M-Instruct, converted once), "
               "'qwen2-vl-2b-shape' / 'qwen2-vl-7b-shape' (random weights at the published shapes, "
               "':layers=N' for less depth: docs/real_shapes.md), a train-sim-pair or Qwen2-VL checkpoint "
               "directory, or a hub id (docs/models.md)")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_pair(source: str, **options):
    """``models.pairs.load_pair`` (``embedded``, ``smollm2``, a directory or a hub id); a source that
    cannot be loaded here is one line and exit 1."""
    from edge_spec_ros.models.pairs import ModelSourceError, load_pair as load

    parts = options.get("parts", ("drafter", "verifier"))
    log(f"loading the {' and '.join(parts) or 'tokenizer'} of {source} ...")
    try:
        return load(source, log=log, **options)
    except ModelSourceError as exc:
        raise SystemExit(f"error: {exc}") from None


def load_verifier(args: argparse.Namespace):
    """The verifier part of --verifier (with --adapters, --dtype and --device) for serve and train-exits."""
    return load_pair(args.verifier, parts=("verifier",), adapters=args.adapters, dtype=args.dtype,
                     device=args.device)


def set_threads(threads: int) -> None:
    """``--threads N``: torch CPU threads (0: torch's default)."""
    if threads:
        import torch

        torch.set_num_threads(threads)
