"""Image conversions (nodes/convert.py): every encoding robots publish, built byte by byte here."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from builtin_interfaces.msg import Time
from sensor_msgs.msg import CompressedImage, Image

from edge_spec_ros.nodes.convert import (IMAGE_ENCODINGS, compressed_to_rgb, image_to_rgb, rgb_to_compressed,
                                         rgb_to_image)

RGB = np.random.default_rng(0).integers(0, 256, (6, 8, 3), dtype=np.uint8)


def image(encoding: str, pixels: np.ndarray, pad: int = 0, bigendian: int = 0) -> Image:
    """An Image whose rows are ``pixels``' bytes followed by ``pad`` padding bytes."""
    h, w = pixels.shape[:2]
    rows = pixels.reshape(h, -1).view(np.uint8).reshape(h, -1)
    rows = np.concatenate([rows, np.full((h, pad), 0xEE, np.uint8)], axis=1)
    msg = Image(height=h, width=w, encoding=encoding, is_bigendian=bigendian, step=rows.shape[1])
    msg.data = rows.tobytes()
    return msg


@pytest.mark.parametrize("encoding,order", [("rgb8", [0, 1, 2]), ("bgr8", [2, 1, 0])])
def test_three_channel_8_bit_with_row_padding(encoding, order):
    out = image_to_rgb(image(encoding, RGB[..., order], pad=5))
    assert out.shape == (6, 8, 3) and out.dtype == np.uint8 and np.array_equal(out, RGB)


@pytest.mark.parametrize("encoding,order", [("rgba8", [0, 1, 2]), ("bgra8", [2, 1, 0])])
def test_four_channel_drops_alpha(encoding, order):
    alpha = np.full((6, 8, 1), 7, np.uint8)
    assert np.array_equal(image_to_rgb(image(encoding, np.concatenate([RGB[..., order], alpha], axis=2))), RGB)


def test_mono8_and_8uc1_are_grey():
    grey = RGB[..., 0]
    for encoding in ("mono8", "8UC1"):
        out = image_to_rgb(image(encoding, grey[..., None]))
        assert np.array_equal(out, np.repeat(grey[..., None], 3, axis=2))


@pytest.mark.parametrize("bigendian", [0, 1])
def test_sixteen_bit_keeps_the_high_byte_in_either_byte_order(bigendian):
    grey16 = (RGB[..., 0].astype(np.uint16) << 8) | 0x5A
    pixels = grey16.astype(">u2" if bigendian else "<u2")
    out = image_to_rgb(image("mono16", pixels[..., None], bigendian=bigendian))
    assert np.array_equal(out[..., 1], RGB[..., 0])
    rgb16 = (RGB.astype(np.uint16) << 8).astype(">u2" if bigendian else "<u2")
    assert np.array_equal(image_to_rgb(image("rgb16", rgb16, bigendian=bigendian)), RGB)
    assert np.array_equal(image_to_rgb(image("bgr16", rgb16[..., ::-1].copy(), bigendian=bigendian)), RGB)


@pytest.mark.parametrize("encoding,layout", [("yuv422", "UYVY"), ("uyvy", "UYVY"), ("yuv422_yuy2", "YUYV"),
                                             ("yuyv", "YUYV")])
def test_packed_yuv422_byte_order(encoding, layout):
    """Left pixel of each pair dark (Y=40), right one bright (Y=220), no colour (U=V=128): reading
    the other byte order would make every pixel mid-grey."""
    y0, y1, u, v = 40, 220, 128, 128
    quad = [u, y0, v, y1] if layout == "UYVY" else [y0, u, y1, v]
    pixels = np.tile(np.array(quad, np.uint8), (4, 3)).reshape(4, 6, 2)  # 4 rows, 6 pixels
    out = image_to_rgb(image(encoding, pixels)).astype(int)
    assert out.shape == (4, 6, 3)
    assert np.all(np.abs(out[..., 0] - out[..., 2]) <= 2)  # grey
    assert np.all(out[:, 0::2, 1] < 50) and np.all(out[:, 1::2, 1] > 210)


def test_yuv422_colour_round_trip():
    rgb = np.zeros((4, 8, 3), np.uint8)
    rgb[:, :4] = (200, 30, 30)
    rgb[:, 4:] = (20, 60, 210)
    for encoding in ("yuv422", "yuv422_yuy2"):
        out = image_to_rgb(rgb_to_image(rgb, Time(), "cam", encoding))
        assert np.abs(out.astype(int) - rgb).max() <= 12, encoding


@pytest.mark.parametrize("encoding,pattern", [("bayer_rggb8", "RGGB"), ("bayer_bggr8", "BGGR"),
                                              ("bayer_gbrg8", "GBRG"), ("bayer_grbg8", "GRBG")])
def test_bayer_mosaics(encoding, pattern):
    colour = {"R": 200, "G": 90, "B": 20}
    block = np.array([[colour[pattern[0]], colour[pattern[1]]], [colour[pattern[2]], colour[pattern[3]]]], np.uint8)
    mosaic = np.tile(block, (5, 5))  # 10 x 10
    out = image_to_rgb(image(encoding, mosaic[..., None]))
    assert np.abs(out[2:-2, 2:-2].astype(int) - (200, 90, 20)).max() <= 2


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8", "yuv422", "yuyv"])
def test_writer_and_reader_agree(encoding):
    rgb = np.repeat(np.repeat(RGB, 2, axis=0), 2, axis=1)  # 2 x 2 blocks: exact through 4:2:2 chroma
    out = image_to_rgb(rgb_to_image(rgb, Time(sec=3), "cam", encoding))
    tolerance = 0 if encoding.endswith("8") else 40
    assert np.abs(out.astype(int) - rgb).max() <= tolerance
    assert set(IMAGE_ENCODINGS) >= {"rgb8", "bgr8", "rgba8", "bgra8", "mono8", "mono16", "yuv422", "yuyv"}


def test_mono_writers():
    grey = np.full((3, 4, 3), 77, np.uint8)
    assert np.array_equal(image_to_rgb(rgb_to_image(grey, Time(), "c", "mono8")), grey)
    msg16 = rgb_to_image(grey, Time(), "c", "mono16")
    assert msg16.step == 8 and np.array_equal(image_to_rgb(msg16), grey)


@pytest.mark.parametrize("width,height", [(0, 480), (640, 0), (0, 0)])
def test_zero_width_or_height_is_a_clear_error(width, height):
    msg = Image(width=width, height=height, encoding="rgb8", step=width * 3)
    with pytest.raises(ValueError, match="zero width or height"):
        image_to_rgb(msg)


def test_malformed_images_say_why():
    with pytest.raises(ValueError, match=r"unsupported image encoding '32FC1' \(supported: rgb8"):
        image_to_rgb(Image(width=2, height=2, encoding="32FC1", step=8, data=bytes(32)))
    with pytest.raises(ValueError, match="step 5 is shorter than a row"):
        image_to_rgb(Image(width=2, height=2, encoding="rgb8", step=5, data=bytes(12)))
    with pytest.raises(ValueError, match="11 bytes of data, expected 12"):
        image_to_rgb(Image(width=2, height=2, encoding="rgb8", step=6, data=bytes(11)))
    with pytest.raises(ValueError, match="odd width"):
        image_to_rgb(Image(width=3, height=2, encoding="yuv422", step=6, data=bytes(12)))
    with pytest.raises(ValueError, match="cannot write encoding"):
        rgb_to_image(RGB, Time(), "c", "32FC1")
    with pytest.raises(ValueError, match="non-empty RGB"):
        rgb_to_image(np.zeros((0, 4, 3), np.uint8), Time(), "c")


@pytest.mark.parametrize("ext,fmt", [(".png", "png"), (".png", "rgb8; png compressed bgr8"),
                                     (".jpg", "jpeg"), (".jpg", "bgr8; jpeg compressed bgr8")])
def test_compressed_colour(ext, fmt):
    """Files written as every encoder writes them (OpenCV: BGR in memory, a normal colour file)."""
    rgb = np.zeros((16, 24, 3), np.uint8)
    rgb[:, :12] = (230, 20, 20)
    rgb[:, 12:] = (20, 20, 230)
    ok, buf = cv2.imencode(ext, rgb[..., ::-1])
    out = compressed_to_rgb(CompressedImage(format=fmt, data=buf.tobytes()))
    assert out.shape == (16, 24, 3) and out.dtype == np.uint8
    error = np.abs(out.astype(int) - rgb)
    if ext == ".png":
        assert error.max() == 0
    else:  # JPEG: chroma is subsampled, so compare away from the colour edge
        assert error[:, :8].max() <= 30 and error[:, 16:].max() <= 30


def test_compressed_grey_16_bit_alpha_and_rgb_payload():
    grey = np.arange(48, dtype=np.uint16).reshape(6, 8) << 10
    out = compressed_to_rgb(CompressedImage(format="mono16; png compressed mono16",
                                            data=cv2.imencode(".png", grey)[1].tobytes()))
    assert np.array_equal(out[..., 0], (grey >> 8).astype(np.uint8)) and np.array_equal(out[..., 0], out[..., 2])
    bgra = np.concatenate([RGB[..., ::-1], np.full((6, 8, 1), 9, np.uint8)], axis=2)
    assert np.array_equal(compressed_to_rgb(CompressedImage(format="png", data=cv2.imencode(".png", bgra)[1].tobytes())), RGB)
    # a payload declared rgb8 holds R in the file's first channel
    swapped = CompressedImage(format="rgb8; png compressed rgb8", data=cv2.imencode(".png", RGB)[1].tobytes())
    assert np.array_equal(compressed_to_rgb(swapped), RGB)


def test_compressed_writer_round_trip():
    msg = rgb_to_compressed(RGB, Time(sec=1), "cam", "png")
    assert msg.format == "rgb8; png compressed bgr8" and msg.header.frame_id == "cam"
    assert np.array_equal(compressed_to_rgb(msg), RGB)
    assert rgb_to_compressed(RGB, Time(), "cam").format == "rgb8; jpeg compressed bgr8"


def test_malformed_compressed_images_say_why():
    with pytest.raises(ValueError, match="no data"):
        compressed_to_rgb(CompressedImage(format="jpeg"))
    with pytest.raises(ValueError, match="do not decode as jpeg or png"):
        compressed_to_rgb(CompressedImage(format="jpeg", data=b"not an image at all"))
    with pytest.raises(ValueError, match="compressed depth"):
        compressed_to_rgb(CompressedImage(format="16UC1; compressedDepth png", data=b"\x00" * 20))
