"""drafter_node: owns the drafter and the pre-draft cache; one decision cycle per instruction step.

Subscribes  instruction (std_msgs/String), camera/image_raw (sensor_msgs/Image),
            edge_spec/action (NavAction: when the last action is done, decide again)
Publishes   edge_spec/decision (Decision: the decoded reasoning + action), edge_spec/stats (DecodeStats)
Talks to the verifier through bridge_node (edge_spec/decision_request, edge_spec/draft,
edge_spec/exit_result, edge_spec/bridge_status).

Models load once, in the constructor, before the node spins. An instruction starts a cycle: decide
on the latest camera frame, wait for the action node to carry the action out, decide again, until
the action is "stop" (or invalid), ``max_decisions`` is reached, or another instruction arrives.
An empty instruction, "cancel" or "stop" ends the cycle.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import rclpy
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image
from std_msgs.msg import String

from edge_spec_ros.decoding.reference import DecodeConfig
from edge_spec_ros.edge.client import VerifierError
from edge_spec_ros.edge.modes import MODES, EdgeConfig, EdgeDecoder
from edge_spec_ros.models.prompt import PromptConfig, PromptEncoder, decode_image, encode_image
from edge_spec_ros.msg import Decision, DecodeStats as DecodeStatsMsg, NavAction
from edge_spec_ros.nodes.convert import image_to_rgb, stats_to_msg
from edge_spec_ros.nodes.params import declare_config, doc
from edge_spec_ros.nodes.ros_link import RELIABLE, RosVerifierLink
from edge_spec_ros.spec.sampling import SamplingConfig

STOP_WORDS = ("", "cancel", "stop")


@dataclass(frozen=True)
class DrafterNodeConfig:
    drafter_model: str = field(default="embedded", metadata=doc("'embedded' or a Qwen2-VL hub id / local path"))
    quantize_int8: bool = field(default=False, metadata=doc("int8 dynamic quantization of the drafter (CPU)"))
    mode: str = field(default="fsd", metadata=doc("decoding mode: ar (cloud only), sd, fsd, dssd, tkslt, lowpay, pico, pico-fsd"))
    gamma: int = field(default=4, metadata=doc("draft length γ"))
    max_new_tokens: int = field(default=48, metadata=doc("token budget of one decision"))
    temperature: float = field(default=0.0, metadata=doc("0: greedy"))
    seed: int = field(default=0, metadata=doc("seed of the position-indexed random draws"))
    predraft_threads: int = field(default=4, metadata=doc("FSD pre-draft worker threads N"))
    client_queue_policy: str = field(default="priority", metadata=doc("pre-draft queue: priority | fifo | random"))
    server_queue_policy: str = field(default="priority", metadata=doc("verifier's exit queue policy"))
    emulate_tp_s: float = field(default=0.0, metadata=doc("emulated draft-forward time (benchmarks; 0: off)"))
    emulate_tq_s: float = field(default=0.0, metadata=doc("emulated verification time (benchmarks; 0: off)"))
    max_pixels: int = field(default=0, metadata=doc("image pixel budget after resizing (0: the model's own: "
                                                    "the embedded pair's training budget, else 112 x 112)"))
    jpeg_quality: int = field(default=90, metadata=doc("JPEG quality of the frame sent to the verifier"))
    repeat_decisions: bool = field(default=True, metadata=doc("decide again after each action until 'stop'"))
    max_decisions: int = field(default=20, metadata=doc("decisions per instruction at most"))
    settle_s: float = field(default=0.2, metadata=doc("wait after an action ends before the next decision's frame"))
    image_timeout_s: float = field(default=2.0, metadata=doc("wait this long for a camera frame"))
    action_timeout_s: float = field(default=10.0, metadata=doc("wait this long for the action node"))
    open_timeout_s: float = field(default=30.0, metadata=doc("wait for the verifier's prefill (s)"))
    reply_timeout_s: float = field(default=10.0, metadata=doc("wait for one verification (s)"))

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")


PARAMETER_CONFIGS = (DrafterNodeConfig,)


def model_max_pixels(name: str) -> int:
    """The pixel budget a model was trained at: the embedded pair's own, PromptConfig's otherwise."""
    if name == "embedded":
        from edge_spec_ros.models.embedded import embedded_max_pixels

        return embedded_max_pixels()
    return PromptConfig.max_pixels


def load_drafter(name: str, quantize: bool):
    """(drafter, tokenizer) for ``embedded`` or a checkpoint."""
    if name == "embedded":
        from edge_spec_ros.models.embedded import embedded_pair

        pair = embedded_pair(quantize)
        return pair.drafter, pair.tokenizer
    from transformers import AutoTokenizer

    from edge_spec_ros.models.drafter import Drafter, DrafterConfig

    return Drafter.from_config(DrafterConfig(model=name, quantize_int8=quantize)), AutoTokenizer.from_pretrained(name)


class DrafterNode(Node):
    def __init__(self) -> None:
        super().__init__("drafter")
        self.config = c = declare_config(self, DrafterNodeConfig)
        self.get_logger().info(f"loading drafter {c.drafter_model} ...")
        drafter, tokenizer = load_drafter(c.drafter_model, c.quantize_int8)
        max_pixels = c.max_pixels or model_max_pixels(c.drafter_model)
        self.encoder = PromptEncoder(tokenizer, PromptConfig(max_pixels=max_pixels))
        group = ReentrantCallbackGroup()
        self.link = RosVerifierLink(self, c.open_timeout_s, c.reply_timeout_s)
        decode = DecodeConfig(max_new_tokens=c.max_new_tokens, gamma=c.gamma, sampling=SamplingConfig(c.temperature),
                              seed=c.seed, stop_tokens=(tokenizer.eos_token_id,))
        self.decoder = EdgeDecoder(self.link, drafter, EdgeConfig(
            decode=decode, threads=c.predraft_threads, client_policy=c.client_queue_policy,
            server_policy=c.server_queue_policy, tp_s=c.emulate_tp_s, tq_s=c.emulate_tq_s))
        self.decisions = self.create_publisher(Decision, "edge_spec/decision", RELIABLE)
        self.stats = self.create_publisher(DecodeStatsMsg, "edge_spec/stats", RELIABLE)
        self.create_subscription(String, "instruction", self.on_instruction, RELIABLE, callback_group=group)
        self.create_subscription(Image, "camera/image_raw", self.on_image, qos_profile_sensor_data,
                                 callback_group=group)
        self.create_subscription(NavAction, "edge_spec/action", self.on_action, RELIABLE, callback_group=group)
        self._frame: np.ndarray | None = None
        self._frame_cv = threading.Condition()
        self._actions: queue.Queue[NavAction] = queue.Queue()
        self._instructions: queue.Queue[str] = queue.Queue()
        self._generation = 0  # bumped by every instruction: a running cycle stops when it changes
        self._decision_id = 0
        self._worker = threading.Thread(target=self._run, name="decisions", daemon=True)
        self._worker.start()
        self.get_logger().info(f"drafter ready: mode {c.mode}, γ={c.gamma}")

    # --- callbacks: convert and hand over -----------------------------------------------------
    def on_instruction(self, msg: String) -> None:
        self._generation += 1
        self._instructions.put(msg.data.strip())

    def on_image(self, msg: Image) -> None:
        try:
            rgb = image_to_rgb(msg)
        except ValueError as exc:
            self.get_logger().warning(f"camera frame ignored: {exc}", throttle_duration_sec=5.0)
            return
        with self._frame_cv:
            self._frame = rgb
            self._frame_cv.notify_all()

    def on_action(self, msg: NavAction) -> None:
        self._actions.put(msg)

    # --- the decision cycle (its own thread: decoding blocks on verifier replies) -----------------
    def _run(self) -> None:
        while rclpy.ok():
            try:
                instruction = self._instructions.get(timeout=0.5)
            except queue.Empty:
                continue
            generation = self._generation
            if instruction.lower() in STOP_WORDS:
                self.get_logger().info("instruction cycle ended")
                continue
            for _ in range(self.config.max_decisions if self.config.repeat_decisions else 1):
                if generation != self._generation:
                    break
                action = self._decide(instruction)
                if action is None or action.kind in ("stop", "invalid") or not self.config.repeat_decisions:
                    break

    def _decide(self, instruction: str) -> NavAction | None:
        c = self.config
        frame = self._latest_frame()
        if frame is None:
            self.get_logger().warning(f"no camera frame within {c.image_timeout_s:.1f} s: deciding without an image")
        jpg = encode_image(frame, quality=c.jpeg_quality) if frame is not None else b""
        prompt = self.encoder.encode(instruction, decode_image(jpg) if jpg else None)
        self._decision_id += 1
        while not self._actions.empty():
            self._actions.get_nowait()
        try:
            result = self.decoder.decode(c.mode, prompt, jpg)
            text = self.encoder.decode(result.tokens)
        except VerifierError as exc:
            self.get_logger().error(f"decision {self._decision_id} failed: {exc}")
            text, result = "", None
        out = Decision()
        out.header.stamp = self.get_clock().now().to_msg()
        out.decision, out.instruction, out.mode, out.text = self._decision_id, instruction, c.mode, text
        self.decisions.publish(out)
        if result is None:
            return None
        s = result.stats
        self.stats.publish(stats_to_msg(s, self._decision_id, out.header.stamp))
        self.get_logger().info(f"decision {self._decision_id} [{c.mode}] {text!r} τ={s.tau:.2f} "
                               f"r={s.miss_rate:.0%} {s.wall_s * 1e3:.0f} ms")
        try:
            action = self._actions.get(timeout=c.action_timeout_s)
        except queue.Empty:
            self.get_logger().warning("no action from the action node: ending the instruction cycle")
            return None
        time.sleep(action.duration_s + c.settle_s)  # the action node is executing it
        with self._frame_cv:
            self._frame = None  # the next decision waits for a frame taken after the motion
        return action

    def _latest_frame(self) -> np.ndarray | None:
        with self._frame_cv:
            self._frame_cv.wait_for(lambda: self._frame is not None, timeout=self.config.image_timeout_s)
            return self._frame


def main(args: list[str] | None = None) -> None:
    rclpy.init(args=args)
    node = None
    try:
        node = DrafterNode()
        executor = MultiThreadedExecutor(num_threads=4)
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
