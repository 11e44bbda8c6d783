"""drafter_node: owns the drafter and the pre-draft cache; one decision cycle per instruction step.

Subscribes  instruction (std_msgs/String), image_topic (sensor_msgs/Image or, with image_transport
            compressed, <image_topic>/compressed: sensor_msgs/CompressedImage; nodes/image_input.py),
            edge_spec/action (NavAction: when the last action is done, decide again)
Publishes   edge_spec/decision (Decision: the decoded reasoning + action), edge_spec/stats (DecodeStats);
            mode dragon: edge_spec/answer (Answer; nodes/dragon_answer.py) and no Decision
Talks to the verifier through bridge_node (edge_spec/decision_request, edge_spec/draft,
edge_spec/exit_result, edge_spec/bridge_status).

A managed node (nodes/managed.py): configure loads the models, connects the verifier link and
serves ``describe``; activate starts deciding on instructions (an instruction that arrives while the
node is not active is ignored, with a warning); deactivate ends the cycle in progress (a decision
being decoded is not published) and decides nothing more; cleanup ends the decision thread, the
pre-draft threads and the link, and drops the models. An instruction starts a cycle: decide
on a camera frame, wait until the action node reports the motion over (NavAction DONE or CANCELLED),
decide again on a frame taken at least ``settle_s`` after the robot stopped (frame and action stamps
compared on the node's clock: simulated time under use_sim_time), until the action is "stop" (or
invalid), ``max_decisions`` is reached, or another instruction arrives. An empty instruction,
"cancel" or "stop" ends the cycle. By default no decision is made without a camera frame
(``decide_without_image``). Waits are bounded by named safety timeouts.
/diagnostics: ``drafter: decisions``: the mode, the cycle in progress, the last decision's latency
(wall clock of its decode) and the mean, τ, how the last cycle ended; WARN after a failed decision
(until the next one succeeds), ERROR when configure failed (the reason).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

from std_msgs.msg import String

from edge_spec_ros.cpu import cpu_budget, set_torch_threads
from edge_spec_ros.decoding.reference import DecodeConfig
from edge_spec_ros.edge.client import VerifierError
from edge_spec_ros.edge.cycle import CycleConfig, MotionEnd, run_answer, run_cycle
from edge_spec_ros.edge.draft_sources import fresh_drafter
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.edge.pipeline import BRANCHES, DEPTH, MAX_BRANCHES, MAX_DEPTH
from edge_spec_ros.edge.registry import ALL_MODES, FRESH_SOURCE_NAMES, check_fresh_source, find_mode
from edge_spec_ros.models.grammar import GrammarBook, GrammarError, book_for
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.models.prompt import PromptConfig, PromptEncoder, decode_image, encode_image
from edge_spec_ros.models.quantize import SCHEMES, scheme
from edge_spec_ros.msg import Decision, DecodeStats as DecodeStatsMsg, NavAction as NavActionMsg
from edge_spec_ros.nav.config import HARD_MAX_DURATION_S
from edge_spec_ros.nav.motion import TIMEOUT_FACTOR, TIMEOUT_MARGIN_S
from edge_spec_ros.nodes.compat import subscribe_matched
from edge_spec_ros.nodes.convert import stats_to_msg
from edge_spec_ros.nodes.describe_service import DescribeService, ExclusiveDecoder
from edge_spec_ros.nodes.dragon_answer import DragonAnswerer, DragonNodeConfig
from edge_spec_ros.nodes.image_input import ImageInput, ImageInputConfig
from edge_spec_ros.nodes.diagnostics import ERROR, OK, WARN, Diagnostics, Report
from edge_spec_ros.nodes.lifecycle import main_for
from edge_spec_ros.nodes.managed import ManagedConfig, ManagedNode
from edge_spec_ros.nodes.matched import matched_line
from edge_spec_ros.nodes.params import declare_config, doc
from edge_spec_ros.nodes.ros_link import RELIABLE, RosVerifierLink
from edge_spec_ros.spec.sampling import SamplingConfig

WORKER_JOIN_S = 5.0


@dataclass(frozen=True)
class DrafterNodeConfig:
    drafter_model: str = field(default="embedded", metadata=doc("model source (models/pairs.py): 'embedded', "
                                                                "a train-sim-pair or checkpoint directory, a hub id"))
    quantize: str = field(default="none", metadata=doc(
        f"the drafter's quantization scheme (models/quantize.py, docs/quantization.md): {', '.join(SCHEMES)}; "
        "int4-weight needs CUDA"))
    mode: str = field(default="fsd", metadata=doc(
        f"decoding mode: {', '.join(ALL_MODES)} (edge/registry.py; dragon: an instruction is a question, answered "
        "on edge_spec/answer from the memory and the cloud's documents, no motion)"))
    gamma: int = field(default=4, metadata=doc("draft length γ of every round (adaptive_gamma false)", 1, 64))
    adaptive_gamma: bool = field(default=True, metadata=doc(
        "γ per round by ODLD and a hand-over to cloud-only decoding when speculation does not pay (AS²), with "
        "probes back (TK-SLT; edge/gamma.py); false: every round drafts gamma"))
    branch_blocks: int = field(default=BRANCHES, metadata=doc(
        "pico, pico-fsd: branch blocks per round for the likeliest other verdicts of the block being verified "
        "(edge/pipeline.py; 0: none); they change when the verifier works, never the tokens", 0, MAX_BRANCHES))
    pipeline_depth: int = field(default=DEPTH, metadata=doc(
        "pico, pico-fsd: blocks drafted ahead of the one being verified (edge/pipeline.py): 1, the next "
        "(PicoSpec); 2, the one after it too", 1, MAX_DEPTH))
    draft_source: str = field(default="model", metadata=doc(
        f"what drafts a fresh block: {', '.join(FRESH_SOURCE_NAMES)} (edge/registry.py: the drafter model; prompt "
        "lookup, then the model; retrieval from the datastore, then prompt lookup, then the model); the verdict "
        "is the verifier's whatever drafts"))
    datastore: str = field(default="", metadata=doc(
        "draft_source retrieval: the verifier's earlier answers (distill-drafter's distill_data.json, or a JSON list "
        "of token lists; edge/retrieval.py)"))
    grammar: str = field(default="action", metadata=doc(
        "navigation decisions' reply constraint (docs/grammar.md): 'action' (reasoning, then one action of "
        "nav/grammar.py), '' none, or EBNF text; drafter and verifier mask by it, so every decision parses; "
        "describe and dragon answers are never constrained"))
    max_new_tokens: int = field(default=48, metadata=doc("token budget of one decision", 1, 4096))
    temperature: float = field(default=0.0, metadata=doc("0: greedy", 0.0, 100.0))
    seed: int = field(default=0, metadata=doc("seed of the position-indexed random draws", 0, 9223372036854775807))
    predraft_threads: int = field(default=0, metadata=doc("FSD pre-draft worker threads N (0: the CPU budget's "
                                                          "rule, edge_spec_ros/cpu.py)", 0, 64))
    torch_threads: int = field(default=0, metadata=doc("torch compute threads of this process (0: the CPU "
                                                       "budget's rule: cores // 2)", 0, 256))
    client_queue_policy: str = field(default="priority", metadata=doc("pre-draft queue: priority | fifo | random"))
    server_queue_policy: str = field(default="priority", metadata=doc("verifier's exit queue policy"))
    emulate_tp_s: float = field(default=0.0, metadata=doc("emulated T_p: every draft forward lasts at least this long "
                                                          "(EdgeConfig.tp_s; benchmarks; 0: off)", 0.0, 60.0))
    max_pixels: int = field(default=0, metadata=doc("image pixel budget after resizing (0: the model's own: "
                                                    "the embedded pair's training budget, else 112 x 112)", 0, 16777216))
    jpeg_quality: int = field(default=90, metadata=doc("JPEG quality of the frame sent to the verifier", 1, 100))
    repeat_decisions: bool = field(default=True, metadata=doc("decide again after each action until 'stop'"))
    max_decisions: int = field(default=20, metadata=doc("decisions per instruction at most", 1, 1000))
    settle_s: float = field(default=0.2, metadata=doc("the next decision's frame is taken at least this long "
                                                      "after the robot stopped (node clock)", 0.0, 10.0))
    image_timeout_s: float = field(default=2.0, metadata=doc("wait this long (wall clock) for a camera frame",
                                                             0.0, 60.0))
    decide_without_image: bool = field(default=False, metadata=doc("decide on the instruction alone when no "
                                                                   "frame comes (default: end the cycle)"))
    action_timeout_s: float = field(default=10.0, metadata=doc("safety net: wait this long (wall clock) for the "
                                                               "action node, beyond the motion's own bound",
                                                               0.0, 600.0))
    open_timeout_s: float = field(default=30.0, metadata=doc("wait for the verifier's prefill (s)", 0.1, 3600.0))
    reply_timeout_s: float = field(default=10.0, metadata=doc("wait for one verification (s)", 0.1, 3600.0))
    motion_priority: int = field(default=1, metadata=doc(
        "Open.priority of what is decoded while a motion runs (a Describe, an answer, an instruction that "
        "interrupts it): the verifier serves higher priorities first, within serve --priority-lead-s "
        "per level; 0 when standing", 0, 3))

    def __post_init__(self) -> None:
        find_mode(self.mode)
        check_fresh_source(self.draft_source, self.datastore)
        scheme(self.quantize)


PARAMETER_CONFIGS = (DrafterNodeConfig, ImageInputConfig, DragonNodeConfig, ManagedConfig)


def _stamp_ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


class DrafterNode(ManagedNode):
    def __init__(self) -> None:
        super().__init__("drafter")
        self.config = declare_config(self, DrafterNodeConfig)
        self.dragon_config = declare_config(self, DragonNodeConfig)
        self.link: RosVerifierLink | None = None  # configure() .. cleanup()
        self.decoder: ExclusiveDecoder | None = None
        self.describe: DescribeService | None = None
        self.answerer: DragonAnswerer | None = None
        self.encoder: PromptEncoder | None = None
        self.decisions = self.create_publisher(Decision, "edge_spec/decision", RELIABLE)
        self.stats = self.create_publisher(DecodeStatsMsg, "edge_spec/stats", RELIABLE)
        subscribe_matched(self, String, "instruction", self.on_instruction, RELIABLE,
                          on_matched=self.on_instruction_matched)
        self.images = ImageInput(self, declare_config(self, ImageInputConfig))
        self.create_subscription(NavActionMsg, "edge_spec/action", self.on_action, RELIABLE)
        self._cv = threading.Condition()  # guards everything below
        self._ends: dict[int, NavActionMsg] = {}  # decision -> how its motion ended
        self._started: set[int] = set()
        self._instructions: queue.Queue[str | None] = queue.Queue()
        self._generation = 0  # bumped by every instruction: a running cycle stops when it changes
        self._closing = False
        self._worker: threading.Thread | None = None
        self.health = _Health()
        self.diagnostics = Diagnostics(self)
        self.diagnostics.add("decisions", self.report)

    # --- lifecycle (nodes/managed.py) ------------------------------------------------------------
    def configure(self) -> None:
        """Load the models, connect the link, serve ``describe``, start the decision thread."""
        c = self.config
        threads = set_torch_threads(c.torch_threads)
        predraft = c.predraft_threads or cpu_budget().predraft_threads
        self.get_logger().info(f"loading drafter {c.drafter_model} ({threads} torch threads, {predraft} pre-draft "
                               "threads) ...")
        pair = load_pair(c.drafter_model, parts=("drafter",), quantize_drafter=c.quantize)
        drafter, tokenizer = fresh_drafter(c.draft_source, pair.drafter, c.datastore), pair.tokenizer
        self.encoder = PromptEncoder(tokenizer, PromptConfig(max_pixels=c.max_pixels or pair.max_pixels))
        self.link = RosVerifierLink(self, c.open_timeout_s, c.reply_timeout_s)
        decode = DecodeConfig(max_new_tokens=c.max_new_tokens, gamma=c.gamma, sampling=SamplingConfig(c.temperature),
                              seed=c.seed, stop_tokens=(tokenizer.eos_token_id,))
        grammars = self._grammars(tokenizer, pair.drafter.stack.vocab_size)
        # one decoder for decisions and Describe requests; a Describe's decode never overlaps a decision's
        self.decoder = ExclusiveDecoder(EdgeDecoder(self.link, drafter, EdgeConfig(
            decode=decode, threads=predraft, client_policy=c.client_queue_policy,
            server_policy=c.server_queue_policy, tp_s=c.emulate_tp_s, adaptive_gamma=c.adaptive_gamma,
            branch_blocks=c.branch_blocks, pipeline_depth=c.pipeline_depth, grammar=c.grammar), grammars=grammars))
        self.describe = DescribeService(self)  # `describe`: image (or latest frame) + prompt -> text; moves nothing
        # mode dragon: an instruction is a question answered from the memory and the cloud's documents
        self.answerer = DragonAnswerer(self, pair, self.encoder, self.dragon_config, max_new_tokens=c.max_new_tokens,
                                       temperature=c.temperature, seed=c.seed, lock=self.decoder.lock) \
            if find_mode(c.mode).answers else None
        with self._cv:
            self._closing = False
        self._instructions = queue.Queue()
        self._worker = threading.Thread(target=self._run, name="decisions", daemon=True)
        self._worker.start()
        self.get_logger().info(f"drafter ready: mode {c.mode}, γ={c.gamma}")

    def deactivate(self) -> None:
        """End the cycle in progress (a decision being decoded is void) and decide nothing more."""
        with self._cv:
            self._generation += 1
            self._cv.notify_all()

    def _grammars(self, tokenizer, vocab_size: int) -> GrammarBook | None:
        """The grammars over the drafter's vocabulary, with ``grammar`` compiled once now: a grammar that
        does not compile fails the configure with the reason, not the first decision."""
        if not self.config.grammar:
            return None
        book = book_for(tokenizer, vocab_size)
        try:
            book.get(self.config.grammar)
        except GrammarError as exc:
            raise ValueError(f"grammar {self.config.grammar[:60]!r}: {exc}") from None
        return book

    def cleanup(self) -> None:
        """End the decision cycle and join its thread (a decode in progress ends at its next reply), then
        the decoder's pre-draft threads, the Describe service and the link (its publishers too); drop
        the models."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._instructions.put(None)
        if self.describe is not None:
            self.describe.close()
            self.destroy_service(self.describe.service)
        if self.link is not None:
            self.link.close()
        if self._worker is not None:
            self._worker.join(timeout=WORKER_JOIN_S)
            if self._worker.is_alive():
                self.get_logger().warning(f"the decision thread did not end within {WORKER_JOIN_S:g} s")
        if self.link is not None and (self._worker is None or not self._worker.is_alive()):
            self.link.destroy()  # its publishers; a decision thread still alive keeps them
        if self.decoder is not None:
            self.decoder.close()  # the pre-draft threads live as long as the decoder: joined before the node goes
        self._worker = self.link = self.decoder = self.describe = self.answerer = self.encoder = None

    # --- callbacks: convert and hand over -----------------------------------------------------
    def on_instruction(self, msg: String) -> None:
        if not self.active:
            self.get_logger().warning(f"instruction {msg.data.strip()!r} ignored: the drafter is "
                                      f"{self.lifecycle_state}")
            return
        with self._cv:
            self._generation += 1
            self._cv.notify_all()
        self._instructions.put(msg.data.strip())

    def on_instruction_matched(self, count: int) -> None:
        """Log each change in the publishers of ``instruction`` matched on this side. A publisher's own
        count (``get_subscription_count``) says it has matched this subscription, not that this
        subscription has matched it: an instruction published in between is lost (a volatile reader
        never receives what a writer sent before the reader matched it). Tests and operators wait for
        this line before the first instruction."""
        self.get_logger().info(matched_line("instruction", count))

    def on_action(self, msg: NavActionMsg) -> None:
        moving = msg.status == NavActionMsg.STARTED  # the action node runs one motion at a time
        if self.link is not None:
            self.link.priority = self.config.motion_priority if moving else 0
        with self._cv:
            if moving:
                self._started.add(msg.decision)
            else:
                self._ends[msg.decision] = msg
            self._cv.notify_all()

    # --- the decision cycle (its own thread: decoding blocks on verifier replies) -----------------
    def _run(self) -> None:
        c = self.config
        cycle = CycleConfig(c.max_decisions, c.repeat_decisions, c.settle_s)
        while True:
            instruction = self._instructions.get()
            if instruction is None:  # close()
                return
            with self._cv:
                generation = self._generation
            self.health.cycle = instruction

            def decide(text: str, not_before_ns: int | None) -> MotionEnd | None:
                try:
                    end = self._decide(text, generation, not_before_ns)
                except Exception as exc:  # noqa: BLE001 - garbage in or out ends this cycle, never the thread
                    self.get_logger().error(f"decision failed: {exc!r}: ending the instruction cycle")
                    return None
                return None if end is None else MotionEnd(end.kind, _stamp_ns(end.header.stamp))

            if self.answerer is not None:  # mode dragon: answer the question, command no motion
                result = run_answer(instruction, lambda q: self.answerer.answer(q, lambda: self._current(generation)),
                                    lambda: self._current(generation))
            else:
                result = run_cycle(instruction, cycle, decide, lambda: self._current(generation))
            self.health.cycle, self.health.last_cycle = "", f"{result.decisions} decision(s): {result.reason}"
            self.get_logger().info(f"instruction cycle ended after {result.decisions} decisions: {result.reason}")

    def _current(self, generation: int) -> bool:
        with self._cv:
            return generation == self._generation and not self._closing

    def _decide(self, instruction: str, generation: int, not_before_ns: int | None) -> NavActionMsg | None:
        """One decision: frame, decode, publish; then wait for the action node to end the motion."""
        c = self.config
        got = self.images.wait(c.image_timeout_s, not_before_ns=not_before_ns)  # warns if none
        frame = got.rgb if got is not None else None
        if not self._current(generation):
            return None
        if frame is None:
            self.get_logger().warning("deciding without an image" if c.decide_without_image else
                                      "no camera frame: ending the instruction cycle")
            if not c.decide_without_image:
                return None
        jpg = encode_image(frame, quality=c.jpeg_quality) if frame is not None else b""
        prompt = self.encoder.encode(instruction, decode_image(jpg) if jpg else None)
        decision = self.link.next_decision  # the link's session id: Decision and ExitResult agree
        try:
            result = self.decoder.decode(c.mode, prompt, jpg)
            text = self.encoder.decode(result.tokens)
        except VerifierError as exc:
            self.get_logger().error(f"decision {decision} failed: {exc}")
            text, result = "", None
            self.health.failed = f"decision {decision} failed: {exc}"
        if not self._current(generation):
            return None  # a new instruction or a stop arrived while decoding: this one is void
        out = Decision()
        out.header.stamp = self.get_clock().now().to_msg()
        out.decision, out.instruction, out.mode, out.text = decision, instruction, c.mode, text
        if result is not None:  # the statistics go first: a reader that ends on the decision's action
            # (navigate_node's goal, the demo) has them by then, however the topics interleave
            self.stats.publish(stats_to_msg(result.stats, decision, out.header.stamp))
        self.decisions.publish(out)
        if result is None:
            return None
        s = result.stats
        self.health.note(decision, s.wall_s, s.tau)
        self.get_logger().info(f"decision {decision} [{c.mode}] {text!r} τ={s.tau:.2f} "
                               f"r={s.miss_rate:.0%} {s.wall_s * 1e3:.0f} ms")
        return self._motion_end(decision, generation)

    def _motion_end(self, decision: int, generation: int) -> NavActionMsg | None:
        """Wait for the action node's DONE/CANCELLED of ``decision`` (bounded: a silent action node
        ends the cycle)."""
        c = self.config
        started = time.monotonic()
        deadline = started + c.action_timeout_s
        with self._cv:
            while decision not in self._ends:
                if self._generation != generation or self._closing:
                    return None
                if decision in self._started:  # the motion's own bound, then the safety net
                    deadline = started + c.action_timeout_s + TIMEOUT_FACTOR * HARD_MAX_DURATION_S + TIMEOUT_MARGIN_S
                left = deadline - time.monotonic()
                if left <= 0:
                    self.get_logger().warning(f"decision {decision}: the action node did not report the end of "
                                              "the motion: ending the instruction cycle")
                    return None
                self._cv.wait(min(left, 0.5))
            self._started.discard(decision)
            return self._ends.pop(decision)

    # --- /diagnostics ---------------------------------------------------------------------------------
    def report(self) -> Report:
        h, c = self.health, self.config
        values = {"lifecycle": self.lifecycle_state, "mode": c.mode, "cycle": h.cycle, "decisions": h.decisions,
                  "last_decision": h.last_decision or "",
                  "last_latency_s": f"{h.last_latency_s:.3f}" if h.decisions else "",
                  "mean_latency_s": f"{h.total_latency_s / h.decisions:.3f}" if h.decisions else "",
                  "tau": f"{h.tau:.3f}" if h.decisions else "", "last_cycle": h.last_cycle,
                  "last_failure": h.failed or self.last_failure}
        if self.last_failure and not self.active:
            return Report(ERROR, self.last_failure, values)
        state = f"deciding: {h.cycle!r}" if h.cycle else "idle" if self.active else self.lifecycle_state
        if h.failed:
            return Report(WARN, f"{state}; {h.failed}", values)
        return Report(OK, f"{state} (mode {c.mode})" if self.active else state, values)


@dataclass
class _Health:
    """What the drafter's /diagnostics report (written by the decision thread, read by the timer)."""

    cycle: str = ""  # the instruction of the cycle in progress
    last_cycle: str = ""  # how the last cycle ended
    decisions: int = 0
    last_decision: int = 0
    last_latency_s: float = 0.0
    total_latency_s: float = 0.0
    tau: float = 0.0
    failed: str = ""  # the last decision failed, and why ("" : it did not)

    def note(self, decision: int, latency_s: float, tau: float) -> None:
        self.decisions += 1
        self.last_decision, self.last_latency_s, self.tau, self.failed = decision, latency_s, tau, ""
        self.total_latency_s += latency_s


def main(args: list[str] | None = None) -> int:
    return main_for(DrafterNode, args=args)


if __name__ == "__main__":
    raise SystemExit(main())
