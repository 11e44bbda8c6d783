"""camera_node: publishes camera frames, raw or compressed, as camera drivers do.

Publishes   camera/image_raw (sensor_msgs/Image in ``encoding``) with ``image_transport: raw``, or
            camera/image_raw/compressed (sensor_msgs/CompressedImage, JPEG or PNG) with ``compressed``
            /diagnostics: ``camera: frame rate`` (hardware id: the source), the measured frame rate
            against ``rate_hz`` over the last 5 s: OK within 10 %, WARN outside it or after 3 periods
            without a frame, ERROR when the source has ended or nothing came for the whole window
Sources: ``synthetic`` (a rendered room, no hardware), an OpenCV device index (``0``, as a string or an
integer), a video file, or a directory of images (played in name order, looping). A source that cannot
be opened is an error: the node logs why and exits with status 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.nodes.convert import COMPRESSED_FORMATS, WRITABLE_ENCODINGS, rgb_to_compressed, rgb_to_image
from edge_spec_ros.nodes.diagnostics import ERROR, Diagnostics, RateMeter, Report
from edge_spec_ros.nodes.image_input import QOS_CHOICES, RELIABLE_IMAGES, TRANSPORTS
from edge_spec_ros.nodes.lifecycle import main_for
from edge_spec_ros.nodes.params import declare_config, doc

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp"}


@dataclass(frozen=True)
class CameraConfig:
    source: str = field(default="synthetic", metadata=doc(
        "synthetic | device index (0, /dev/video0) | video file | image folder"))
    rate_hz: float = field(default=5.0, metadata=doc("frames per second", 0.1, 1000.0))
    frame_id: str = field(default="camera", metadata=doc("header.frame_id"))
    width: int = field(default=224, metadata=doc("synthetic frame width", 1, 8192))
    height: int = field(default=168, metadata=doc("synthetic frame height", 1, 8192))
    image_transport: str = field(default="raw", metadata=doc(
        "raw: sensor_msgs/Image on camera/image_raw | compressed: sensor_msgs/CompressedImage on "
        "camera/image_raw/compressed"))
    encoding: str = field(default="rgb8", metadata=doc("raw frames' encoding: rgb8 | bgr8 | rgba8 | bgra8 | mono8 | "
                                                      "mono16 | yuv422 | yuv422_yuy2"))
    compressed_format: str = field(default="jpeg", metadata=doc("compressed frames' codec: jpeg | png"))
    jpeg_quality: int = field(default=90, metadata=doc("JPEG quality of compressed frames (1-100)", 1, 100))
    qos: str = field(default="sensor_data", metadata=doc("sensor_data (best effort) | reliable"))

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", str(self.source))  # a device index may come as an integer
        if not self.rate_hz > 0:
            raise ValueError(f"rate_hz must be > 0, got {self.rate_hz}")
        if self.image_transport not in TRANSPORTS:
            raise ValueError(f"image_transport must be one of {TRANSPORTS}, got {self.image_transport!r}")
        if self.compressed_format not in COMPRESSED_FORMATS:
            raise ValueError(f"compressed_format must be one of {COMPRESSED_FORMATS}, got {self.compressed_format!r}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality must be in 1..100, got {self.jpeg_quality}")
        if self.qos not in QOS_CHOICES:
            raise ValueError(f"qos must be one of {QOS_CHOICES}, got {self.qos!r}")
        if self.encoding not in WRITABLE_ENCODINGS:
            raise ValueError(f"encoding must be one of {tuple(WRITABLE_ENCODINGS)}, got {self.encoding!r}")


PARAMETER_CONFIGS = (CameraConfig,)


class FrameSource:
    """Frames from one of the supported sources, RGB uint8; ``None`` at the end of a video."""

    def __init__(self, config: CameraConfig) -> None:
        self.config = config
        self.index = 0
        self.capture = None
        self.files: list[Path] = []
        src = config.source
        if src == "synthetic":
            return
        path = Path(src)
        if path.is_dir():
            self.files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            if not self.files:
                raise ValueError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {path}")
            return
        self.capture = cv2.VideoCapture(int(src) if src.isdigit() else src)
        if not self.capture.isOpened():
            raise ValueError(f"cannot open camera source {src!r}")

    def read(self) -> np.ndarray | None:
        self.index += 1
        if self.config.source == "synthetic":
            return synthetic_camera_image(self.config.width, self.config.height, seed=0)
        if self.files:
            bgr = cv2.imread(str(self.files[(self.index - 1) % len(self.files)]), cv2.IMREAD_COLOR)
        else:
            ok, bgr = self.capture.read()
            if not ok:
                return None
        return None if bgr is None else cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)

    def close(self) -> None:
        if self.capture is not None:
            self.capture.release()


class CameraNode(Node):
    def __init__(self) -> None:
        super().__init__("camera")
        self.source: FrameSource | None = None
        self.config = c = declare_config(self, CameraConfig)
        self.source = FrameSource(c)
        qos = qos_profile_sensor_data if c.qos == "sensor_data" else RELIABLE_IMAGES
        if c.image_transport == "raw":
            self.publisher = self.create_publisher(Image, "camera/image_raw", qos)
        else:
            self.publisher = self.create_publisher(CompressedImage, "camera/image_raw/compressed", qos)
        self.timer = self.create_timer(1.0 / c.rate_hz, self.tick)
        self.rate = RateMeter(c.rate_hz)
        self.ended = False
        self.diagnostics = Diagnostics(self, hardware_id=c.source)
        self.diagnostics.add("frame rate", self.report)
        what = c.encoding if c.image_transport == "raw" else c.compressed_format
        self.get_logger().info(f"camera source {c.source} at {c.rate_hz} Hz on {self.publisher.topic_name} ({what})")

    def declare_parameter(self, name, value=None, descriptor=None, ignore_override=False):
        if name == "source" and descriptor is not None:
            descriptor.dynamic_typing = True  # `source: 0` in YAML and `-p camera:source:=0` are integers
        return super().declare_parameter(name, value, descriptor, ignore_override)

    def tick(self) -> None:
        frame = self.source.read()
        if frame is None:
            self.ended = True
            self.get_logger().warning("camera source ended", once=True)
            return
        c = self.config
        stamp = self.get_clock().now().to_msg()
        if c.image_transport == "raw":
            self.publisher.publish(rgb_to_image(frame, stamp, c.frame_id, c.encoding))
        else:
            self.publisher.publish(rgb_to_compressed(frame, stamp, c.frame_id, c.compressed_format, c.jpeg_quality))
        self.rate.tick()

    def report(self) -> Report:
        report = self.rate.report("frames")
        report.values.update(source=self.config.source, topic=self.publisher.topic_name)
        if self.ended:
            return Report(ERROR, f"camera source ended after {self.rate.count} frames", report.values)
        return report

    def destroy_node(self) -> None:
        if self.source is not None:
            self.source.close()
            self.source = None
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    status = main_for(CameraNode, args=args)  # a source that cannot open: one error line, status 1
    if status:
        raise SystemExit(status)  # also for launchers that ignore main()'s return value
    return status


if __name__ == "__main__":
    raise SystemExit(main())
