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


def bringup_options(bringup: argparse.ArgumentParser) -> None:
    bringup.add_argument("--params", default="config/go2_nav.yaml", help="the nodes' YAML parameters")
    bringup.add_argument("--serve", action="store_true", help="also start a local verifier (embedded model)")
    bringup.add_argument("--instruction", default="", help="publish this instruction once the stack is up")
    bringup.add_argument("--timeout", "--duration", type=float, default=900.0,
                         help="safety net: stop after this long (wall clock, s); episodes end by their "
                              "decision budget (the drafter's max_decisions)")
    bringup.add_argument("--camera-source", help="override the camera source")
    bringup.add_argument("--bag", help="replay this bag instead of running the camera")
    bringup.add_argument("--bag-topic", action="append", metavar="TOPIC",
                         help="with --bag: replay only this recorded topic (repeatable; default: all)")
    bringup.add_argument("--bag-remap", action="append", metavar="FROM:=TO",
                         help="with --bag: publish the recorded topic FROM as TO (repeatable), e.g. "
                              "/camera/color/image_raw/compressed:=/camera/image_raw/compressed")
    bringup.add_argument("--bag-clock", type=float, default=0.0, metavar="HZ",
                         help="with --bag: publish /clock from bag time at HZ (for nodes with use_sim_time)")
    bringup.add_argument("--bag-rate", type=float, default=1.0,
                         help="with --bag: playback speed (0: as fast as possible)")
    bringup.add_argument("--sim", action="store_true", help="the simulated room instead of the camera")
    bringup.add_argument("--documents", metavar="DIR",
                         help="with --serve: the started verifier's DRAGON document folder (serve --documents DIR; "
                              "*.txt, *.md), which the drafter asks in mode dragon")
    bringup.add_argument("--dragon-model", metavar="SOURCE",
                         help="mode dragon's answering model on both sides: the drafter's dragon_model and, with "
                              "--serve --documents, the started verifier's --dragon-model (e.g. smollm2; default: "
                              "the YAML's drafter dragon_model)")
    bringup.add_argument("--trajectory", default="artifacts/sim_trajectory.png",
                         help="with --sim: top-down picture of the robot's path")


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

    if not Path(args.params).is_file():
        raise SystemExit(f"no parameters file at {args.params}")
    if args.documents and not args.serve:
        raise SystemExit("--documents is the folder of the verifier that --serve starts: add --serve, or give "
                         "the folder to the verifier the drafter talks to (serve --documents DIR)")
    if args.documents and not Path(args.documents).is_dir():
        raise SystemExit(f"--documents {args.documents} is not a folder")
    monitor = run(BringupConfig(params_file=args.params, serve=args.serve, instruction=args.instruction,
                                timeout_s=args.timeout, camera_source=args.camera_source or "", bag=args.bag or "",
                                bag_topics=tuple(args.bag_topic or ()), bag_remap=tuple(args.bag_remap or ()),
                                bag_clock_hz=args.bag_clock, bag_rate=args.bag_rate,
                                sim=args.sim, trajectory=args.trajectory if args.sim else "",
                                documents=args.documents or "", dragon_model=args.dragon_model or ""))
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
