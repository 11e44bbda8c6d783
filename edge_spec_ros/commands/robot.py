"""The robot's commands: ``bringup`` (the robot-side ROS 2 nodes in one process, with the launch file's
YAML), ``record`` (topics of the running graph into a rosbag2) and ``sim-motion-bench`` (commanded vs
travelled motion in the simulated room)."""

from __future__ import annotations

import argparse
from pathlib import Path

from edge_spec_ros.commands.common import log

BRINGUP_HELP = ("the robot-side nodes in one process, one executor, the CPU budget (cpu.py) for its torch threads "
                "and the verifier's; an episode ends with the drafter's cycle (--timeout is a safety net); --sim puts "
                "every node on simulated time and ends motions on the room's odometry; --serve also starts a loopback "
                "verifier; --bag replays a bag, --sim runs the simulated room, instead of the camera, and reports "
                "whether the robot reached the target and draws its path")
RECORD_HELP = "record camera, instruction, /cmd_vel and the edge_spec outputs (or the given topics) into a rosbag2"


def add_robot(sub) -> None:
    sub.add_parser("bringup", help="run the robot-side nodes in one process", description=BRINGUP_HELP,
                   populate=bringup_options).set_defaults(func=cmd_bringup)
    sub.add_parser("record", help="record topics into a rosbag2", description=RECORD_HELP,
                   populate=record_options).set_defaults(func=cmd_record)
    text = ("commanded vs travelled motion: decisions through sim_node and action_node processes, odometry vs timed, "
            "idle and loaded")
    sub.add_parser("sim-motion-bench", help=text, description=text,
                   populate=motion_options).set_defaults(func=cmd_sim_motion_bench)


# bringup's spellings of BringupConfig's fields, and its defaults where they are not the config's
BRINGUP_FLAGS = {"params_file": "--params", "timeout_s": ("--timeout", "--duration"), "bag_topics": "--bag-topic",
                 "bag_remap": "--bag-remap", "bag_clock_hz": "--bag-clock"}
BRINGUP_DEFAULTS = {"params_file": "config/go2_nav.yaml", "trajectory": "artifacts/sim_trajectory.png"}


def bringup_options(bringup: argparse.ArgumentParser) -> None:
    from edge_spec_ros.extras import require_ros

    require_ros("edge-spec-ros bringup")
    from edge_spec_ros.bringup import BringupConfig
    from edge_spec_ros.config_cli import add_config

    add_config(bringup, BringupConfig, flags=BRINGUP_FLAGS, defaults=BRINGUP_DEFAULTS)


def record_options(rec: argparse.ArgumentParser) -> None:
    rec.add_argument("--out", required=True, help="bag directory to create")
    rec.add_argument("--topic", action="append", help="TOPIC or TOPIC:pkg/msg/Type (default: camera, "
                     "instruction, cmd_vel and the edge_spec outputs)")
    rec.add_argument("--duration", type=float, default=0.0, help="seconds (0: until Ctrl-C)")
    rec.add_argument("--storage", default="sqlite3", choices=["sqlite3", "mcap"])


def motion_options(motion: argparse.ArgumentParser) -> None:
    motion.add_argument("--repeats", type=int, default=3, help="forward, backward, left, right this many times "
                        "per mode and load")
    motion.add_argument("--busy", type=int, default=2, help="busy-loop processes of the loaded condition")
    motion.add_argument("--metres", type=float, default=1.0)
    motion.add_argument("--degrees", type=float, default=45.0)
    motion.add_argument("--max-error-pct", type=float, default=2.0,
                        help="exit 1 when an odometry-mode motion misses its amount by more than this")
    motion.add_argument("--cpu-s", type=float, default=10.0, help="idle CPU sampled over this long (0: not measured)")
    motion.add_argument("--params", default="config/go2_nav.yaml",
                        help="the YAML of the drafter + bridge + action process whose idle CPU is measured")
    motion.add_argument("--no-stack", action="store_true",
                        help="skip the drafter + bridge + action idle CPU (it loads the drafter model)")
    motion.add_argument("--logs", default=None, help="node logs here (default: a new temporary folder)")


def cmd_bringup(args: argparse.Namespace) -> int:
    from edge_spec_ros.bringup import BringupConfig, run
    from edge_spec_ros.config_cli import config_from

    if not Path(args.params_file).is_file():
        raise SystemExit(f"no parameters file at {args.params_file}")
    if args.documents and not args.serve:
        raise SystemExit("--documents is the folder of the verifier that --serve starts: add --serve, or give "
                         "the folder to the verifier the drafter talks to (serve --documents DIR)")
    if args.documents and not Path(args.documents).is_dir():
        raise SystemExit(f"--documents {args.documents} is not a folder")
    monitor = run(config_from(BringupConfig, args, trajectory=args.trajectory if args.sim else ""))
    print(f"{len(monitor.decisions)} decisions, {len(monitor.actions)} actions, {len(monitor.twists)} cmd_vel messages")
    if args.sim:
        print(f"simulated robot {'reached' if monitor.goal_reached else 'did NOT reach'} the target")
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from edge_spec_ros.nodes.bag_recorder import DEFAULT_TOPICS, record

    topics = DEFAULT_TOPICS
    if args.topic:
        unknown = [t for t in args.topic if t not in DEFAULT_TOPICS and ":" not in t]
        if unknown:
            raise SystemExit(f"give the type of {unknown[0]} as TOPIC:pkg/msg/Type")
        topics = {t.split(":")[0]: (t.split(":")[1] if ":" in t else DEFAULT_TOPICS[t]) for t in args.topic}
    n = record(args.out, topics, args.duration, args.storage)
    print(f"recorded {n} messages into {args.out}")
    return 0


def cmd_sim_motion_bench(args: argparse.Namespace) -> int:
    from edge_spec_ros.sim_motion_bench import cpu_table, run, table

    result = run(args.repeats, args.busy, args.metres, args.degrees, cpu_s=args.cpu_s,
                 stack_params="" if args.no_stack else args.params, log_dir=args.logs, progress=log)
    print(table(result))
    print(cpu_table(result))
    for load in result.loads:
        worst = [result.worst("odometry", load, kind) for kind in ("forward", "turn")]
        print(f"odometry mode, {load}: worst error " + ", ".join(
            f"{'move' if s.kind == 'forward' else 'turn'} {s.error_pct:+.2f} %" for s in worst if s)
              + f" (bound {args.max_error_pct:g} %)")
    failures = result.failures(args.max_error_pct)
    for failure in failures:
        print(f"FAIL odometry mode, {failure}")
    return 1 if failures else 0
