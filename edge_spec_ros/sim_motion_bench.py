"""``edge-spec-ros sim-motion-bench``: commanded vs travelled distance and angle, along the path a
decision takes on the robot.

``sim_node`` (it owns simulated time: /clock, integrates ``cmd_vel`` per fixed physics tick, publishes
``odom``) and ``action_node`` run in processes of their own, both with ``use_sim_time:=true``. This
process stands in for the drafter: it publishes ``Decision`` messages on ``edge_spec/decision`` (the
text a model decodes: "Reasoning: bench. Action: move forward 100 cm"), waits for the action node's
``NavAction`` DONE of that decision, lets ``SETTLE_S`` of simulated time pass, and reads what the
robot travelled from ``odom``: the distance along the heading it started on, or the angle it turned.
Beside it, the action node's own figure (``NavAction`` travelled_m / turned_rad: what its
``MotionTracker`` had measured when it ended the motion; only with odometry).

Two modes of the action node, side by side in one run:

* odometry: ``odom_topic:=odom``, motions end on pose feedback (``nav/motion.MotionTracker``);
* timed: ``odom_topic:=''``, the command is held for its planned duration on simulated time.

Each mode runs idle and with ``busy`` busy-loop processes beside it, each with a fresh sim_node and
action_node started at the same free pose. A repetition drives forward, backward, left and right by
the same amount (the robot ends where it started), so R repetitions give 2R moves and 2R turns.

Idle CPU: with the robot at rest (no load), the CPU time (utime + stime from /proc/<pid>/stat) the
sim_node and action_node processes use over ``cpu_s`` wall seconds; and, with ``stack_params``, that
of one process running the drafter, bridge and action nodes as ``bringup`` composes them (the YAML's
parameters, on simulated time, odometry on) beside a sim_node, before any instruction.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import rclpy
from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from edge_spec_ros import warm_start
from edge_spec_ros.cpu import busy_loops
from edge_spec_ros.server_process import stop
from edge_spec_ros.msg import Decision, NavAction as NavActionMsg
from edge_spec_ros.nodes.ros_link import RELIABLE

# a free lane of every room: x = 0.6 m is the start column, objects stand at x >= 2 m; 1 m forward
# (or back) from y = 2.5 m stays clear of the walls at y = 0 and 6 m
START = {"start_x": 0.6, "start_y": 2.5, "start_theta": math.pi / 2}
MODES = {"odometry": "odom", "timed": "''"}  # mode -> the action node's odom_topic
START_TIMEOUT_S = 60.0  # wall seconds for sim_node and action_node to come up and see each other
STACK_START_TIMEOUT_S = 180.0  # wall seconds for the drafter + bridge + action process (it loads a model)
MOTION_TIMEOUT_S = 60.0  # wall seconds for one motion (in simulated time it takes a few seconds)
WARMUP_S = 1.0  # simulated seconds after discovery before the first decision (the action node hears odom)
SETTLE_S = 0.5  # simulated seconds after DONE before odometry is read (the robot has stopped)
CPU_SETTLE_S = 2.0  # wall seconds at rest before the idle CPU is sampled
MAX_ERROR_PCT = 2.0  # the odometry mode's bound on |travelled / commanded - 1|
STACK_CODE = ("import sys\n"
              "from edge_spec_ros.nodes.lifecycle import main_for\n"
              "from edge_spec_ros.nodes.action_node import ActionNode\n"
              "from edge_spec_ros.nodes.bridge_node import BridgeNode\n"
              "from edge_spec_ros.nodes.drafter_node import DrafterNode\n"
              "raise SystemExit(main_for(DrafterNode, BridgeNode, ActionNode, args=sys.argv))\n")


@dataclass(frozen=True)
class Sample:
    """One decision's motion: what was commanded, what odometry says the robot did."""

    mode: str  # "odometry" | "timed"
    load: str  # "idle" | "<n> busy loops"
    kind: str  # "forward" (m) | "turn" (rad)
    text: str  # the action phrase sent
    commanded: float  # signed (backward, right < 0)
    travelled: float  # signed, from odom: along the start heading (m) or turned (rad)
    reported: float | None  # the action node's NavAction travelled_m / turned_rad (odometry mode only)
    status: str  # "DONE" | "CANCELLED"
    end_reason: str
    real_time_factor: float  # simulated seconds per wall second while the motion ran

    @property
    def error_pct(self) -> float:
        return 100 * (self.travelled / self.commanded - 1)


@dataclass
class BenchResult:
    samples: list[Sample] = field(default_factory=list)
    idle_cpu: dict[str, float] = field(default_factory=dict)  # process -> cores used at rest
    notes: list[str] = field(default_factory=list)  # what was skipped, and why

    @property
    def loads(self) -> list[str]:
        return list(dict.fromkeys(s.load for s in self.samples))

    def worst(self, mode: str, load: str, kind: str) -> Sample | None:
        ms = [s for s in self.samples if (s.mode, s.load, s.kind) == (mode, load, kind)]
        return max(ms, key=lambda s: abs(s.error_pct), default=None)

    def failures(self, max_error_pct: float = MAX_ERROR_PCT) -> list[str]:
        """Why the odometry mode misses its bound (empty: it holds), for every load and motion."""
        out = []
        for s in self.samples:
            if s.mode != "odometry":
                continue
            if s.status != "DONE":
                out.append(f"{s.load}: {s.text!r} ended {s.status} ({s.end_reason})")
            elif abs(s.error_pct) > max_error_pct:
                out.append(f"{s.load}: {s.text!r} travelled {_fmt(s.kind, s.travelled)} "
                           f"({s.error_pct:+.2f} %, bound {max_error_pct:g} %)")
        if not any(s.mode == "odometry" for s in self.samples):
            out.append("no odometry-mode motion was measured")
        return out


def _fmt(kind: str, value: float) -> str:
    return f"{value:+.3f} m" if kind == "forward" else f"{math.degrees(value):+.2f}°"


def stamp_s(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def yaw(msg: Odometry) -> float:
    q = msg.pose.pose.orientation
    return math.atan2(2 * (q.w * q.z + q.x * q.y), 1 - 2 * (q.y * q.y + q.z * q.z))


def travelled(kind: str, before: Odometry, after: Odometry) -> float:
    """Signed distance along ``before``'s heading (m), or the signed angle turned (rad, |.| < π)."""
    if kind == "forward":
        p, q, th = before.pose.pose.position, after.pose.pose.position, yaw(before)
        return (q.x - p.x) * math.cos(th) + (q.y - p.y) * math.sin(th)
    turned = yaw(after) - yaw(before)
    return math.atan2(math.sin(turned), math.cos(turned))


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14 and 15 of stat(5)


def idle_cores(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Cores each process used over ``seconds`` of wall time (CPU seconds per wall second)."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    wall = time.monotonic() - t0
    return {name: (after[name] - before[name]) / wall for name in pids}


class DecisionBench(Node):
    """Publishes decisions, collects how their motions ended and the latest odometry."""

    def __init__(self, context) -> None:
        super().__init__("motion_bench", context=context)
        self._cv = threading.Condition()
        self.odom: Odometry | None = None
        self.ends: dict[int, NavActionMsg] = {}  # decision -> its DONE / CANCELLED
        self.decisions = self.create_publisher(Decision, "edge_spec/decision", RELIABLE)
        self.actions = self.create_subscription(NavActionMsg, "edge_spec/action", self._on_action, RELIABLE)
        self.create_subscription(Odometry, "odom", self._on_odom, 10)

    def _on_odom(self, msg: Odometry) -> None:
        with self._cv:
            self.odom = msg
            self._cv.notify_all()

    def _on_action(self, msg: NavActionMsg) -> None:
        if msg.status != NavActionMsg.STARTED:
            with self._cv:
                self.ends[msg.decision] = msg
                self._cv.notify_all()

    def sim_s(self) -> float:
        """Simulated time of the latest odometry (-inf before any)."""
        return -math.inf if self.odom is None else stamp_s(self.odom.header.stamp)

    def wait(self, predicate: Callable[[], bool], timeout_s: float, what: str,
             procs: Sequence[tuple[str, warm_start.Process, Path]] = ()) -> None:
        """Wait (wall time) until ``predicate()``; raise if it times out or one of ``procs`` exits."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while not predicate():
                for name, proc, log in procs:
                    if proc.poll() is not None:
                        raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for {what}; "
                                           f"its log: {log}\n{_tail(log)}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
                self._cv.wait(min(left, 0.2))


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def node_command(executable: str, *params: str, params_file: str = "") -> list[str]:
    args = [sys.executable, "-m", f"edge_spec_ros.nodes.{executable}", "--ros-args"]
    if params_file:
        args += ["--params-file", params_file]
    return args + [a for p in params for a in ("-p", p)]


def start(stack: ExitStack, name: str, args: list[str], log_dir: Path) -> tuple[str, warm_start.Process, Path]:
    log = log_dir / f"{name.replace(' ', '_')}.log"
    out = stack.enter_context(open(log, "w"))
    proc = warm_start.popen(args, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    stack.callback(stop, proc)
    return name, proc, log


def motions(metres: float, degrees: float) -> list[tuple[str, str, float]]:
    """One repetition: (kind, action phrase, signed amount) forward, backward, left, right."""
    cm, rad = round(100 * metres, 3), math.radians(degrees)
    return [("forward", f"move forward {cm:g} cm", metres), ("forward", f"move backward {cm:g} cm", -metres),
            ("turn", f"turn left {degrees:g} degrees", rad), ("turn", f"turn right {degrees:g} degrees", -rad)]


def drive(bench: DecisionBench, decision: int, kind: str, text: str, commanded: float, mode: str, load: str,
          procs: Sequence[tuple[str, warm_start.Process, Path]]) -> Sample:
    """Send one decision, wait for its motion to end and the robot to settle; what did it travel?"""
    with bench._cv:
        before = bench.odom
    msg = Decision()
    msg.header.stamp = before.header.stamp
    msg.decision, msg.instruction, msg.mode = decision, "sim-motion-bench", "bench"
    msg.text = f"Reasoning: bench. Action: {text}"
    wall0, sim0 = time.monotonic(), stamp_s(before.header.stamp)
    bench.decisions.publish(msg)
    bench.wait(lambda: decision in bench.ends, MOTION_TIMEOUT_S, f"the end of {text!r}", procs)
    rtf = (bench.sim_s() - sim0) / max(time.monotonic() - wall0, 1e-9)
    end = bench.ends[decision]
    if end.kind != kind:
        raise RuntimeError(f"{text!r} was read as {end.kind!r}: {end.error or end.end_reason}")
    settled = stamp_s(end.header.stamp) + SETTLE_S
    bench.wait(lambda: bench.sim_s() >= settled, MOTION_TIMEOUT_S, "the robot to settle", procs)
    with bench._cv:
        after = bench.odom
    reported = None
    if mode == "odometry":
        reported = float(end.travelled_m if kind == "forward" else end.turned_rad)
    status = "DONE" if end.status == NavActionMsg.DONE else "CANCELLED"
    return Sample(mode, load, kind, text, commanded, travelled(kind, before, after), reported, status,
                  end.end_reason, rtf)


def measure_stack(bench: DecisionBench, params_file: str, cpu_s: float, log_dir: Path) -> dict[str, float]:
    """Idle cores of one drafter + bridge + action process (as bringup composes them) beside a sim_node."""
    with ExitStack() as stack:
        with bench._cv:
            bench.odom = None
        sim = start(stack, "stack sim_node", node_command("sim_node", params_file=params_file), log_dir)
        nodes = start(stack, "stack drafter_bridge_action", [
            sys.executable, "-c", STACK_CODE, "--ros-args", "--params-file", params_file,
            "-p", "use_sim_time:=true", "-p", "action:odom_topic:=odom"], log_dir)
        bench.wait(lambda: bench.odom is not None and "drafter ready" in nodes[2].read_text(errors="replace"),
                   STACK_START_TIMEOUT_S, "the drafter + bridge + action process to come up", (sim, nodes))
        time.sleep(CPU_SETTLE_S)
        cores = idle_cores({"drafter+bridge+action (one process)": nodes[1].pid,
                            "sim_node (beside it)": sim[1].pid}, cpu_s)
        if nodes[1].poll() is not None:
            raise RuntimeError(f"the drafter + bridge + action process exited: {_tail(nodes[2])}")
        return {f"idle, {name}": value for name, value in cores.items()}


_Proc = tuple[str, warm_start.Process, Path]  # a node process: its name, the process, its log


@dataclass(frozen=True)
class _Options:
    """One bench run's options (``run``'s arguments, the log folder made)."""

    repeats: int
    busy: int
    metres: float
    degrees: float
    cpu_s: float
    stack_params: str
    logs: Path
    physics_rate_hz: float
    progress: Callable[[str], None]


@dataclass
class _BenchRun:
    """A bench run in progress: its options, the decision node, the result so far, the last decision's number."""

    options: _Options
    bench: DecisionBench
    result: BenchResult
    decision: int = 0


@contextmanager
def _spinning_bench() -> Iterator[DecisionBench]:
    """A DecisionBench in a ROS context of its own, spun on a thread; shut down on the way out."""
    context = rclpy.Context()
    rclpy.init(context=context)
    bench = DecisionBench(context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(bench)
    spinner = threading.Thread(target=executor.spin, name="executor", daemon=True)
    spinner.start()
    try:
        yield bench
    finally:
        executor.shutdown()
        spinner.join(timeout=10.0)
        bench.destroy_node()
        rclpy.try_shutdown(context=context)


def _start_nodes(state: _BenchRun, stack: ExitStack, mode: str, odom_topic: str, load: str) -> tuple[_Proc, _Proc]:
    """A fresh sim_node and action_node (of ``mode``) at the start pose, up, seen and warmed up."""
    bench, options = state.bench, state.options
    with bench._cv:
        bench.odom = None
    tag = f"{mode}_{load}"
    sim = start(stack, f"sim_node {tag}", node_command(
        "sim_node", *[f"{k}:={v}" for k, v in START.items()],
        f"physics_rate_hz:={options.physics_rate_hz}"), options.logs)
    action = start(stack, f"action_node {tag}", node_command(
        "action_node", "use_sim_time:=true", f"odom_topic:={odom_topic}"), options.logs)
    procs = (sim, action)
    bench.wait(lambda: bench.odom is not None and bench.decisions.get_subscription_count() > 0
               and bench.actions.get_publisher_count() > 0, START_TIMEOUT_S,
               "sim_node and action_node to come up", procs)
    warm = bench.sim_s() + WARMUP_S
    bench.wait(lambda: bench.sim_s() >= warm, START_TIMEOUT_S, "simulated time", procs)
    return procs


def _drive_repetitions(state: _BenchRun, mode: str, load: str, procs: Sequence[_Proc]) -> None:
    """``repeats`` × (forward, backward, left, right), each motion a sample of the result."""
    options = state.options
    for r in range(options.repeats):
        for kind, text, amount in motions(options.metres, options.degrees):
            state.decision += 1
            s = drive(state.bench, state.decision, kind, text, amount, mode, load, procs)
            state.result.samples.append(s)
            options.progress(f"{mode}, {load}, {r + 1}/{options.repeats}: {text}: travelled "
                             f"{_fmt(kind, s.travelled)} ({s.error_pct:+.2f} %, {s.end_reason})")


def _measure_mode(state: _BenchRun, mode: str, odom_topic: str, load: str) -> None:
    """One mode under one load: fresh nodes, their idle CPU (idle load only), then the motions."""
    options = state.options
    options.progress(f"{mode} mode, {load}: starting sim_node and action_node")
    with ExitStack() as stack:
        sim, action = _start_nodes(state, stack, mode, odom_topic, load)
        if load == "idle" and options.cpu_s > 0:
            time.sleep(CPU_SETTLE_S)
            cores = idle_cores({"sim_node": sim[1].pid, "action_node": action[1].pid}, options.cpu_s)
            state.result.idle_cpu.update({f"idle, {name} ({mode} mode)": v for name, v in cores.items()})
        _drive_repetitions(state, mode, load, (sim, action))


def _measure_load(state: _BenchRun, load: str, n_busy: int) -> None:
    """Every mode with ``n_busy`` busy-loop processes beside the nodes."""
    loads = busy_loops(n_busy)
    try:
        for mode, odom_topic in MODES.items():
            _measure_mode(state, mode, odom_topic, load)
    finally:
        for p in loads:
            stop(p)


def _measure_stack_cpu(state: _BenchRun) -> None:
    """The idle CPU of a drafter + bridge + action process, or a note of why it was not measured."""
    options, result = state.options, state.result
    if options.cpu_s > 0 and options.stack_params:
        options.progress("idle CPU of a drafter + bridge + action process (it loads the drafter model)")
        try:
            result.idle_cpu.update(measure_stack(state.bench, options.stack_params, options.cpu_s, options.logs))
        except (RuntimeError, OSError) as exc:
            result.notes.append(f"drafter + bridge + action idle CPU skipped: {exc}")
    elif options.cpu_s > 0:
        result.notes.append("drafter + bridge + action idle CPU not measured (no params file given)")


def run(repeats: int = 3, busy: int = 2, metres: float = 1.0, degrees: float = 45.0, cpu_s: float = 10.0,
        stack_params: str = "", log_dir: str | Path | None = None, physics_rate_hz: float = 50.0,
        progress: Callable[[str], None] = lambda _: None) -> BenchResult:
    """``repeats`` × (forward, backward, left, right) per mode (odometry, timed) × load (idle, busy)."""
    if not (0 < metres <= 1.5 and 0 < degrees <= 170 and repeats >= 1 and busy >= 0):
        raise ValueError("need 0 < metres <= 1.5 and 0 < degrees <= 170 (within the action node's default "
                         "max_duration_s of 5 s at its cruise speeds), repeats >= 1 and busy >= 0; got "
                         f"{metres}, {degrees}, {repeats}, {busy}")
    logs = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="sim_motion_bench_"))
    logs.mkdir(parents=True, exist_ok=True)
    progress(f"node logs in {logs}")
    options = _Options(repeats, busy, metres, degrees, cpu_s, stack_params, logs, physics_rate_hz, progress)
    result = BenchResult()
    with _spinning_bench() as bench:
        state = _BenchRun(options, bench, result)
        for load, n_busy in (("idle", 0), (f"{busy} busy loops", busy)):
            if load != "idle" and busy == 0:
                continue
            _measure_load(state, load, n_busy)
        _measure_stack_cpu(state)
    return result


def table(result: BenchResult) -> str:
    """One table: mode × load × motion, commanded vs travelled (odometry) and the action node's own figure."""
    lines = ["| mode | load | motion | commanded | travelled, odometry (per run) | action node's figure | "
             "worst error | ended | sim s per wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for mode in MODES:
        for load in result.loads:
            for kind in ("forward", "turn"):
                ms = [s for s in result.samples if (s.mode, s.load, s.kind) == (mode, load, kind)]
                if not ms:
                    continue
                scale, unit, digits = (1.0, " m", 3) if kind == "forward" else (180 / math.pi, "°", 2)
                amount = abs(ms[0].commanded) * scale
                runs = ", ".join(f"{s.travelled * scale:+.{digits}f}" for s in ms)
                reported = ("-" if any(s.reported is None for s in ms) else
                            ", ".join(f"{s.reported * scale:+.{digits}f}" for s in ms) + unit)
                worst = max(ms, key=lambda s: abs(s.error_pct))
                reasons = dict.fromkeys(f"{s.status.lower()} ({s.end_reason})" for s in ms)
                ended = "; ".join(f"{sum(f'{s.status.lower()} ({s.end_reason})' == r for s in ms)}× {r}"
                                  for r in reasons)
                rtf = [s.real_time_factor for s in ms]
                motion = "move" if kind == "forward" else "turn"
                lines.append(f"| {mode} | {load} | {motion} | ±{amount:.{digits}f}{unit} | {runs}{unit} | {reported} "
                             f"| {worst.error_pct:+.2f} % | {ended} | {min(rtf):.2f}-{max(rtf):.2f} |")
    return "\n".join(lines)


def cpu_table(result: BenchResult) -> str:
    lines = [f"idle CPU: {name}: {cores:.3f} cores" for name, cores in result.idle_cpu.items()]
    return "\n".join(lines + result.notes)
