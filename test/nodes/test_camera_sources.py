"""camera_node: its frame sources (synthetic, an image folder looping, a video file), its options, an
integer device index, and a camera that cannot open (one error, exit status 1)."""

from __future__ import annotations


import cv2
import numpy as np
import pytest

from edge_spec_ros import warm_start
from edge_spec_ros.nodes.camera_node import CameraConfig, FrameSource
from rosharness import node_command


def test_synthetic_frames():
    frame = FrameSource(CameraConfig(width=160, height=120)).read()
    assert frame.shape == (120, 160, 3) and frame.dtype == np.uint8


def test_image_folder_loops_in_name_order(tmp_path):
    colours = [(0, 0, 255), (0, 255, 0)]  # BGR: red, green
    for i, bgr in enumerate(colours):
        cv2.imwrite(str(tmp_path / f"frame_{i}.png"), np.full((20, 30, 3), bgr, np.uint8))
    source = FrameSource(CameraConfig(source=str(tmp_path)))
    frames = [source.read() for _ in range(3)]
    assert tuple(frames[0][0, 0]) == (255, 0, 0) and tuple(frames[1][0, 0]) == (0, 255, 0)  # RGB
    assert np.array_equal(frames[2], frames[0])


def test_video_file_then_end(tmp_path):
    path = str(tmp_path / "clip.avi")
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 5, (32, 24))
    for _ in range(3):
        writer.write(np.full((24, 32, 3), 128, np.uint8))
    writer.release()
    source = FrameSource(CameraConfig(source=path))
    frames = [source.read() for _ in range(4)]
    assert all(f is not None and f.shape == (24, 32, 3) for f in frames[:3]) and frames[3] is None
    source.close()


def test_bad_sources_say_why(tmp_path):
    with pytest.raises(ValueError, match="no images"):
        FrameSource(CameraConfig(source=str(tmp_path)))
    with pytest.raises(ValueError, match="cannot open camera source"):
        FrameSource(CameraConfig(source=str(tmp_path / "missing.mp4")))
    with pytest.raises(ValueError, match="rate_hz"):
        CameraConfig(rate_hz=0)


def test_camera_options_are_checked():
    assert CameraConfig(source=3).source == "3"  # a device index given as an integer
    for bad, match in [({"image_transport": "h264"}, "image_transport"), ({"encoding": "32FC1"}, "encoding"),
                       ({"compressed_format": "webp"}, "compressed_format"), ({"jpeg_quality": 0}, "jpeg_quality"),
                       ({"qos": "fast"}, "qos")]:
        with pytest.raises(ValueError, match=match):
            CameraConfig(**bad)


@pytest.mark.parametrize("how", ["yaml", "command line"])
def test_integer_device_index_and_a_camera_that_cannot_open(tmp_path, how):
    """`source: 7` in the YAML and `-p source:=0` are integers: the node takes them as device indices;
    a device that cannot be opened is one clear error and exit status 1 (no traceback)."""
    if how == "yaml":
        params = tmp_path / "params.yaml"
        params.write_text("camera:\n  ros__parameters:\n    source: 7\n")
        args, index = ["--params-file", str(params)], 7
    else:
        args, index = ["-p", "source:=0"], 0
    result = warm_start.run(node_command("camera_node", *args), capture_output=True, text=True, timeout=60)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert f"]: cannot open camera source '{index}'" in out and out.count("cannot open camera source") == 1
    assert "Traceback" not in out and "InvalidParameterType" not in out and "AttributeError" not in out
