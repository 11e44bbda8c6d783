"""``edge-spec-ros serve``: the cloud verifier (ZeroMQ ROUTER), its options ``ServerConfig``'s and
``Limits``' fields, and the DRAGON decisions it hosts beside verification (``--documents``,
``--dragon-model``: dragon/session.py); ``edge-spec-ros replicas``: the same verifier as Ray replicas
behind one front."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from edge_spec_ros.commands.common import SOURCE_HELP, load_pair, load_verifier, log, set_threads

SERVE_POLL_S = 0.1  # the serve loop wakes this often (a SIGTERM is acted on within it)
SERVE_SWITCH_INTERVAL_S = 0.0005  # the verifier process's GIL switch interval (CPython's default: 5 ms)
# serve's older spellings of ServerConfig's fields
SERVE_FLAGS = {"session_timeout_s": "--session-timeout", "idle_exit_s": "--idle-exit"}


def add_serve(sub) -> None:
    serve = sub.add_parser("serve", help="run the cloud verifier", populate=serve_options,
                           description="the cloud verifier (ZeroMQ ROUTER): docs/verifier.md; its limits and "
                                       "scheduling options are ServerConfig's and Limits' fields")
    serve.set_defaults(func=cmd_serve)
    replicas = sub.add_parser("replicas", help="the verifier as Ray replicas behind one ZeroMQ front (docs/fleet.md)",
                              description="the verifier as Ray replicas behind one ZeroMQ front (cloud/replicas.py)",
                              populate=replicas_options)
    replicas.set_defaults(func=cmd_replicas)


def serve_options(serve: argparse.ArgumentParser) -> None:
    from edge_spec_ros.cloud.server import ServerConfig
    from edge_spec_ros.config_cli import add_config

    serve.add_argument("--verifier", default="embedded", help=f"model source: {SOURCE_HELP}")
    serve.add_argument("--adapters", help="directory of trained exit adapters")
    serve.add_argument("--dtype", default="bfloat16",
                       help="weights dtype for a checkpoint (a train-sim-pair pair runs in float32)")
    serve.add_argument("--device", default="cuda",
                       help="torch device for a checkpoint (a train-sim-pair pair runs on the CPU)")
    serve.add_argument("--curve-keys", help="directory made by `edge-spec-ros keys` (enables CURVE)")
    serve.add_argument("--max-pixels", type=int, default=0,
                       help="image pixel budget after resizing (0: the model's own; 112 x 112 for a checkpoint)")
    serve.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    serve.add_argument("--batch", action="store_true",
                       help="batched verification: the pending rounds of up to --max-batch sessions go through the "
                            "verifier in one forward (docs/fleet.md)")
    add_config(serve, ServerConfig, skip=("curve",), flags=SERVE_FLAGS, defaults={"max_batch": 8},
               helps={"max_batch": "with --batch (without: 1)"})
    serve.add_argument("--documents", default="",
                       help="DRAGON: the cloud's document folder (*.txt, *.md; one document per paragraph); without "
                            "it DRAGON decisions are refused (default '')")
    serve.add_argument("--dragon-model", metavar="SOURCE",
                       help=f"DRAGON: answer over --documents with this model ({SOURCE_HELP}; at --dtype on --device) "
                            "instead of --verifier's; the robot's dragon_model must be the same source")


def _checked_keys(args: argparse.Namespace):
    """(CURVE keys or None, 0), or (None, 2) after one line naming what is refused; before the slow imports."""
    from edge_spec_ros.wire.curve import KeyFileError, server_keys

    try:
        curve = server_keys(Path(args.curve_keys) / "server.key_secret", Path(args.curve_keys) / "authorized") \
            if args.curve_keys else None
    except KeyFileError as exc:
        log(f"error: {exc}")
        return None, 2
    if args.documents and not Path(args.documents).is_dir():
        log(f"error: --documents {args.documents} is not a folder")
        return None, 2
    if args.dragon_model and not args.documents:
        log("error: --dragon-model answers DRAGON decisions over --documents DIR: give the folder too")
        return None, 2
    return curve, 0


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    curve, refused = _checked_keys(args)
    if refused:
        return refused
    from edge_spec_ros.cloud.server import ServerConfig, VerifierServer
    from edge_spec_ros.config_cli import config_from
    from edge_spec_ros.dragon.session import DragonService, dragon_sessions
    from edge_spec_ros.models.prompt import PromptConfig, PromptEncoder

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A busy I/O thread (a flood) holds the GIL; a worker waits up to one switch interval each time it
    # takes it back between torch ops. A short interval keeps a prefill from crawling meanwhile.
    sys.setswitchinterval(SERVE_SWITCH_INTERVAL_S)
    set_threads(args.threads)
    pair = load_verifier(args)
    dragon = dragon_service(args) if args.dragon_model else None  # the robot's dragon_model, on this side
    try:
        config = config_from(ServerConfig, args, curve=curve, max_batch=args.max_batch if args.batch else 1)
    except ValueError as exc:
        log(f"error: {exc}")
        return 2
    max_pixels = args.max_pixels or pair.max_pixels
    encoder = PromptEncoder(pair.tokenizer, PromptConfig(max_pixels=max_pixels))
    # with --dragon-model, DRAGON decisions over the folder with that LM, else with the verifier's
    if dragon is None and args.documents:
        dragon = DragonService(pair.verifier.stack, encoder, args.documents)
    server = VerifierServer(pair.verifier, encoder, config, dragon_sessions(dragon))
    endpoint = server.start()
    if config.emulate_tq_s:
        log(f"emulating T_q = {config.emulate_tq_s * 1e3:.0f} ms per verification forward")
    log(f"limits: {config.limits}, largest frame {server.max_message_bytes} bytes")
    print(f"listening on {endpoint}", flush=True)
    _serve_until_stopped(server)


def _serve_until_stopped(server) -> None:
    import os
    import signal

    # The handler only appends to a list: taking a lock there (Event.set) can deadlock with the main
    # thread, which the signal interrupts while it may hold that very lock.
    terminated: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: terminated.append(signum))
    try:
        while not terminated and not server.wait(SERVE_POLL_S):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        ended = server.stop()
        log(f"stopped; counters: {json.dumps(server.stats())}")
    # Exit at once: the interpreter's teardown of torch and transformers takes seconds, and a worker
    # may still be inside a forward pass (not ended); a stopped server has nothing left to release.
    if not ended:
        log("a worker was still busy: exiting without waiting for it")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def dragon_service(args: argparse.Namespace):
    """``serve --dragon-model SOURCE``: the cloud side of DRAGON over ``--documents`` with that source's
    LM (its verifier part's stack, at ``--dtype`` on ``--device``), the same source as the robot's
    ``dragon_model``: both sides aggregate over one vocabulary."""
    from edge_spec_ros.dragon.session import DragonService

    dragon_pair = load_pair(args.dragon_model, parts=("verifier",), dtype=args.dtype, device=args.device)
    service = DragonService(dragon_pair.verifier.stack, dragon_pair.prompt_encoder(), args.documents)
    log(f"DRAGON: {args.dragon_model} (vocabulary {dragon_pair.verifier.stack.vocab_size}) over "
        f"{len(service.store)} documents in {args.documents}")
    return service


def replicas_options(parser: argparse.ArgumentParser) -> None:
    from edge_spec_ros.cloud.replicas import add_arguments

    add_arguments(parser)


def cmd_replicas(args: argparse.Namespace) -> int:
    from edge_spec_ros.cloud.replicas import command

    return command(args)
