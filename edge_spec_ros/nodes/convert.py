"""Conversions between ROS messages and the project's own types (no rclpy).

Images: ``image_to_rgb`` reads sensor_msgs/Image in the encodings cameras and drivers publish
(sensor_msgs/image_encodings.hpp names), ``compressed_to_rgb`` reads sensor_msgs/CompressedImage
(JPEG, PNG; the ``format`` strings of image_transport's compressed plugin). Both return RGB uint8
(H, W, 3) and raise ``ValueError`` with a reason for anything they cannot read: an unknown encoding,
a zero width or height, a step or data length that does not fit, bytes that do not decode.
"""

from __future__ import annotations

import cv2
import numpy as np
from sensor_msgs.msg import CompressedImage, Image

from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.msg import DecodeStats as DecodeStatsMsg

# encoding -> (channels, bytes per channel, channel order); 16-bit data keeps its 8 high bits
_PLANAR = {
    "rgb8": (3, 1, "rgb"), "bgr8": (3, 1, "bgr"), "rgba8": (4, 1, "rgba"), "bgra8": (4, 1, "bgra"),
    "rgb16": (3, 2, "rgb"), "bgr16": (3, 2, "bgr"), "rgba16": (4, 2, "rgba"), "bgra16": (4, 2, "bgra"),
    "mono8": (1, 1, "mono"), "8UC1": (1, 1, "mono"), "mono16": (1, 2, "mono"), "16UC1": (1, 2, "mono"),
}
# packed 4:2:2 (two pixels share U and V): ROS's "yuv422" is UYVY, "yuv422_yuy2" is YUYV
_YUV422 = {"yuv422": cv2.COLOR_YUV2RGB_UYVY, "uyvy": cv2.COLOR_YUV2RGB_UYVY,
           "yuv422_yuy2": cv2.COLOR_YUV2RGB_YUYV, "yuyv": cv2.COLOR_YUV2RGB_YUYV}
# raw Bayer mosaics, named by the colours of the top-left 2 x 2 block
_BAYER = {"bayer_rggb8": cv2.COLOR_BayerRGGB2RGB, "bayer_bggr8": cv2.COLOR_BayerBGGR2RGB,
          "bayer_gbrg8": cv2.COLOR_BayerGBRG2RGB, "bayer_grbg8": cv2.COLOR_BayerGRBG2RGB}

IMAGE_ENCODINGS = (*_PLANAR, *_YUV422, *_BAYER)
# what rgb_to_image writes: encoding -> OpenCV conversion from RGB
WRITABLE_ENCODINGS = {"rgb8": None, "bgr8": cv2.COLOR_RGB2BGR, "rgba8": cv2.COLOR_RGB2RGBA, "bgra8": cv2.COLOR_RGB2BGRA,
                      "mono8": cv2.COLOR_RGB2GRAY, "mono16": cv2.COLOR_RGB2GRAY, "yuv422": cv2.COLOR_RGB2YUV_UYVY,
                      "uyvy": cv2.COLOR_RGB2YUV_UYVY, "yuv422_yuy2": cv2.COLOR_RGB2YUV_YUYV,
                      "yuyv": cv2.COLOR_RGB2YUV_YUYV}
COMPRESSED_FORMATS = ("jpeg", "png")


def _size_error(msg, what: str) -> ValueError:
    return ValueError(f"{msg.width}x{msg.height} {msg.encoding} image: {what}")


def image_to_rgb(msg: Image) -> np.ndarray:
    """sensor_msgs/Image (any of ``IMAGE_ENCODINGS``) → RGB uint8 (H, W, 3)."""
    encoding = msg.encoding
    if encoding in _PLANAR:
        channels, depth, order = _PLANAR[encoding]
    elif encoding in _YUV422:
        channels, depth, order = 2, 1, "yuv422"
    elif encoding in _BAYER:
        channels, depth, order = 1, 1, "bayer"
    else:
        raise ValueError(f"unsupported image encoding {encoding!r} (supported: {', '.join(IMAGE_ENCODINGS)})")
    if msg.width <= 0 or msg.height <= 0:
        raise _size_error(msg, "zero width or height")
    row = msg.width * channels * depth
    if msg.step < row:
        raise _size_error(msg, f"step {msg.step} is shorter than a row ({row} bytes)")
    data = np.frombuffer(msg.data, np.uint8) if not isinstance(msg.data, list) else np.asarray(msg.data, np.uint8)
    if data.size < msg.step * (msg.height - 1) + row:
        raise _size_error(msg, f"{data.size} bytes of data, expected {msg.step * msg.height} (step {msg.step})")
    if data.size < msg.step * msg.height:  # the last row's padding may be missing
        data = np.concatenate([data, np.zeros(msg.step * msg.height - data.size, np.uint8)])
    rows = data[: msg.step * msg.height].reshape(msg.height, msg.step)[:, :row]
    if order == "yuv422":
        if msg.width % 2:
            raise _size_error(msg, "odd width in a 4:2:2 encoding")
        return cv2.cvtColor(np.ascontiguousarray(rows).reshape(msg.height, msg.width, 2), _YUV422[encoding])
    if order == "bayer":
        return cv2.cvtColor(np.ascontiguousarray(rows), _BAYER[encoding])
    if depth == 2:
        dtype = np.dtype(">u2" if msg.is_bigendian else "<u2")
        pixels = (np.ascontiguousarray(rows).view(dtype) >> 8).astype(np.uint8)
    else:
        pixels = rows
    img = pixels.reshape(msg.height, msg.width, channels)
    if order == "mono":
        return np.ascontiguousarray(np.repeat(img, 3, axis=2))
    if order.startswith("bgr"):
        img = img[..., [2, 1, 0]]
    return np.ascontiguousarray(img[..., :3])


def compressed_to_rgb(msg: CompressedImage) -> np.ndarray:
    """sensor_msgs/CompressedImage (JPEG or PNG, colour or grey, 8 or 16 bits) → RGB uint8 (H, W, 3).

    ``format`` is ``"jpeg"``/``"png"`` or image_transport's ``"<encoding>; jpeg compressed <encoding>"``;
    the bytes themselves say which codec they are, the format only says where the channel order
    deviates from the files' own (an ``rgb8`` payload) and which payloads are depth (not images).
    """
    fmt = (msg.format or "").strip().lower()
    if "compresseddepth" in fmt:
        raise ValueError(f"compressed depth image (format {msg.format!r}) is not a camera image")
    data = np.frombuffer(msg.data, np.uint8) if not isinstance(msg.data, list) else np.asarray(msg.data, np.uint8)
    if data.size == 0:
        raise ValueError(f"compressed image (format {msg.format!r}) with no data")
    img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    if img is None:
        raise ValueError(f"{data.size} bytes (format {msg.format!r}) do not decode as {' or '.join(COMPRESSED_FORMATS)}")
    if img.size == 0:
        raise ValueError(f"compressed image (format {msg.format!r}) decodes to {img.shape[1]}x{img.shape[0]}")
    if img.dtype == np.uint16:
        img = (img >> 8).astype(np.uint8)
    elif img.dtype != np.uint8:
        raise ValueError(f"compressed image (format {msg.format!r}) of {img.dtype} pixels")
    payload_rgb = fmt.split("compressed")[-1].strip().startswith("rgb") if "compressed" in fmt else False
    if img.ndim == 2:
        return np.ascontiguousarray(np.repeat(img[..., None], 3, axis=2))
    if img.shape[2] == 4:
        img = img[..., :3]
    return np.ascontiguousarray(img if payload_rgb else img[..., ::-1])


def rgb_to_image(rgb: np.ndarray, stamp, frame_id: str, encoding: str = "rgb8") -> Image:
    """RGB uint8 (H, W, 3) → sensor_msgs/Image in ``encoding`` (rgb8, bgr8, rgba8, bgra8, mono8, mono16,
    yuv422 / uyvy, yuv422_yuy2 / yuyv)."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise ValueError(f"expected a non-empty RGB array (H, W, 3), got shape {rgb.shape}")
    if encoding not in WRITABLE_ENCODINGS:
        raise ValueError(f"cannot write encoding {encoding!r} (supported: {', '.join(WRITABLE_ENCODINGS)})")
    conversion = WRITABLE_ENCODINGS[encoding]
    pixels = rgb if conversion is None else cv2.cvtColor(rgb, conversion)
    if encoding == "mono16":
        pixels = pixels.astype("<u2") * 257
    msg = Image()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(rgb.shape[0]), int(rgb.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = int(pixels.nbytes // msg.height)
    msg.data = np.ascontiguousarray(pixels).tobytes()
    return msg


def rgb_to_compressed(rgb: np.ndarray, stamp, frame_id: str, codec: str = "jpeg", quality: int = 90) -> CompressedImage:
    """RGB uint8 (H, W, 3) → sensor_msgs/CompressedImage as image_transport's compressed plugin writes it
    (format ``"rgb8; jpeg compressed bgr8"``: the file holds a normal colour image)."""
    if codec not in COMPRESSED_FORMATS:
        raise ValueError(f"codec must be one of {COMPRESSED_FORMATS}, got {codec!r}")
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise ValueError(f"expected a non-empty RGB array (H, W, 3), got shape {rgb.shape}")
    params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)] if codec == "jpeg" else []
    ok, buf = cv2.imencode(".jpg" if codec == "jpeg" else ".png", rgb[..., ::-1], params)
    if not ok:
        raise ValueError(f"cannot encode a {rgb.shape[1]}x{rgb.shape[0]} frame as {codec}")
    msg = CompressedImage()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    msg.format = f"rgb8; {codec} compressed bgr8"
    msg.data = buf.tobytes()
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
