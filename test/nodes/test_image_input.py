"""ImageInput (nodes/image_input.py) in the test process, fed by camera_node and bag_replay_node
processes: raw frames in another encoding, compressed frames, the wrong type or QoS on the topic
(the warning says what is there and what was expected), unreadable frames (dropped, the next good
frame still arrives), stale frames."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from rosbags.rosbag2 import Writer
from rosbags.typesys import Stores, get_typestore

from edge_spec_ros.server_process import stop
from edge_spec_ros.nodes.image_input import ImageInput, ImageInputConfig
from rosharness import node_command, process, wait_for

RNG = np.random.default_rng(3)
PICTURE = RNG.integers(0, 256, (48, 64, 3), dtype=np.uint8)  # RGB; noise: any channel swap shows


class Warnings:
    """Stands in for the node's logger: keeps the warnings."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def warning(self, text: str) -> None:
        self.texts.append(text)


def image_input(ros, **config) -> tuple[ImageInput, Warnings]:
    images = ImageInput(ros.node, ImageInputConfig(**config))
    images.logger = warnings = Warnings()
    return images, warnings


@pytest.fixture(scope="module")
def picture_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pictures")
    cv2.imwrite(str(folder / "frame.png"), PICTURE[..., ::-1])
    return folder


def camera(namespace: str, folder: Path, *params: str) -> list[str]:
    return node_command("camera_node", "-r", f"__ns:={namespace}", "-p", f"source:={folder}",
                        "-p", "rate_hz:=10.0", *(a for p in params for a in ("-p", p)))


def test_config_checks_and_topic_convention():
    assert ImageInputConfig().subscribed_topic == "camera/image_raw"
    assert ImageInputConfig(image_transport="compressed").subscribed_topic == "camera/image_raw/compressed"
    assert ImageInputConfig(image_topic="/cam/compressed", image_transport="compressed").subscribed_topic == "/cam/compressed"
    for bad, match in [({"image_transport": "theora"}, "image_transport"), ({"image_qos": "fast"}, "image_qos"),
                       ({"image_max_age_s": 0.0}, "image_max_age_s"), ({"image_topic": ""}, "image_topic")]:
        with pytest.raises(ValueError, match=match):
            ImageInputConfig(**bad)


def test_raw_bgr8_frames_from_a_camera_process(ros, picture_folder, tmp_path):
    seen = []
    images = ImageInput(ros.node, ImageInputConfig(image_topic="/t1/camera/image_raw", image_warn_period_s=0.0),
                        on_frame=seen.append)
    images.logger = warnings = Warnings()
    assert images.latest() is None and "nobody publishes on /t1/camera/image_raw" in warnings.texts[-1]
    with process(camera("/t1", picture_folder, "encoding:=bgr8", "frame_id:=head"), tmp_path / "camera.log"):
        frame = images.wait(timeout_s=20.0)
        assert frame is not None, (tmp_path / "camera.log").read_text()
        assert np.array_equal(frame.rgb, PICTURE)  # bgr8 on the wire, RGB out, bit exact
        assert frame.source == "sensor_msgs/msg/Image bgr8" and frame.frame_id == "head" and frame.stamp_ns > 0
        assert images.latest() is not None
        later = images.wait(timeout_s=5.0, newer_than_ns=frame.received_ns)
        assert later is not None and later.received_ns > frame.received_ns
        assert seen and seen[-1].received_ns >= later.received_ns  # the hook sees every kept frame
        # a frame stamped after a given time (the motion's end): the camera stamps at 10 Hz
        after = later.stamp_ns + 250_000_000
        assert images.latest(not_before_ns=after) is None and "s too early" in warnings.texts[-1]
        stamped = images.wait(timeout_s=5.0, not_before_ns=after)
        assert stamped is not None and stamped.stamp_ns >= after
    time.sleep(0.6)
    assert images.latest(max_age_s=0.5) is None  # the camera stopped: its last frame is stale
    assert re.search(r"the latest frame on /t1/camera/image_raw is \d+\.\d s old \(at most 0\.5 s\)", warnings.texts[-1])
    images.destroy()


def test_compressed_frames(ros, picture_folder, tmp_path):
    compressed, _ = image_input(ros, image_topic="/t2/camera/image_raw", image_transport="compressed")
    reliable, w_qos = image_input(ros, image_topic="/t2/camera/image_raw", image_transport="compressed",
                                  image_qos="reliable", image_warn_period_s=0.0)
    with process(camera("/t2", picture_folder, "image_transport:=compressed", "compressed_format:=png"),
                 tmp_path / "camera.log"):
        frame = compressed.wait(timeout_s=20.0)
        assert frame is not None, (tmp_path / "camera.log").read_text()
        assert np.array_equal(frame.rgb, PICTURE)
        assert frame.source == "sensor_msgs/msg/CompressedImage format 'rgb8; png compressed bgr8'"
        # a reliable subscription cannot hear best-effort publishers: the warning says so
        assert reliable.latest() is None and reliable.received == 0
        assert "/t2/camera/image_raw/compressed" in w_qos.texts[-1]
        assert "best effort: use image_qos sensor_data" in w_qos.texts[-1]
        reliable.latest()
        assert len(w_qos.texts) == 2  # image_warn_period_s 0: every time
    compressed.destroy()
    reliable.destroy()


def test_a_wrong_subscription_is_told_what_the_topic_carries(ros, picture_folder, tmp_path):
    raw_on_compressed, w_type = image_input(ros, image_topic="/t4/camera/image_raw/compressed")
    raw_on_base, w_base = image_input(ros, image_topic="/t4/camera/image_raw")
    with process(camera("/t4", picture_folder, "image_transport:=compressed"), tmp_path / "camera.log"):
        wait_for(lambda: ros.node.count_publishers("/t4/camera/image_raw/compressed") == 1, 20, "the camera")
        time.sleep(0.5)  # frames flow (and are not received: the type differs)
        # the same topic, the wrong type: the warning names the topic, the type there and the type expected
        assert raw_on_compressed.latest() is None and raw_on_compressed.received == 0
        text = w_type.texts[-1]
        assert "/t4/camera/image_raw/compressed" in text and "offer sensor_msgs/msg/CompressedImage" in text
        assert "expected sensor_msgs/msg/Image" in text and "image_transport: compressed" in text
        # nothing on the raw topic: the warning points at the compressed one
        assert raw_on_base.latest() is None
        assert "nobody publishes on /t4/camera/image_raw;" in w_base.texts[-1]
        assert "/t4/camera/image_raw/compressed [sensor_msgs/msg/CompressedImage]" in w_base.texts[-1]
        # warnings are throttled per kind (default: one per 5 s)
        raw_on_compressed.latest()
        assert len(w_type.texts) == 1
        # one process subscribes a topic with one type only: the other type is a clear error
        with pytest.raises(ValueError, match="cannot subscribe to /t4/camera/image_raw/compressed as "
                                             "sensor_msgs/msg/CompressedImage"):
            image_input(ros, image_topic="/t4/camera/image_raw", image_transport="compressed")
    raw_on_compressed.destroy()
    raw_on_base.destroy()


def write_bag(path: Path, topic: str) -> None:
    """A zero-width frame, a frame of an unsupported encoding, then a good bgr8 frame."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    Image = store.types["sensor_msgs/msg/Image"]
    Header, Time = store.types["std_msgs/msg/Header"], store.types["builtin_interfaces/msg/Time"]

    def image(i: int, width: int, encoding: str, data: np.ndarray):
        return Image(header=Header(stamp=Time(sec=100 + i, nanosec=0), frame_id="cam"), height=PICTURE.shape[0],
                     width=width, encoding=encoding, is_bigendian=0, step=width * 3, data=data)

    bgr = np.ascontiguousarray(PICTURE[..., ::-1]).ravel()
    with Writer(path, version=9) as writer:
        conn = writer.add_connection(topic, "sensor_msgs/msg/Image", typestore=store)
        for i, msg in enumerate([image(0, 0, "bgr8", np.zeros(0, np.uint8)), image(1, 64, "32FC1", bgr),
                                 image(2, 64, "bgr8", bgr)]):
            writer.write(conn, 10**9 + i * 2 * 10**8, store.serialize_cdr(msg, "sensor_msgs/msg/Image"))


def test_unreadable_frames_are_dropped_with_a_warning_and_the_next_one_counts(ros, tmp_path):
    bag = tmp_path / "bad_frames"
    write_bag(bag, "/t3/camera/image_raw")
    images, warnings = image_input(ros, image_topic="/t3/camera/image_raw", image_warn_period_s=0.0)
    with process(node_command("bag_replay_node", "-p", f"bag:={bag}"), tmp_path / "replay.log") as proc:
        wait_for(lambda: images.received == 1, 30, "the good frame")
        proc.wait(timeout=20)
    assert images.dropped == 2 and np.array_equal(images.latest(max_age_s=60).rgb, PICTURE)
    zero, unsupported = [t for t in warnings.texts if t.startswith("dropped a frame")]
    assert "on /t3/camera/image_raw: sensor_msgs/msg/Image 0x48 encoding 'bgr8'" in zero
    assert "zero width or height" in zero and "expected sensor_msgs/msg/Image in rgb8, bgr8" in zero
    assert "encoding '32FC1'" in unsupported and "unsupported image encoding" in unsupported
    images.destroy()


# --- 640x480 rgb8 at 5 Hz between processes, with the project's DDS profile (config/fastdds_local.xml)
PUBLISH_FRAMES = """
import sys, time, numpy as np, rclpy
from rclpy.qos import qos_profile_sensor_data
from builtin_interfaces.msg import Time
from edge_spec_ros.nodes.convert import rgb_to_image
count = int(sys.argv[1])
rclpy.init()
node = rclpy.create_node("frame_publisher")
publisher = node.create_publisher(type(rgb_to_image(np.zeros((1, 1, 3), np.uint8), Time(), "")), "large/image_raw",
                                  qos_profile_sensor_data)
deadline = time.monotonic() + 30
while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(1.0)
print("publishing", flush=True)
rgb = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
for i in range(count):
    publisher.publish(rgb_to_image(rgb, Time(sec=i), str(i)))
    time.sleep(0.2)  # 5 Hz
time.sleep(1.0)
print("published", count, flush=True)
"""
COUNT_FRAMES = """
import sys, time, rclpy
from edge_spec_ros.nodes.image_input import ImageInput, ImageInputConfig
count, timeout = int(sys.argv[1]), float(sys.argv[2])
rclpy.init()
node = rclpy.create_node("frame_counter")
images = ImageInput(node, ImageInputConfig(image_topic="large/image_raw"))
print("subscribed", flush=True)
deadline = time.monotonic() + timeout
while images.received < count and time.monotonic() < deadline:
    rclpy.spin_once(node, timeout_sec=0.1)
frame = images.latest(max_age_s=60, warn=False)
print("received", images.received, "shape", None if frame is None else frame.rgb.shape, flush=True)
"""
ROOT = Path(__file__).resolve().parents[2]
DDS_PROFILE = ROOT / "config" / "fastdds_local.xml"


def ip_socket_inodes() -> set[str]:
    """Inodes of every IPv4/IPv6 TCP, UDP and raw socket of this network namespace."""
    inodes = set()
    for name in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6"):
        path = Path("/proc/net") / name
        if path.exists():
            inodes |= {line.split()[9] for line in path.read_text().splitlines()[1:] if line.strip()}
    return inodes


def socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[len("socket:["):-1])
    return out


def large_frames(tmp_path, env: dict, count: int, timeout_s: float = 30.0) -> tuple[int, set[str]]:
    """(frames counted in one process of ``count`` 640x480 rgb8 sent at 5 Hz best effort by another,
    the IP sockets the two processes hold while the frames flow)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **env)
    logs = {name: tmp_path / f"{name}.log" for name in ("counter", "publisher")}
    with open(logs["counter"], "w") as out_c, open(logs["publisher"], "w") as out_p:
        counter = subprocess.Popen([sys.executable, "-c", COUNT_FRAMES, str(count), str(timeout_s)], stdout=out_c,
                                   stderr=subprocess.STDOUT, env=env)
        try:
            wait_for(lambda: "subscribed" in logs["counter"].read_text(), 30, "the counter")
            publisher = subprocess.Popen([sys.executable, "-c", PUBLISH_FRAMES, str(count)], stdout=out_p,
                                         stderr=subprocess.STDOUT, env=env)
            try:
                wait_for(lambda: "publishing" in logs["publisher"].read_text(), 30, "the publisher")
                ip_sockets = (socket_inodes(counter.pid) | socket_inodes(publisher.pid)) & ip_socket_inodes()
                assert publisher.wait(timeout=30) == 0, logs["publisher"].read_text()
            finally:
                stop(publisher)
            assert counter.wait(timeout=30) == 0, logs["counter"].read_text()
        finally:
            stop(counter)
    match = re.search(r"received (\d+) shape (.*)", logs["counter"].read_text())
    assert match, logs["counter"].read_text()
    if int(match.group(1)):
        assert match.group(2) == "(480, 640, 3)"
    return int(match.group(1)), ip_sockets


def test_640x480_rgb8_at_5_hz_arrive_completely_over_shared_memory_only(tmp_path):
    """With config/fastdds_local.xml every frame arrives best effort, and the processes hold no IP
    socket at all (nothing can be sent to any address, loopback included)."""
    received, ip_sockets = large_frames(tmp_path, {"FASTDDS_DEFAULT_PROFILES_FILE": str(DDS_PROFILE)}, 10)
    assert received == 10
    assert not ip_sockets
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # the check sees a socket when there is one
        probe.bind(("127.0.0.1", 0))
        assert socket_inodes(os.getpid()) & ip_socket_inodes()


@pytest.mark.slow
def test_without_the_profile_large_frames_are_lost(tmp_path):
    """Negative control: the built-in shared-memory transport alone (512 KiB segments) loses frames."""
    received, ip_sockets = large_frames(tmp_path, {"FASTDDS_BUILTIN_TRANSPORTS": "SHM"}, 10, timeout_s=6.0)
    assert received < 10 and not ip_sockets
