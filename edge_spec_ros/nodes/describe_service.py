"""The Describe service of drafter_node: one image (or the latest camera frame) + a prompt → the
model's text and decoding statistics. Nothing moves: no Decision is published, so the action node
never sees the answer.

Serves      describe (edge_spec_ros/srv/Describe)
Talks to the verifier through bridge_node like the decision cycle (edge_spec/decision_request,
edge_spec/draft, edge_spec/exit_result, edge_spec/bridge_status), on sessions of its own.

The drafter's models, prompt encoder, camera input and decoding configuration serve both the
decision cycle and this service; three rules keep them apart:

- **Never two decodes at once** (one drafter, one CPU budget): the drafter's decoder is wrapped in
  ``ExclusiveDecoder``. A decision's decode takes its lock, waiting if a Describe holds it (at most
  one Describe's decode); a Describe takes it only when it is free and otherwise answers at once
  ``success: false``, "busy: a decision is being decoded" — the decision cycle has priority, a caller
  asks again.
- **Own session ids**: the service opens its verifier sessions through a link of its own numbered
  from ``FIRST_SESSION`` (2**31), so the decision ids that Decision, NavAction, DecodeStats and
  ExitResult carry stay the decision cycle's own, whatever the timing of a Describe.
- **Never block the executor** (one single-threaded executor per process, nodes/lifecycle.py): the
  service callback is a coroutine in a callback group of its own; the decode runs on a worker thread
  and the coroutine awaits an rclpy Future, which the worker completes and then triggers a guard
  condition to wake the executor. Meanwhile the executor goes on delivering the verifier's replies to
  both links. Requests are served one at a time (the group is mutually exclusive).

A request's empty ``mode`` is the drafter's; while the drafter is in mode ``dragon`` (it answers
questions and decodes no image) it is ``FALLBACK_MODE``, ``fsd``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import numpy as np
from builtin_interfaces.msg import Time
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.task import Future

from edge_spec_ros.edge.client import VerifierError
from edge_spec_ros.edge.modes import EdgeDecoder
from edge_spec_ros.edge.registry import ANSWER_MODES, MODES
from edge_spec_ros.models.prompt import decode_image, encode_image
from edge_spec_ros.nodes.convert import compressed_to_rgb, image_to_rgb, stats_to_msg
from edge_spec_ros.nodes.ros_link import RosVerifierLink
from edge_spec_ros.srv import Describe

SERVICE = "describe"
FIRST_SESSION = 2**31  # Describe's verifier sessions: apart from the decision cycle's ids (1, 2, ...)
MAX_NEW_TOKENS = 1024  # a request's token budget at most
JOIN_S = 2.0
BUSY = "busy: a decision is being decoded; ask again when it is over"
# a request's empty mode is the drafter's mode; while the drafter answers questions (mode dragon, which
# describes nothing) it is this verify mode, the YAML's default decision mode (FSD with early exits)
FALLBACK_MODE = "fsd"


def describe_mode(requested: str, drafter_mode: str) -> str:
    """The verify mode a Describe runs: ``requested``, else the drafter's mode if it is a verify mode,
    else ``FALLBACK_MODE``. ValueError for a mode that is not a verify mode (edge/registry.MODES)."""
    mode = requested.strip().lower()
    if not mode:
        return drafter_mode if drafter_mode in MODES else FALLBACK_MODE
    if mode in ANSWER_MODES:
        raise ValueError(f"mode {requested!r} answers questions on instruction (edge_spec/answer), it describes no "
                         f"image: use a verify mode ({', '.join(MODES)}) or leave mode empty ({FALLBACK_MODE})")
    if mode not in MODES:
        raise ValueError(f"unknown mode {requested!r} (one of {', '.join(MODES)})")
    return mode


class ExclusiveDecoder:
    """The drafter's ``EdgeDecoder`` behind a lock: the decision cycle's ``decode`` waits for a
    Describe in progress; ``DescribeService`` only ever try-locks (``lock.acquire(blocking=False)``)."""

    def __init__(self, decoder: EdgeDecoder) -> None:
        self.inner = decoder
        self.lock = threading.Lock()

    def decode(self, *args, **kwargs):
        with self.lock:
            return self.inner.decode(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@dataclass(frozen=True)
class _Job:
    prompt: str
    rgb: np.ndarray
    stamp: object  # builtin_interfaces/Time of the frame
    mode: str
    max_new_tokens: int


@dataclass
class _Answer:
    text: str = ""
    stats: object = None  # DecodeStats message
    error: str = ""


class DescribeService:
    """``describe`` on ``node`` (a DrafterNode: its ``config``, ``encoder``, ``images`` and an
    ``ExclusiveDecoder`` as ``decoder``)."""

    def __init__(self, node: Node) -> None:
        if not isinstance(node.decoder, ExclusiveDecoder):
            raise TypeError("DescribeService needs the drafter's decoder wrapped in ExclusiveDecoder")
        self.node = node
        c = node.config
        self.link = RosVerifierLink(node, c.open_timeout_s, c.reply_timeout_s, first_decision=FIRST_SESSION)
        self._group = MutuallyExclusiveCallbackGroup()
        self._wake = node.create_guard_condition(lambda: None, callback_group=self._group)
        self._thread: threading.Thread | None = None
        self.service = node.create_service(Describe, SERVICE, self.on_request, callback_group=self._group)
        node.context.on_shutdown(self.close)

    # --- the service (executor thread) ----------------------------------------------------------
    async def on_request(self, request, response):
        try:
            job = self._job(request)
        except ValueError as exc:
            return self._refuse(response, str(exc))
        if not self.node.decoder.lock.acquire(blocking=False):
            return self._refuse(response, BUSY)
        done = Future()
        self._thread = threading.Thread(target=self._work, args=(job, done), name="describe", daemon=True)
        self._thread.start()
        answer: _Answer = await done
        response.image_stamp = job.stamp
        if answer.error:
            return self._refuse(response, answer.error)
        response.success, response.text, response.stats = True, answer.text, answer.stats
        self.node.get_logger().info(f"describe {request.prompt!r}: {answer.text!r} τ={answer.stats.tau:.2f} "
                                    f"{answer.stats.wall_s * 1e3:.0f} ms")
        return response

    def _refuse(self, response, message: str):
        self.node.get_logger().warning(f"describe refused: {message}")
        response.success, response.message = False, message
        return response

    def _job(self, request) -> _Job:
        """The request's prompt, frame and settings, or ValueError saying what is wrong."""
        c = self.node.config
        prompt = request.prompt.strip()
        if not prompt:
            raise ValueError("empty prompt")
        mode = describe_mode(request.mode, c.mode)
        budget = request.max_new_tokens or c.max_new_tokens
        if budget > MAX_NEW_TOKENS:
            raise ValueError(f"max_new_tokens {budget} above {MAX_NEW_TOKENS}")
        if request.image.width or request.image.height or len(request.image.data):
            rgb, stamp = image_to_rgb(request.image), request.image.header.stamp  # ValueError says why
        elif len(request.compressed.data):
            rgb, stamp = compressed_to_rgb(request.compressed), request.compressed.header.stamp
        else:
            frame = self.node.images.latest(warn=False)
            if frame is None:
                images = self.node.images
                raise ValueError(f"no image in the request and no fresh frame on {images.topic} "
                                 f"({images.expected_type}, at most {images.config.image_max_age_s:g} s old)")
            rgb = frame.rgb
            stamp = Time(sec=frame.stamp_ns // 10**9, nanosec=frame.stamp_ns % 10**9)
        return _Job(prompt, rgb, stamp, mode, int(budget))

    # --- the decode (worker thread, holding the decoder's lock) ----------------------------------
    def _work(self, job: _Job, done: Future) -> None:
        answer = _Answer()
        try:
            answer = self._decode(job)
        except VerifierError as exc:
            answer.error = f"verifier: {exc}"
        except Exception as exc:  # noqa: BLE001 - any failure is the answer, never the thread's end
            answer.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.node.decoder.lock.release()
            done.set_result(answer)
            try:
                self._wake.trigger()
            except Exception:  # noqa: BLE001 - shutting down: nobody waits any more
                pass

    def _decode(self, job: _Job) -> _Answer:
        node, c = self.node, self.node.config
        inner: EdgeDecoder = node.decoder.inner
        # free text: never the navigation decisions' grammar
        config = replace(inner.config, decode=replace(inner.config.decode, max_new_tokens=job.max_new_tokens),
                         grammar="")
        jpg = encode_image(job.rgb, quality=c.jpeg_quality)  # what the verifier sees, as for a decision
        prompt = node.encoder.encode(job.prompt, decode_image(jpg))
        session = self.link.next_decision
        result = EdgeDecoder(self.link, inner.drafter, config).decode(job.mode, prompt, jpg)
        stats = stats_to_msg(result.stats, session, node.get_clock().now().to_msg())
        return _Answer(node.encoder.decode(result.tokens), stats)

    def close(self) -> None:
        """Wake a decode in progress (its receive fails), join it, and take the link's publishers off the
        node once it has ended."""
        self.link.close()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=JOIN_S)
        if thread is None or not thread.is_alive():
            self.link.destroy()
