"""One-process bringup: the robot-side nodes with the same YAML as the launch file.

Where no ``ros2 launch`` exists (this project's virtual environment), ``edge-spec-ros bringup``
composes camera (or simulated room, or bag replay), bridge, drafter, action and memory nodes in one
process with one single-threaded executor on the main thread (see ``nodes/lifecycle.py``), optionally
starts a verifier on loopback, publishes an instruction and prints what the stack does: decisions
(reasoning + action), parsed actions and how each motion ended, /cmd_vel changes (of the action
node's ``cmd_vel_type``, which the simulated room also takes), decode statistics and, with the drafter in
mode dragon, the answer to a question (edge_spec/answer; the episode ends with it). The memory node
(``nodes/memory_node.py``) records decisions, instructions and notes into the YAML's ``memory_dir``.

An episode is budgeted by decisions: it ends when the drafter's cycle ends (a stop or invalid action,
or ``max_decisions`` decisions whose motions are over). ``timeout_s`` is only a safety net. With the
simulated room every node runs on simulated time (``use_sim_time``) and the action node ends motions
on the room's odometry, so what the robot does does not depend on how loaded the computer is. The
CPU budget (``cpu.py``) sizes the torch threads of this process and of the verifier it starts.
The managed nodes (bridge, drafter and action node; ``nodes/managed.py``) are configured and
activated before the executor spins, as ``main_for`` does for a node process; the library's Python
log lines go to /rosout through the drafter's logger (``nodes/rosout.py``). Shutdown (end of episode,
SIGINT, SIGTERM): the managed nodes' shutdown transition (the decision cycle stops and its threads
are joined, the action node ends a motion in progress with zero), then the nodes are destroyed.
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

from geometry_msgs.msg import PoseStamped
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import Bool, String

from edge_spec_ros.config_cli import doc
from edge_spec_ros.msg import Answer as AnswerMsg, Decision, DecodeStats as DecodeStatsMsg, NavAction as NavActionMsg
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.nodes.sim_node import LATCHED
from edge_spec_ros.nodes.velocity import CMD_VEL_TYPES, velocity_values
from edge_spec_ros.sim.closed_loop import plot_trajectory
from edge_spec_ros.sim.expert import Episode
from edge_spec_ros.sim.world import Pose, World


DISCOVERY_TIMEOUT_S = 10.0  # wait this long for the drafter and action node to hear the instruction topic


@dataclass(frozen=True)
class BringupConfig:
    """One ``edge-spec-ros bringup``: its options are these fields (config_cli.add_config)."""

    params_file: str = field(metadata={**doc("the nodes' YAML parameters"), "metavar": "YAML"})
    serve: bool = field(default=False, metadata=doc(
        "also start a verifier (embedded model) on loopback and point the bridge at it"))
    instruction: str = field(default="", metadata=doc("publish this instruction once the stack is up"))
    timeout_s: float = field(default=900.0, metadata=doc(
        "safety net: stop after this long (wall clock, s) whatever the episode does; episodes end by their "
        "decision budget (the drafter's max_decisions)", 0.0, 1e9))
    until_stop: bool = field(default=True, metadata=doc(
        "stop when an instruction cycle ends (stop / invalid action)"))
    camera_source: str = field(default="", metadata=doc("override the YAML's camera source"))
    bag: str = field(default="", metadata=doc("replay this bag instead of running the camera node"))
    bag_topics: tuple[str, ...] = field(default=(), metadata={**doc(
        "with --bag: replay only this recorded topic (repeatable; default: all)"), "repeat": True, "metavar": "TOPIC"})
    bag_remap: tuple[str, ...] = field(default=(), metadata={**doc(
        "with --bag: publish the recorded topic FROM as TO (repeatable), e.g. "
        "/camera/color/image_raw/compressed:=/camera/image_raw/compressed"), "repeat": True, "metavar": "FROM:=TO"})
    bag_clock_hz: float = field(default=0.0, metadata={**doc(
        "with --bag: publish /clock from bag time at HZ (for nodes with use_sim_time; 0: no /clock)", 0.0, 1e6),
        "metavar": "HZ"})
    bag_rate: float = field(default=1.0, metadata=doc("with --bag: playback speed (0: as fast as possible)",
                                                      0.0, 1e6))
    sim: bool = field(default=False, metadata=doc("the simulated room (sim_node) instead of the camera node"))
    trajectory: str = field(default="", metadata=doc("with --sim: top-down picture of the robot's path"))
    memory: bool = field(default=True, metadata=doc(
        "run the memory node (the robot's memory, which the drafter's mode dragon reads)"))
    documents: str = field(default="", metadata={**doc(
        "with --serve: the started verifier's DRAGON document folder (serve --documents DIR; *.txt, *.md), which "
        "the drafter asks in mode dragon"), "metavar": "DIR"})
    dragon_model: str = field(default="", metadata={**doc(
        "mode dragon's answering model on both sides: the drafter's dragon_model and, with --serve --documents, "
        "the started verifier's --dragon-model (e.g. smollm2; empty: the YAML's drafter dragon_model)"),
        "metavar": "SOURCE"})


class Monitor(Node):
    """Prints the stack's outputs and notices the end of an instruction cycle: a stop or invalid
    action, a failed decision, or the ``max_decisions``-th decision's motion over."""

    def __init__(self, print_fn, max_decisions: int, cmd_vel_type: str = "Twist") -> None:
        super().__init__("bringup_monitor")
        self.print = print_fn
        self.max_decisions = max_decisions
        self.instruction = self.create_publisher(String, "instruction", RELIABLE)
        self.done = threading.Event()
        self.decisions: list[Decision] = []
        self.answers: list[AnswerMsg] = []
        self.actions: list[NavActionMsg] = []
        self.twists: list[tuple[float, float]] = []
        self._last_twist = None
        self.pose: Pose | None = None  # the simulated robot's latest pose
        self.decision_poses: list[Pose] = []  # its pose when each decision was published
        self.goal_reached = False
        self.create_subscription(Decision, "edge_spec/decision", self.on_decision, RELIABLE)
        self.create_subscription(AnswerMsg, "edge_spec/answer", self.on_answer, RELIABLE)
        self.create_subscription(NavActionMsg, "edge_spec/action", self.on_action, RELIABLE)
        self.create_subscription(DecodeStatsMsg, "edge_spec/stats", self.on_stats, RELIABLE)
        self.create_subscription(CMD_VEL_TYPES[cmd_vel_type], "cmd_vel", self.on_twist, 10)
        self.create_subscription(PoseStamped, "sim/pose", self.on_pose, 10)
        self.create_subscription(Bool, "sim/goal_reached", self.on_goal, LATCHED)

    def on_decision(self, msg: Decision) -> None:
        self.decisions.append(msg)
        if self.pose is not None:
            self.decision_poses.append(self.pose)
        self.print(f"[decision {msg.decision} {msg.mode}] {msg.text!r}")
        if not msg.text:  # the decision failed (the drafter logged why): the cycle is over
            self.done.set()

    def on_answer(self, msg: AnswerMsg) -> None:  # mode dragon: the question's answer ends the episode
        self.answers.append(msg)
        if msg.error:
            self.print(f"[answer {msg.answer}] {msg.question!r}: failed: {msg.error}")
        else:
            self.print(f"[answer {msg.answer}] {msg.question!r} -> {msg.text!r} ({msg.tokens} tokens, "
                       f"{msg.memory_entries} memory entries, {msg.wall_s * 1e3:.0f} ms)")
        self.done.set()

    def on_action(self, msg: NavActionMsg) -> None:
        if msg.status != NavActionMsg.STARTED:
            if msg.kind not in ("stop", "invalid"):
                self.print(f"[action {msg.decision}] ended ({msg.end_reason}): travelled {msg.travelled_m:.3f} m, "
                           f"turned {math.degrees(msg.turned_rad):.1f}°")
            if msg.kind in ("stop", "invalid") or len(self.decisions) >= self.max_decisions:
                self.done.set()
        if msg.status != NavActionMsg.STARTED and msg.kind not in ("stop", "invalid"):
            return
        self.actions.append(msg)
        if msg.kind == "invalid":
            self.print(f"[action {msg.decision}] none: {msg.error}")
        else:
            self.print(f"[action {msg.decision}] {msg.kind} {msg.text!r}: v={msg.linear_x:.2f} m/s "
                       f"ω={msg.angular_z:.2f} rad/s for {msg.duration_s:.2f} s{' (clamped)' if msg.clamped else ''}")

    def on_stats(self, msg: DecodeStatsMsg) -> None:
        self.print(f"[stats {msg.decision} {msg.mode}] decision {msg.wall_s * 1e3:.0f} ms: {msg.tokens} tokens in "
                   f"{msg.rounds} rounds, "
                   f"τ={msg.tau:.2f} α={msg.alpha:.2f} r={msg.miss_rate:.0%} TTFT {msg.ttft_s * 1e3:.0f} ms, "
                   f"{msg.per_token_s * 1e3:.1f} ms/token, up {msg.bytes_up_per_round:.0f} B/round, "
                   f"down {msg.bytes_down_per_round:.0f} B/round")

    def on_pose(self, msg: PoseStamped) -> None:
        q = msg.pose.orientation
        self.pose = Pose(msg.pose.position.x, msg.pose.position.y, 2 * math.atan2(q.z, q.w))

    def on_goal(self, msg: Bool) -> None:  # the robot's state now: success is where it ends (end state)
        if msg.data != self.goal_reached:
            self.goal_reached = msg.data
            self.print("[sim] the robot is at the target" if msg.data else "[sim] the robot left the target")

    def on_twist(self, msg) -> None:
        twist = tuple(round(v, 3) for v in velocity_values(msg))
        self.twists.append(twist)
        if twist != self._last_twist:
            self._last_twist = twist
            self.print(f"[cmd_vel] linear.x={twist[0]:.3f} angular.z={twist[1]:.3f}")


def _max_decisions(params_file: str) -> int:
    """The drafter's decision budget per instruction, as the YAML sets it."""
    import yaml

    from edge_spec_ros.nodes.drafter_node import DrafterNodeConfig

    params = yaml.safe_load(open(params_file)) or {}
    drafter = (params.get("drafter") or {}).get("ros__parameters") or {}
    if not drafter.get("repeat_decisions", DrafterNodeConfig.repeat_decisions):
        return 1
    return int(drafter.get("max_decisions", DrafterNodeConfig.max_decisions))


def yaml_cmd_vel_type(params_file: str) -> str:
    """The action node's ``cmd_vel_type`` as the YAML sets it (the simulated room and the monitor take
    the same type)."""
    import yaml

    from edge_spec_ros.nodes.action_node import ActionNodeConfig

    params = yaml.safe_load(open(params_file)) or {}
    action = (params.get("action") or {}).get("ros__parameters") or {}
    return str(action.get("cmd_vel_type", ActionNodeConfig.cmd_vel_type))


def yaml_dragon_model(params_file: str) -> str:
    """The drafter's ``dragon_model`` as the YAML sets it ('' : the drafter's own LM)."""
    import yaml

    params = yaml.safe_load(open(params_file)) or {}
    drafter = (params.get("drafter") or {}).get("ros__parameters") or {}
    return str(drafter.get("dragon_model") or "")


def serve_args(config: BringupConfig, threads: int) -> tuple[str, ...]:
    """The ``edge-spec-ros serve`` arguments of the verifier that ``serve`` starts on loopback: its torch
    threads and, with ``documents``, the DRAGON document folder the drafter's mode dragon asks,
    answered with the drafter's ``dragon_model`` (``config.dragon_model``, else the YAML's) on this
    computer's CPU in float32, as the robot's side runs it."""
    if config.documents and not config.serve:
        raise ValueError("documents is the folder of the verifier bringup starts: it needs serve")
    args: tuple[str, ...] = ("--threads", str(threads))
    if config.documents:
        args += ("--documents", config.documents)
        model = config.dragon_model or yaml_dragon_model(config.params_file)
        if model:
            args += ("--dragon-model", model, "--dtype", "float32", "--device", "cpu")
    return args


def _bag_args(config: BringupConfig) -> list[str]:
    """The bag replay node's parameters from ``--bag`` and its options."""
    args = ["-p", f"bag_replay:bag:={config.bag}"]
    if config.bag_rate != 1.0:
        args += ["-p", f"bag_replay:rate:={float(config.bag_rate)!r}"]
    if config.bag_clock_hz:
        args += ["-p", f"bag_replay:clock_hz:={float(config.bag_clock_hz)!r}"]
    if config.bag_topics:  # YAML lists of quoted strings (a remap rule holds ':=')
        args += ["-p", "bag_replay:topics:=[" + ", ".join(f"'{t}'" for t in config.bag_topics) + "]"]
    if config.bag_remap:
        args += ["-p", "bag_replay:remap:=[" + ", ".join(f"'{r}'" for r in config.bag_remap) + "]"]
    return args


def ros_args(config: BringupConfig, endpoint: str | None, cmd_vel_type: str) -> list[str]:
    """The process's ROS arguments: the YAML, then the overrides the options (and the started verifier's
    ``endpoint``) make."""
    args = ["--ros-args", "--params-file", config.params_file]
    if endpoint:  # the bridge's verifier, and the drafter's in mode dragon
        args += ["-p", f"bridge:verifier_endpoint:={endpoint}", "-p", f"drafter:verifier_endpoint:={endpoint}"]
    if config.dragon_model:
        args += ["-p", f"drafter:dragon_model:={config.dragon_model}"]
    if config.camera_source:
        args += ["-p", f"camera:source:={config.camera_source}"]
    if config.bag:
        args += _bag_args(config)
    if config.sim:
        args += ["-p", "use_sim_time:=true", "-p", "action:odom_topic:=odom", "-p", "sim:lockstep:=true",
                 "-p", f"sim:cmd_vel_type:={cmd_vel_type}"]
    return args


@dataclass
class _Stack:
    """The nodes one bringup composes, and what closing them and drawing the episode need."""

    monitor: Monitor
    nodes: list[Node] = field(default_factory=list)  # closed in this order (the drafter first)
    executor: SingleThreadedExecutor | None = None
    forwarding: object = None  # the library's log lines to /rosout (nodes/rosout.py)
    start: World | None = None  # with --sim: the room as the episode began
    listeners: int = 2  # of the instruction topic: the drafter and action nodes (and the memory node)


def _input_node(config: BringupConfig) -> Node:
    """What the robot sees: a bag's replay, the simulated room or the camera."""
    if config.bag:
        from edge_spec_ros.nodes.bag_replay_node import BagReplayNode

        return BagReplayNode()
    if config.sim:
        from edge_spec_ros.nodes.sim_node import SimNode

        return SimNode()
    from edge_spec_ros.nodes.camera_node import CameraNode

    return CameraNode()


def _compose(config: BringupConfig, stack: _Stack) -> None:
    """Create the nodes into ``stack`` (each kept as soon as it exists, to be closed), add them and the
    monitor to one executor and bring the managed ones up."""
    from edge_spec_ros.nodes.action_node import ActionNode
    from edge_spec_ros.nodes.bridge_node import BridgeNode
    from edge_spec_ros.nodes.drafter_node import DrafterNode
    from edge_spec_ros.nodes.managed import bring_up
    from edge_spec_ros.nodes.rosout import forward_library_logs

    # the drafter first: it closes (and joins its decision thread) before the others go
    stack.nodes += [DrafterNode(), BridgeNode(), ActionNode()]
    stack.forwarding = forward_library_logs(stack.nodes[0])  # the library's log lines: /rosout via the drafter
    if config.memory:
        from edge_spec_ros.nodes.memory_node import MemoryNode

        stack.nodes.append(MemoryNode())
        stack.listeners += stack.nodes[-1].config.record_instructions
    stack.nodes.append(_input_node(config))
    if config.sim:
        world = stack.nodes[-1].world
        stack.start = World(world.objects, world.pose, world.config)
    stack.executor = SingleThreadedExecutor()
    for node in (*stack.nodes, stack.monitor):
        stack.executor.add_node(node)
    bring_up(stack.nodes)  # the managed nodes (nodes/managed.py): configure and activate (autostart)


def _spin_episode(config: BringupConfig, stack: _Stack, stop, print_fn) -> None:
    """Publish the instruction once its listeners are there, then spin until the episode ends."""
    from edge_spec_ros.nodes.lifecycle import spin_until

    executor, monitor = stack.executor, stack.monitor
    if config.instruction:
        deadline = time.monotonic() + DISCOVERY_TIMEOUT_S
        spin_until(executor, lambda: monitor.instruction.get_subscription_count() >= stack.listeners
                   or time.monotonic() > deadline or stop.event.is_set())
        print_fn(f"[instruction] {config.instruction!r}")
        monitor.instruction.publish(String(data=config.instruction))
    end = time.monotonic() + config.timeout_s
    spin_until(executor, lambda: stop.event.is_set() or time.monotonic() > end
               or (config.until_stop and monitor.done.is_set()))
    if time.monotonic() > end:
        print_fn(f"[bringup] safety timeout: {config.timeout_s:g} s without the end of the episode")


def _run_stack(config: BringupConfig, args: list[str], cmd_vel_type: str, print_fn) -> _Stack:
    """Initialise ROS with ``args``, compose and run the stack for one episode, close it."""
    from edge_spec_ros.nodes.lifecycle import close_all, init
    from edge_spec_ros.nodes.rosout import stop_forwarding

    stop = init(args)
    stack = _Stack(Monitor(print_fn, _max_decisions(config.params_file), cmd_vel_type))
    try:
        _compose(config, stack)
        _spin_episode(config, stack, stop, print_fn)
    finally:
        close_all([*stack.nodes, stack.monitor], stack.executor)
        if stack.forwarding is not None:
            stop_forwarding(stack.forwarding)
        stop.restore()
    return stack


def _draw_trajectory(config: BringupConfig, stack: _Stack, print_fn) -> None:
    """The top-down picture of the simulated robot's path: its pose at each decision and at the end."""
    sim, monitor = stack.nodes[-1], stack.monitor
    episode = Episode(sim.target, steps=[(None, d.text) for d in monitor.decisions],
                      poses=[*monitor.decision_poses, sim.world.pose], reached=sim.reached)
    path = plot_trajectory(stack.start, episode, config.trajectory)
    print_fn(f"[sim] trajectory picture: {path}")


def run(config: BringupConfig, print_fn=print) -> Monitor:
    """Run the stack until the instruction cycle ends (or ``timeout_s`` passes, or a signal)."""
    from edge_spec_ros.server_process import verifier_process
    from edge_spec_ros.cpu import cpu_budget, set_torch_threads

    budget = cpu_budget()
    set_torch_threads(budget.torch_threads)
    server = verifier_process(*serve_args(config, budget.torch_threads)) if config.serve else nullcontext(None)
    with server as endpoint:
        cmd_vel_type = yaml_cmd_vel_type(config.params_file)
        stack = _run_stack(config, ros_args(config, endpoint, cmd_vel_type), cmd_vel_type, print_fn)
        if config.sim and config.trajectory:
            _draw_trajectory(config, stack, print_fn)
    return stack.monitor
