"""``edge-spec-ros bench``: AR, SD and FSD side by side over an emulated link, its options
``BenchConfig``'s fields; ``edge-spec-ros bench NAME``: the project's other benchmarks (``BENCHES``)."""

from __future__ import annotations

import argparse
import importlib

from edge_spec_ros.commands.common import SOURCE_HELP, load_pair, log
from edge_spec_ros.config_cli import LazyParser, UsageError

# sub-command -> (module of edge_spec_ros/bench with add_arguments and command, or its dotted path under
# edge_spec_ros/ when it lives elsewhere (DRAGON's: dragon/bench/), its help line)
BENCHES: dict[str, tuple[str, str]] = {
    "fleet": ("fleet", "fleet load: N emulated robots making decisions against one verifier at once (docs/fleet.md)"),
    "fairness": ("fairness", "fair sharing of one verifier: how much a hog slows another robot's decisions"),
    "soak": ("soak", "a real verifier process under mixed well-behaved and hostile clients for a set time"),
    "link-health": ("link_health", "how long the robot's client takes to know its verifier lost, and to know it "
                                   "back (the heartbeat)"),
    "gpu-timing": ("gpu_timing", "real compute times of a drafter and an early-exit verifier, for bench --profile "
                                 "FILE"),
    "demo-runs": ("demo_runs", "make demo, run again and again: whether each run reaches the target, and its "
                               "decision latencies"),
    "drafter-agreement": ("drafter_agreement", "how well draft sources agree with a verifier: τ at γ per task kind"),
    "quant-survey": ("quant_survey", "the drafter's quantization schemes side by side: draft time per token and τ "
                                     "(docs/quantization.md)"),
    "answer-survey": ("answer_survey", "what mode dragon's answers look like: the question set through the robot's "
                                       "answer path"),
    "dragon-latency": ("dragon.bench.latency", "DRAGON's per-token latency and TTFT under an emulated network, "
                                               "beside the paper's baselines"),
    "dragon-quality": ("dragon.bench.quality", "DRAGON's answer quality where both sides' documents are needed, "
                                               "beside no RAG, one side and centralised"),
    "dragon-schedule": ("dragon.bench.schedule", "DRAGON's eq. 8 scheduler against always-robot, always-cloud and "
                                                 "random aggregation"),
    "dragon-wire": ("dragon.bench.wire", "DRAGON's wire cost: bytes per message and per generated token"),
}
BENCH_DEFAULT_OUT = "artifacts/bench"


def add_bench(sub) -> None:
    bench = sub.add_parser("bench", help="AR, SD and FSD side by side over an emulated link; bench NAME: the others",
                           description="AR, SD and FSD side by side over an emulated link (docs/benchmarks.md), its "
                                       "options BenchConfig's fields; bench NAME: the project's other benchmarks",
                           populate=bench_options)
    bench.set_defaults(func=cmd_bench)


def bench_options(bench: argparse.ArgumentParser) -> None:
    from edge_spec_ros.bench.runner import BenchConfig
    from edge_spec_ros.config_cli import add_config
    from edge_spec_ros.edge.registry import FRESH_SOURCE_NAMES

    add_config(bench, BenchConfig)
    bench.add_argument("--exit-shortlist", type=int, default=None,
                       help="serve --exit-shortlist of the verifier the bench starts (default: serve's)")
    bench.add_argument("--endpoint", help="use a running verifier instead of starting one on loopback")
    bench.add_argument("--adapters", help="trained exit adapters for the verifier it starts (train-exits)")
    bench.add_argument("--verifier", default="embedded",
                       help=f"model source of the verifier it starts and of the robot's drafter: {SOURCE_HELP}")
    bench.add_argument("--draft-layers", type=int, default=0,
                       help="self-drafter: the verifier's first K layers + the exit-K adapter of --adapters")
    bench.add_argument("--distilled", default="",
                       help="the robot drafts with the distilled drafter in this directory (distill-drafter --out)")
    bench.add_argument("--draft-source", default="model", choices=list(FRESH_SOURCE_NAMES),
                       help="fresh drafts: model (the drafter), lookup (prompt lookup first, the drafter for the "
                            "rest of the block; edge/draft_sources.py) or retrieval (the --datastore first, then "
                            "prompt lookup, then the drafter; edge/retrieval.py)")
    bench.add_argument("--datastore", default="",
                       help="--draft-source retrieval: the verifier's earlier answers (distill-drafter's "
                            "distill_data.json, or a JSON list of token lists)")
    bench.add_argument("--out", default=BENCH_DEFAULT_OUT, help="directory for the JSON and PNG")
    others = bench.add_subparsers(dest="bench", metavar="NAME", parser_class=LazyParser,
                                  title="the other benchmarks (edge-spec-ros bench NAME --help)")
    for name, (module, text) in BENCHES.items():
        other = others.add_parser(name, help=text, description=text, populate=_module_options(module))
        other.set_defaults(func=_module_command(module))


def _module_path(module: str) -> str:
    """The module a ``BENCHES`` entry names."""
    return f"edge_spec_ros.{module}" if "." in module else f"edge_spec_ros.bench.{module}"


def _module_options(module: str):
    def populate(parser: argparse.ArgumentParser) -> None:
        bench = importlib.import_module(_module_path(module))
        getattr(bench, "add_command_arguments", bench.add_arguments)(parser)
    return populate


def _module_command(module: str):
    def command(args: argparse.Namespace) -> int:
        return importlib.import_module(_module_path(module)).command(args)
    return command


def cmd_bench(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from edge_spec_ros.bench import report as bench_report
    from edge_spec_ros.bench.profiles import profile_named
    from edge_spec_ros.bench.runner import Bench, BenchConfig
    from edge_spec_ros.config_cli import config_from
    from edge_spec_ros.server_process import verifier_process

    try:
        config = config_from(BenchConfig, args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from edge_spec_ros.cpu import cpu_budget, set_torch_threads

    # robot and verifier share this machine's cores: the CPU budget's rule, as bringup --serve uses it
    threads = set_torch_threads(cpu_budget().torch_threads)
    pair, serve_args = bench_pair(args)
    extra = ("--adapters", args.adapters) if args.adapters else ()
    if args.exit_shortlist is not None:
        extra += ("--exit-shortlist", str(args.exit_shortlist))
    server = nullcontext(args.endpoint) if args.endpoint else \
        verifier_process("--threads", str(threads), *serve_args, *extra, *profile_named(config.profile).serve_args())
    with server as endpoint:
        log(f"verifier at {endpoint}; profile {config.profile}")
        report = Bench(pair, endpoint, config, progress=lambda s: log(f"  {s}")).run()
    if args.endpoint:  # the stamp counts the verifier of --verifier; a running one serves its own model
        report["stamp"]["pair"] += f"; verifier: the one running at {args.endpoint}"
    print(bench_report.table(report))
    json_path, png_path = bench_report.write(report, args.out)
    print(f"wrote {json_path} and {png_path}")
    return 0 if "DIFFERENT" not in report["exact"] + report.get("paths_exact", "") else 1


def bench_pair(args: argparse.Namespace):
    """(the robot's models, ``serve`` arguments of the matching verifier) for ``bench``: the drafter
    part of --verifier, and a verifier process loading the same source (a checkpoint in float32 on
    the CPU) at the same pixel budget. ``--draft-layers K`` makes the drafter the verifier's first K
    layers headed by the exit-K adapter of ``--adapters``."""
    if args.distilled and args.draft_layers:
        raise SystemExit("--distilled and --draft-layers each choose the drafter: give one")
    pair = load_pair(args.verifier, parts=() if args.distilled else ("drafter",), draft_layers=args.draft_layers,
                      adapters=args.adapters)
    if args.distilled:
        from edge_spec_ros.models.distilled_drafter import load_distilled

        try:
            pair.drafter = load_distilled(args.distilled, args.verifier)
        except (OSError, ValueError, KeyError) as exc:
            raise SystemExit(f"--distilled {args.distilled}: not a distill-drafter directory "
                             f"({type(exc).__name__}: {exc})") from None
        pair.source += f" (drafter: distilled, {args.distilled})"
    if args.draft_source != "model" or args.datastore:
        from edge_spec_ros.edge.draft_sources import fresh_drafter

        try:
            pair.drafter = fresh_drafter(args.draft_source, pair.drafter, args.datastore)
        except ValueError as exc:
            raise SystemExit(f"--draft-source {args.draft_source}: {exc}") from None
        pair.source += f" (draft source: {args.draft_source}" + (f", {args.datastore})" if args.datastore else ")")
    serve_args = ("--verifier", pair.location, "--dtype", "float32", "--device", "cpu",
                  "--max-pixels", str(pair.max_pixels))
    return pair, serve_args
