"""The drafter node's answer mode (``dragon``, edge/registry.py): a question answered with DRAGON.

An instruction that arrives while the drafter runs in mode ``dragon`` is a question (e.g. "where did
you see the red chair?"). ``DragonAnswerer.answer`` re-reads the robot's memory (``memory_dir``,
written by nodes/memory_node.py), runs ``dragon/robot.RobotDragon`` against the verifier server's
documents (``serve --documents DIR``) over one ZeroMQ DEALER link per question to
``verifier_endpoint`` (the server the bridge talks to; DRAGON's messages do not travel through the
bridge), and publishes an ``Answer`` on ``edge_spec/answer``. No Decision is published, so the action
node never sees an answer and nothing moves. A refusal (a server without ``--documents``, a
vocabulary mismatch, no reply, a ``dragon_model`` that cannot be loaded) is an Answer with an empty
text and the reason in ``error``, and an error in the log.

The answering LM is the drafter's unless ``dragon_model`` names a model source (e.g. ``smollm2``,
SmolLM2-135M-Instruct: the shipped pair is a navigation policy that does not answer in words); the
verifier must answer with the same source (``serve --dragon-model``), since DRAGON aggregates
next-token distributions over one vocabulary (a different vocabulary size is refused at open). An
answer ends at the tokenizer's eos or ``<|im_end|>``.

Legend (Liu et al. 2025): l ≡ robot, r ≡ cloud; S^l, S^r — whether each side's draft matched the
target token x_t.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rclpy.node import Node

from edge_spec_ros.dragon.document_lm import chat_prompt_ids, stop_token_ids
from edge_spec_ros.dragon.robot import DragonConfig, DragonLinkError, RobotDragon, ZmqDragonLink
from edge_spec_ros.dragon.stores import RobotMemory
from edge_spec_ros.dragon.wire import AGGREGATOR_POLICIES, PAYLOADS
from edge_spec_ros.models.pairs import ModelPair, ModelSourceError, load_pair
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.tokenizer import tokenizer_fingerprint
from edge_spec_ros.msg import Answer as AnswerMsg
from edge_spec_ros.nodes.memory_node import DEFAULT_MEMORY_DIR
from edge_spec_ros.nodes.params import doc
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.wire.curve import client_keys

ANSWER_TOPIC = "edge_spec/answer"


@dataclass(frozen=True)
class DragonNodeConfig:
    """The drafter's parameters for mode ``dragon`` (ignored in the other modes)."""

    verifier_endpoint: str = field(default="tcp://127.0.0.1:5555", metadata=doc(
        "mode dragon: ZeroMQ endpoint of the verifier server (serve --documents DIR), the one bridge_node "
        "talks to; the drafter opens one link per question"))
    curve_secret_file: str = field(default="", metadata=doc("mode dragon: robot's CURVE secret key file; "
                                                            "empty: no CURVE"))
    curve_server_key_file: str = field(default="", metadata=doc("mode dragon: verifier's CURVE public key file"))
    memory_dir: str = field(default=DEFAULT_MEMORY_DIR, metadata=doc("mode dragon: the robot's memory directory "
                                                                      "(memory_node's memory_dir), read before each "
                                                                      "answer"))
    memory_top_k: int = field(default=2, metadata=doc("mode dragon: memory entries the robot's LM reads", 0, 64))
    documents_top_k: int = field(default=2, metadata=doc("mode dragon: documents the cloud's LM reads", 1, 64))
    dragon_policy: str = field(default="dragon", metadata=doc("mode dragon: aggregator placement: dragon "
                                                              "(eq. 8 after every token) | robot | cloud"))
    dragon_payload: str = field(default="full", metadata=doc("mode dragon: distributions on the link: full "
                                                             "(V float32 per draft) | on_demand (exact, fewer bytes)"))
    dragon_timeout_s: float = field(default=30.0, metadata=doc("mode dragon: wait this long for the cloud (open "
                                                               "and every message)", 0.1, 3600.0))
    dragon_model: str = field(default="", metadata=doc(
        "mode dragon: the robot's answering LM, a model source (smollm2, a checkpoint directory, a hub id; "
        "models/pairs.py); empty: the drafter's. The verifier must answer with the same one (serve --dragon-model "
        "SOURCE): both sides aggregate over one vocabulary"))

    def __post_init__(self) -> None:
        if self.dragon_policy not in AGGREGATOR_POLICIES:
            raise ValueError(f"dragon_policy must be one of {AGGREGATOR_POLICIES}, got {self.dragon_policy!r}")
        if self.dragon_payload not in PAYLOADS:
            raise ValueError(f"dragon_payload must be one of {PAYLOADS}, got {self.dragon_payload!r}")
        if not self.memory_dir.strip():
            raise ValueError("memory_dir must not be empty")


class _Unavailable(RuntimeError):
    """The answerer cannot answer at all (its model could not be loaded)."""


@dataclass(frozen=True)
class AnswerOutcome:
    text: str | None  # None: failed (error says why) or void
    error: str = ""


class DragonAnswerer:
    """Answers questions for the drafter node: the drafter's LM over the robot's memory, the cloud's
    LM over its documents, through ``RobotDragon``; publishes ``Answer`` messages."""

    def __init__(self, node: Node, pair: ModelPair, encoder: PromptEncoder, config: DragonNodeConfig, *,
                 max_new_tokens: int, temperature: float, seed: int, lock: threading.Lock | None = None,
                 load: Callable[..., ModelPair] = load_pair) -> None:
        self.node, self.config = node, config
        self.lock = lock or threading.Lock()  # the drafter's model: one decode at a time (Describe try-locks it)
        self.curve = client_keys(config.curve_secret_file, config.curve_server_key_file) \
            if config.curve_secret_file else None
        self.publisher = node.create_publisher(AnswerMsg, ANSWER_TOPIC, RELIABLE)
        self.count = 0
        self.unavailable = ""  # why no question can be answered (a dragon_model that cannot be loaded)
        self.dragon: RobotDragon | None = None
        if config.dragon_model:  # an instruction-following LM of its own (the drafter's may be a navigation policy)
            node.get_logger().info(f"mode dragon: loading the answering model {config.dragon_model} ...")
            try:
                pair = load(config.dragon_model, parts=("drafter",))
            except (ModelSourceError, OSError, ValueError) as exc:
                self.unavailable = (f"dragon_model {config.dragon_model!r} cannot be loaded: {exc}; set it to a "
                                    "model source here (e.g. `edge-spec-ros convert-smollm2` for smollm2) or empty "
                                    "for the drafter's")
                node.get_logger().error(self.unavailable)
                return
            encoder = pair.prompt_encoder()
        if pair.drafter is None:
            raise ValueError("mode dragon needs the drafter's language model")
        self.model = config.dragon_model or "the drafter's"
        self.stop_tokens = stop_token_ids(pair.tokenizer)
        self.encoder = encoder
        self.dragon = RobotDragon(pair.drafter.stack, RobotMemory(os.path.expanduser(config.memory_dir)), chat_prompt_ids(encoder),
                                  pair.tokenizer.decode, DragonConfig(
                                      max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                                      robot_top_k=config.memory_top_k, cloud_top_k=config.documents_top_k,
                                      policy=config.dragon_policy, payload=config.dragon_payload,
                                      timeout_s=config.dragon_timeout_s),
                                  tokenizer_fingerprint=tokenizer_fingerprint(pair.tokenizer))

    def answer(self, question: str, current: Callable[[], bool]) -> str | None:
        """Answer ``question`` and publish it (unless ``current()`` turned false meanwhile: a new
        instruction or a stop voids it; the decision stops at the next token, or within
        ``dragon.robot.CANCEL_POLL_S`` while it waits for the cloud, which drops the session). Returns the
        text, None when it failed or was voided."""
        t0 = time.monotonic()
        self.count += 1
        msg = AnswerMsg()
        msg.answer, msg.question = self.count, question
        out = None
        try:
            if self.dragon is None:
                raise _Unavailable(self.unavailable)
            with self.lock:
                link = ZmqDragonLink(self.config.verifier_endpoint, open_timeout_s=self.config.dragon_timeout_s,
                                     curve=self.curve)
                out = self.dragon.decode(question, link, self.stop_tokens, cancel=lambda: not current())
        except _Unavailable as exc:
            msg.error = str(exc)
        except DragonLinkError as exc:
            msg.error = str(exc)
        except TimeoutError as exc:
            msg.error = f"no reply from the verifier at {self.config.verifier_endpoint}: {exc}"
        except Exception as exc:  # noqa: BLE001 - a failed answer ends this question, never the node
            msg.error = f"{type(exc).__name__}: {exc}"
        else:
            trace = out.trace
            msg.text = self.encoder.decode(list(out.tokens)).strip()
            msg.tokens, msg.memory_entries = len(out.tokens), out.memory_entries
            n = max(1, len(trace.accept_robot))
            msg.robot_acceptance = sum(map(bool, trace.accept_robot)) / n
            msg.cloud_acceptance = sum(map(bool, trace.accept_cloud)) / n
            msg.ttft_s = out.prefill_s + out.first_token_s
        msg.wall_s = time.monotonic() - t0
        if not current():  # superseded (a new instruction or a stop): void, not published
            if out is not None and out.cancelled:
                self.node.get_logger().info(f"answer {msg.answer} to {question!r} cancelled after {msg.tokens} "
                                            f"tokens ({msg.wall_s * 1e3:.0f} ms): a new instruction")
            return None
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.publisher.publish(msg)
        log = self.node.get_logger()
        if msg.error:
            log.error(f"answer {msg.answer} failed: {msg.error}")
            return None
        log.info(f"answer {msg.answer} [dragon] {question!r} -> {msg.text!r} ({msg.tokens} tokens, "
                 f"{msg.memory_entries} memory entries, S^l {msg.robot_acceptance:.2f}, "
                 f"S^r {msg.cloud_acceptance:.2f}, {msg.wall_s * 1e3:.0f} ms)")
        return msg.text
