"""ImageInput: a node's camera input, as robots publish it.

Subscribes  ``image_topic`` (sensor_msgs/Image, any encoding of ``convert.IMAGE_ENCODINGS``) with
            ``image_transport: raw``, or ``<image_topic>/compressed`` (sensor_msgs/CompressedImage,
            JPEG or PNG) with ``image_transport: compressed`` — image_transport's topic convention.

Keeps the latest frame (RGB uint8) with its header stamp and the node-clock time it arrived (ROS time:
with ``use_sim_time`` that is /clock's time, as the stamps of a simulator or a replayed bag are).
A frame that cannot be converted (unknown encoding, zero width or height, bytes that do not decode) is
dropped with a warning; when no fresh frame is there, ``latest`` warns with the topic, the type
expected and what the graph offers instead (another type on the topic, best-effort publishers for a
reliable subscription, other image topics). Warnings are throttled to one per ``image_warn_period_s``
per kind.

    images = ImageInput(node, declare_config(node, ImageInputConfig))
    frame = images.latest(max_age_s=1.0)                 # Frame | None, never blocks
    frame = images.wait(timeout_s=2.0, not_before_ns=t)  # blocks for a frame stamped at or after t
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image

from edge_spec_ros.nodes.convert import COMPRESSED_FORMATS, IMAGE_ENCODINGS, compressed_to_rgb, image_to_rgb
from edge_spec_ros.nodes.params import doc

TRANSPORTS = ("raw", "compressed")
QOS_CHOICES = ("sensor_data", "reliable")
IMAGE_TYPES = {"raw": "sensor_msgs/msg/Image", "compressed": "sensor_msgs/msg/CompressedImage"}
RELIABLE_IMAGES = QoSProfile(depth=2, reliability=ReliabilityPolicy.RELIABLE)


@dataclass(frozen=True)
class ImageInputConfig:
    image_topic: str = field(default="camera/image_raw", metadata=doc(
        "camera topic; with image_transport compressed the frames come on <image_topic>/compressed"))
    image_transport: str = field(default="raw", metadata=doc(
        "raw: sensor_msgs/Image (rgb8, bgr8, rgba8, bgra8, mono8, mono16, yuv422, bayer_*8 ...) | "
        "compressed: sensor_msgs/CompressedImage (JPEG, PNG)"))
    image_qos: str = field(default="sensor_data", metadata=doc(
        "sensor_data: best effort, receives from every publisher | reliable: only from reliable publishers"))
    image_max_age_s: float = field(default=1.0, metadata=doc(
        "a frame that arrived longer ago than this (node clock) is not fresh", 0.001, 3600.0))
    image_warn_period_s: float = field(default=5.0, metadata=doc(
        "at most one warning per this many seconds about missing or unreadable frames", 0.0, 3600.0))

    def __post_init__(self) -> None:
        if not self.image_topic:
            raise ValueError("image_topic must not be empty")
        if self.image_transport not in TRANSPORTS:
            raise ValueError(f"image_transport must be one of {TRANSPORTS}, got {self.image_transport!r}")
        if self.image_qos not in QOS_CHOICES:
            raise ValueError(f"image_qos must be one of {QOS_CHOICES}, got {self.image_qos!r}")
        if not self.image_max_age_s > 0:
            raise ValueError(f"image_max_age_s must be > 0, got {self.image_max_age_s}")
        if not self.image_warn_period_s >= 0:
            raise ValueError(f"image_warn_period_s must be >= 0, got {self.image_warn_period_s}")

    @property
    def subscribed_topic(self) -> str:
        """The topic actually subscribed (before the node's namespace and remapping)."""
        if self.image_transport == "compressed" and not self.image_topic.rstrip("/").endswith("/compressed"):
            return self.image_topic.rstrip("/") + "/compressed"
        return self.image_topic


@dataclass(frozen=True)
class Frame:
    rgb: np.ndarray  # (H, W, 3) uint8
    stamp_ns: int  # header.stamp
    received_ns: int  # the node's clock when it arrived
    frame_id: str
    source: str  # the message it came from: "sensor_msgs/msg/Image bgr8", "... CompressedImage jpeg"

    def age_s(self, now_ns: int) -> float:
        return (now_ns - self.received_ns) / 1e9


def _describe(msg) -> str:
    if isinstance(msg, CompressedImage):
        return f"{IMAGE_TYPES['compressed']} format {msg.format!r}"
    return f"{IMAGE_TYPES['raw']} {msg.width}x{msg.height} encoding {msg.encoding!r}"


class ImageInput:
    """The latest camera frame of ``node``, from the topic, transport and QoS of ``config``."""

    def __init__(self, node: Node, config: ImageInputConfig, callback_group=None,
                 on_frame: Callable[[Frame], None] | None = None) -> None:
        """Subscribe now. ``on_frame(frame)`` (optional) is called on the executor's thread after each
        frame is kept, e.g. to wake a worker waiting on the node's own condition."""
        self.node = node
        self.on_frame = on_frame
        self.config = config
        self.expected_type = IMAGE_TYPES[config.image_transport]
        self.topic = node.resolve_topic_name(config.subscribed_topic)
        msg_type = Image if config.image_transport == "raw" else CompressedImage
        qos = qos_profile_sensor_data if config.image_qos == "sensor_data" else RELIABLE_IMAGES
        self._cv = threading.Condition()
        self._frame: Frame | None = None
        self.received = 0  # frames converted and kept
        self.dropped = 0  # frames that could not be converted
        self._warned: dict[str, float] = {}
        self.logger = node.get_logger()
        try:
            self.subscription = node.create_subscription(msg_type, self.topic, self._on_message, qos,
                                                         callback_group=callback_group)
        except RuntimeError as exc:  # rclpy's RCLError (not public API): e.g. the topic used with another type
            raise ValueError(f"cannot subscribe to {self.topic} as {self.expected_type}: {exc}") from None

    # --- receiving ------------------------------------------------------------------------------
    def _on_message(self, msg) -> None:
        try:
            rgb = compressed_to_rgb(msg) if isinstance(msg, CompressedImage) else image_to_rgb(msg)
        except ValueError as exc:
            with self._cv:
                self.dropped += 1
            supported = (", ".join(COMPRESSED_FORMATS) if isinstance(msg, CompressedImage)
                         else ", ".join(IMAGE_ENCODINGS))
            self._warn("convert", f"dropped a frame on {self.topic}: {_describe(msg)}: {exc} "
                                  f"(expected {self.expected_type} in {supported})")
            return
        stamp = msg.header.stamp
        frame = Frame(rgb, stamp.sec * 10**9 + stamp.nanosec, self.node.get_clock().now().nanoseconds,
                      msg.header.frame_id, _describe(msg) if isinstance(msg, CompressedImage)
                      else f"{IMAGE_TYPES['raw']} {msg.encoding}")
        with self._cv:
            self._frame = frame
            self.received += 1
            self._cv.notify_all()
        if self.on_frame is not None:
            self.on_frame(frame)

    # --- the consumer's side --------------------------------------------------------------------
    def latest(self, max_age_s: float | None = None, not_before_ns: int | None = None,
               warn: bool = True) -> Frame | None:
        """The newest frame if it arrived at most ``max_age_s`` ago (node clock; default
        ``image_max_age_s``) and, with ``not_before_ns``, is stamped (header) at or after it; else
        ``None``, with a throttled warning saying why unless ``warn`` is false. Never blocks."""
        max_age = self.config.image_max_age_s if max_age_s is None else max_age_s
        with self._cv:
            frame = self._frame
        now = self.node.get_clock().now().nanoseconds
        if frame is not None and frame.age_s(now) <= max_age and (not_before_ns is None or frame.stamp_ns >= not_before_ns):
            return frame
        if warn:
            if frame is None:
                self._warn("missing", f"no frame yet on {self.topic}: {self.diagnose()}")
            elif frame.age_s(now) > max_age:
                self._warn("missing", f"the latest frame on {self.topic} is {frame.age_s(now):.1f} s old "
                                      f"(at most {max_age:.1f} s): {self.diagnose()}")
            else:
                self._warn("missing", f"the latest frame on {self.topic} is stamped "
                                      f"{(not_before_ns - frame.stamp_ns) / 1e9:.2f} s too early: {self.diagnose()}")
        return None

    def wait(self, timeout_s: float, not_before_ns: int | None = None, newer_than_ns: int | None = None,
             warn: bool = True) -> Frame | None:
        """Block up to ``timeout_s`` (wall time) for a frame stamped at or after ``not_before_ns``
        (header stamp) and that arrived after ``newer_than_ns`` (node clock); without either, for a
        fresh frame (``image_max_age_s``). ``None`` on timeout, with a throttled warning."""
        def ready() -> bool:
            f = self._frame
            if f is None:
                return False
            if not_before_ns is not None and f.stamp_ns < not_before_ns:
                return False
            if newer_than_ns is not None:
                return f.received_ns > newer_than_ns
            if not_before_ns is not None:
                return True
            return f.age_s(self.node.get_clock().now().nanoseconds) <= self.config.image_max_age_s

        with self._cv:
            if self._cv.wait_for(ready, timeout=timeout_s):
                return self._frame
        if warn:
            self._warn("missing", f"no new frame on {self.topic} within {timeout_s:.1f} s: {self.diagnose()}")
        return None

    def clear(self) -> None:
        """Forget the kept frame (e.g. after a motion: the next decision needs a frame taken after it)."""
        with self._cv:
            self._frame = None

    def destroy(self) -> None:
        self.node.destroy_subscription(self.subscription)

    # --- why no frame ---------------------------------------------------------------------------
    def diagnose(self) -> str:
        """What the graph offers on and around the subscribed topic, in one sentence."""
        expected = f"expected {self.expected_type} (image_transport {self.config.image_transport}, " \
                   f"image_qos {self.config.image_qos})"
        try:
            publishers = self.node.get_publishers_info_by_topic(self.topic)
            topics = self.node.get_topic_names_and_types()
        except Exception as exc:  # the graph is unavailable while the context shuts down
            return f"{expected}; the graph cannot be read ({exc})"
        if not publishers:
            others = []
            for name, types in topics:  # topics where someone publishes images (types of publishers only)
                if name != self.topic and set(types) & set(IMAGE_TYPES.values()):
                    offered = sorted({p.topic_type for p in self.node.get_publishers_info_by_topic(name)})
                    if offered:
                        others.append(f"{name} [{', '.join(offered)}]")
            return (f"{expected}; nobody publishes on {self.topic}"
                    + (f"; image topics in the graph: {'; '.join(others)}" if others else "; no image topic in the graph"))
        seen = sorted({p.topic_type for p in publishers})
        if self.expected_type not in seen:
            hint = {"sensor_msgs/msg/CompressedImage": " (set image_transport: compressed and image_topic to its base name)",
                    "sensor_msgs/msg/Image": " (set image_transport: raw)"}
            return (f"{expected}; the publishers on {self.topic} offer {', '.join(seen)}"
                    + "".join(hint.get(t, "") for t in seen))
        if self.config.image_qos == "reliable" and all(
                p.qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT for p in publishers):
            return f"{expected}; the publishers on {self.topic} are best effort: use image_qos sensor_data"
        with self._cv:
            dropped, received = self.dropped, self.received
        return (f"{expected}; {len(publishers)} publisher(s) of {self.expected_type} on {self.topic}, "
                f"{received} frames received, {dropped} dropped as unreadable")

    def _warn(self, kind: str, text: str) -> None:
        now = time.monotonic()
        with self._cv:
            last = self._warned.get(kind)
            if last is not None and now - last < self.config.image_warn_period_s:
                return
            self._warned[kind] = now
        self.logger.warning(text)
