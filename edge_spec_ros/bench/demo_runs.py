"""`make demo`, run again and again: whether each run reaches the target, and its decision latencies.

``edge-spec-ros bench demo-runs --runs 10 --busy 2 --modes fsd`` runs the demo's command
(``edge-spec-ros bringup --params config/go2_nav.yaml --serve --sim --instruction ...``) ``--runs`` times
per mode, idle and then with ``--busy`` busy-loop processes beside it (0: idle only), the mode set in a
copy of the YAML. From each run's output it takes the decisions (``[decision ...]``), each decision's
latency (``[stats ...] decision N ms``: open to last token, the drafter's own measurement), how each
motion ended (``[action N] ended (REASON)``, classified by ``ending``) and the end state (``simulated
robot reached the target``). It prints per mode and load: runs reaching the target, decisions per
run, the motions' endings, and the decision latency min / median / max over all decisions, and
writes the runs to ``--out`` as JSON. A run that does not end within ``--timeout`` counts as not
reached. The command fails (status 1) when a run does not reach the target or a motion does not end
as planned: every motion must end ``reached`` (its distance or angle covered), ``blocked`` (an
obstacle in the way, reported by the motion tracker), on its planned duration, or by an explicit stop
(a stop or new instruction, a new decision, a lost verifier, shutdown), never by the watchdog, stale
odometry or the tracker's timeout. Everything runs on the machine's loopback (the Makefile's DDS
settings are required in the environment: ``FASTDDS_DEFAULT_PROFILES_FILE``, ``ROS_DOMAIN_ID``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from edge_spec_ros.cpu import busy_loops
from edge_spec_ros.server_process import stop

INSTRUCTION = "find the silver bottle"  # the Makefile's demo instruction
ROOT = Path(__file__).resolve().parents[2]
PARAMS = ROOT / "config" / "go2_nav.yaml"
RUN_TIMEOUT_S = 300.0  # one demo run, model loading included
STATS = re.compile(r"\[stats (\d+) (\S+)\] decision (\d+) ms")
DECISION = re.compile(r"\[decision (\d+) ")
ENDED = re.compile(r"\[action (\d+)\] ended \((.+?)\): travelled")  # bringup's Monitor.on_action
REACHED = "simulated robot reached the target"
# how a motion may end (nodes/action_node.py's end reasons): its own end, or one somebody asked for
PLANNED_ENDINGS = ("reached", "blocked", "duration", "stopped")
EXPLICIT_STOPS = ("stop", "new instruction", "superseded by a new decision", "verifier lost", "shutdown")


def ending(reason: str) -> str:
    """The class of a motion's end reason: reached, blocked or duration (the motion's own end), stopped
    (explicitly), watchdog, odometry (stale or missing), timeout (the tracker's), or other."""
    for prefix, kind in (("reached", "reached"), ("blocked", "blocked"), ("duration", "duration"),
                         ("watchdog", "watchdog"), ("odometry", "odometry"), ("no odometry", "odometry"),
                         ("timeout", "timeout"), *((stop, "stopped") for stop in EXPLICIT_STOPS)):
        if reason.startswith(prefix):
            return kind
    return "other"


@dataclass
class DemoRun:
    mode: str
    busy: int
    reached: bool
    decisions: int
    latencies_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    texts: list[str] = field(default_factory=list)
    endings: list[str] = field(default_factory=list)  # each motion's end reason, in order

    @property
    def unplanned(self) -> list[str]:
        """The end reasons of motions that did not end as planned (the watchdog's, for one)."""
        return [r for r in self.endings if ending(r) not in PLANNED_ENDINGS]


def parse_run(output: str, mode: str, busy: int, wall_s: float) -> DemoRun:
    """A run's figures from the demo's printed output."""
    latencies = [float(m[3]) for m in STATS.finditer(output)]
    texts = [line.split("] ", 1)[1] for line in output.splitlines() if DECISION.match(line)]
    endings = [m[2] for m in ENDED.finditer(output)]
    return DemoRun(mode, busy, REACHED in output, len(texts), latencies, wall_s, texts, endings)


def params_for(mode: str, out: Path) -> Path:
    """The demo's YAML with the drafter's mode set."""
    config = yaml.safe_load(PARAMS.read_text())
    config["drafter"]["ros__parameters"]["mode"] = mode
    path = out / f"params_{mode}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_once(mode: str, busy: int, out: Path, instruction: str, timeout_s: float) -> DemoRun:
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "bringup", "--params", str(params_for(mode, out)),
           "--serve", "--sim", "--instruction", instruction]
    hogs = busy_loops(busy)
    t0 = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:  # not reached; what it printed still counts
        partial = exc.stdout or ""
        output = partial.decode(errors="replace") if isinstance(partial, bytes) else partial
    finally:
        for hog in hogs:
            stop(hog)
    return parse_run(output, mode, busy, time.monotonic() - t0)


def endings_text(runs: list[DemoRun]) -> str:
    """Motion endings by class over ``runs``, e.g. "reached 26, blocked 2"."""
    counts = {kind: 0 for kind in (*PLANNED_ENDINGS, "watchdog", "odometry", "timeout", "other")}
    for r in runs:
        for reason in r.endings:
            counts[ending(reason)] += 1
    return ", ".join(f"{kind} {n}" for kind, n in counts.items() if n) or "–"


def summary(runs: list[DemoRun]) -> list[str]:
    lines = ["| mode | busy loops | reached | decisions per run | motion endings | decision ms min / median / max "
             "| run s (median) |",
             "|---|---|---|---|---|---|---|"]
    for key in dict.fromkeys((r.mode, r.busy) for r in runs):
        group = [r for r in runs if (r.mode, r.busy) == key]
        lat = [x for r in group for x in r.latencies_ms]
        span = f"{min(lat):.0f} / {statistics.median(lat):.0f} / {max(lat):.0f}" if lat else "–"
        per_run = sorted({r.decisions for r in group})
        lines.append(f"| {key[0]} | {key[1]} | {sum(r.reached for r in group)} / {len(group)} | "
                     f"{', '.join(map(str, per_run))} | {endings_text(group)} | {span} | "
                     f"{statistics.median(r.wall_s for r in group):.0f} |")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench demo-runs``."""
    parser.add_argument("--runs", type=int, default=10, help="runs per mode and load")
    parser.add_argument("--busy", type=int, default=2, help="busy-loop processes in the second set of runs (0: none)")
    parser.add_argument("--modes", default="fsd", help="comma-separated drafter modes")
    parser.add_argument("--instruction", default=INSTRUCTION)
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="per run (s)")
    parser.add_argument("--out", default="artifacts/demo_runs", help="folder for the YAML copies and runs.json")


def command(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[DemoRun] = []
    for mode in args.modes.split(","):
        for busy in dict.fromkeys((0, args.busy)):
            for i in range(args.runs):
                run = run_once(mode, busy, out, args.instruction, args.timeout)
                runs.append(run)
                print(f"{mode} busy={busy} run {i + 1}/{args.runs}: {'reached' if run.reached else 'NOT reached'}, "
                      f"{run.decisions} decisions, motions: {endings_text([run])}, {run.wall_s:.0f} s", file=sys.stderr,
                      flush=True)
    (out / "runs.json").write_text(json.dumps([asdict(r) for r in runs], indent=1))
    print("\n".join(summary(runs)))
    for i, run in enumerate(runs):
        for reason in run.unplanned:
            print(f"run {i + 1} ({run.mode}, busy {run.busy}): a motion ended {reason!r}", file=sys.stderr)
    return 0 if all(r.reached and not r.unplanned for r in runs) else 1
