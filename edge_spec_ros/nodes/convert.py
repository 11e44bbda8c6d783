"""Conversions between ROS messages and the project's own types (no rclpy)."""

from __future__ import annotations

import numpy as np
from sensor_msgs.msg import Image

from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.msg import DecodeStats as DecodeStatsMsg


def image_to_rgb(msg: Image) -> np.ndarray:
    """sensor_msgs/Image (rgb8, bgr8, rgba8, bgra8, mono8) → RGB uint8 (H, W, 3)."""
    channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}
    if msg.encoding not in channels:
        raise ValueError(f"unsupported image encoding {msg.encoding!r}")
    c = channels[msg.encoding]
    row = msg.width * c
    if msg.step < row or len(msg.data) < msg.step * msg.height:
        raise ValueError(f"image of {msg.width}x{msg.height} {msg.encoding} has step {msg.step} and "
                         f"{len(msg.data)} bytes")
    buf = np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.step)[:, :row]
    img = buf.reshape(msg.height, msg.width, c)
    if msg.encoding == "mono8":
        return np.repeat(img, 3, axis=2)
    if msg.encoding.startswith("bgr"):
        img = img[..., [2, 1, 0]]
    return np.ascontiguousarray(img[..., :3])


def rgb_to_image(rgb: np.ndarray, stamp, frame_id: str) -> Image:
    """RGB uint8 (H, W, 3) → sensor_msgs/Image rgb8."""
    msg = Image()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(rgb.shape[0]), int(rgb.shape[1])
    msg.encoding = "rgb8"
    msg.is_bigendian = 0
    msg.step = msg.width * 3
    msg.data = np.ascontiguousarray(rgb, dtype=np.uint8).tobytes()
    return msg


def stats_to_msg(stats: DecodeStats, decision: int, stamp) -> DecodeStatsMsg:
    d = stats.as_dict()
    msg = DecodeStatsMsg()
    msg.header.stamp = stamp
    msg.decision = decision
    msg.mode = stats.mode
    for name in ("tokens", "rounds", "drafted", "accepted"):
        setattr(msg, name, int(d[name]))
    for name in ("tau", "alpha", "miss_rate", "avg_hit_exit", "ttft_s", "per_token_s", "wall_s", "tp_s", "tq_s",
                 "tc_s", "bytes_up_per_round", "bytes_down_per_round"):
        setattr(msg, name, float(d[name]))
    return msg
