"""camera_node: publishes camera frames as sensor_msgs/Image (rgb8).

Publishes   camera/image_raw
Sources: ``synthetic`` (a rendered room, no hardware), an OpenCV device index (``0``), a video file,
or a directory of images (played in name order, looping).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.nodes.convert import rgb_to_image
from edge_spec_ros.nodes.params import declare_config, doc

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp"}


@dataclass(frozen=True)
class CameraConfig:
    source: str = field(default="synthetic", metadata=doc("synthetic | device index | video file | image folder"))
    rate_hz: float = field(default=5.0, metadata=doc("frames per second"))
    frame_id: str = field(default="camera", metadata=doc("header.frame_id"))
    width: int = field(default=224, metadata=doc("synthetic frame width"))
    height: int = field(default=168, metadata=doc("synthetic frame height"))

    def __post_init__(self) -> None:
        if not self.rate_hz > 0:
            raise ValueError(f"rate_hz must be > 0, got {self.rate_hz}")


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
        self.config = declare_config(self, CameraConfig)
        self.source = FrameSource(self.config)
        self.publisher = self.create_publisher(Image, "camera/image_raw", qos_profile_sensor_data)
        self.timer = self.create_timer(1.0 / self.config.rate_hz, self.tick)
        self.get_logger().info(f"camera source {self.config.source} at {self.config.rate_hz} Hz")

    def tick(self) -> None:
        frame = self.source.read()
        if frame is None:
            self.get_logger().warning("camera source ended", once=True)
            return
        self.publisher.publish(rgb_to_image(frame, self.get_clock().now().to_msg(), self.config.frame_id))

    def destroy_node(self) -> None:
        self.source.close()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    rclpy.init(args=args)
    node = None
    try:
        node = CameraNode()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
