"""Replaying bags recorded elsewhere: written here with ``rosbags`` as a robot's recorder writes them
(sqlite3 and mcap, rosbag2 versions 8 and 9): JPEG frames on /camera/color/image_raw/compressed, bgr8
frames on /camera/color/image_raw, /tf (tf2_msgs, not installed here), a vendor type known only to the
writer, an instruction. bag_replay_node runs in its own process; the test process receives with
ImageInput on a node with ``use_sim_time``."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from rclpy.parameter import Parameter
from rosbags.rosbag2 import Writer
from rosbags.rosbag2.enums import StoragePlugin
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosgraph_msgs.msg import Clock
from std_msgs.msg import String

import rclpy
from edge_spec_ros import warm_start
from edge_spec_ros.bags import bag_info
from edge_spec_ros.msg import Decision
from edge_spec_ros.nodes.bag_replay_node import BagReplayConfig, remap_rules
from edge_spec_ros.nodes.image_input import ImageInput, ImageInputConfig
from edge_spec_ros.nodes.ros_link import RELIABLE
from rosharness import node_command, process, wait_for

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000 * 10**9  # the bag's time: far from now, so bag time and wall time cannot be confused
FRAME_PERIOD_NS = 200_000_000  # 5 Hz
VENDOR_MSG = "float64[] joint_positions\nstring gait\n"
# smooth, so JPEG keeps it close; asymmetric in colour, so a channel swap shows
yy, xx = np.mgrid[0:48, 0:64]
PICTURE = np.stack([xx * 4, yy * 5, 255 - xx * 2], axis=2).astype(np.uint8)


def write_foreign_bag(path: Path, storage: str, version: int, frames: int = 6, instruction_at_s: float = 0.5) -> Path:
    store = get_typestore(Stores.ROS2_HUMBLE if version == 8 else Stores.ROS2_JAZZY)
    store.register(get_types_from_msg(VENDOR_MSG, "acme_msgs/msg/LegState"))  # only this writer knows it
    t = store.types
    plugin = StoragePlugin.SQLITE3 if storage == "sqlite3" else StoragePlugin.MCAP

    def header(ns: int, frame_id: str = "camera_color_optical_frame"):
        return t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
                                        frame_id=frame_id)

    with Writer(path, version=version, storage_plugin=plugin) as writer:
        conns = {topic: writer.add_connection(topic, msgtype, typestore=store) for topic, msgtype in [
            ("/camera/color/image_raw/compressed", "sensor_msgs/msg/CompressedImage"),
            ("/camera/color/image_raw", "sensor_msgs/msg/Image"),
            ("/tf", "tf2_msgs/msg/TFMessage"),
            ("/acme/leg_state", "acme_msgs/msg/LegState"),
            ("/acme/leg_state_filtered", "acme_msgs/msg/LegState"),
            ("/instruction", "std_msgs/msg/String")]}
        messages = []
        jpeg = np.frombuffer(cv2.imencode(".jpg", PICTURE[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 95])[1], np.uint8)
        bgr = np.ascontiguousarray(PICTURE[..., ::-1]).ravel()
        for i in range(frames):
            ns = T0 + i * FRAME_PERIOD_NS
            messages.append(("/camera/color/image_raw/compressed", ns, t["sensor_msgs/msg/CompressedImage"](
                header=header(ns), format="rgb8; jpeg compressed bgr8", data=jpeg)))
            messages.append(("/camera/color/image_raw", ns + 1000, t["sensor_msgs/msg/Image"](
                header=header(ns), height=48, width=64, encoding="bgr8", is_bigendian=0, step=64 * 3, data=bgr)))
            transform = t["geometry_msgs/msg/TransformStamped"](
                header=header(ns, "odom"), child_frame_id="base_link", transform=t["geometry_msgs/msg/Transform"](
                    translation=t["geometry_msgs/msg/Vector3"](x=0.1 * i, y=0.0, z=0.0),
                    rotation=t["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0)))
            messages.append(("/tf", ns + 2000, t["tf2_msgs/msg/TFMessage"](transforms=[transform])))
            for topic in ("/acme/leg_state", "/acme/leg_state_filtered"):
                messages.append((topic, ns + 3000, t["acme_msgs/msg/LegState"](
                    joint_positions=np.zeros(12), gait="trot")))
        messages.append(("/instruction", T0 + int(instruction_at_s * 1e9), t["std_msgs/msg/String"](
            data="find the silver bottle")))
        for topic, ns, msg in sorted(messages, key=lambda m: m[1]):
            writer.write(conns[topic], ns, store.serialize_cdr(msg, conns[topic].msgtype))
    return path


def sim_time_node(ros, name: str):
    """A node of the test process that follows /clock."""
    node = rclpy.create_node(name, context=ros.context, parameter_overrides=[Parameter("use_sim_time", value=True)])
    ros.executor.add_node(node)
    return node


def test_config_and_remap_rules():
    assert remap_rules(("/a:=/b", "", "/c/d:=e")) == {"/a": "/b", "/c/d": "e"}
    with pytest.raises(ValueError, match="is not FROM:=TO"):
        BagReplayConfig(bag="x", remap=("/a=/b",))
    with pytest.raises(ValueError, match="clock_hz"):
        BagReplayConfig(bag="x", clock_hz=-1.0)
    assert BagReplayConfig(bag="x", topics=("", "/a")).topic_filter == ("/a",)


@pytest.mark.parametrize("storage,version", [("sqlite3", 8), ("sqlite3", 9), ("mcap", 8), ("mcap", 9)])
def test_foreign_bag_replays_with_clock_and_remapping(ros, tmp_path, storage, version):
    bag = write_foreign_bag(tmp_path / "robot_bag", storage, version)
    info = bag_info(bag)
    assert (info.storage, info.version, info.message_count) == (storage, version, 6 * 5 + 1)
    ns = f"/{storage}{version}"
    probe = sim_time_node(ros, f"probe_{storage}{version}")
    compressed = ImageInput(probe, ImageInputConfig(image_topic=f"{ns}/camera/image_raw", image_transport="compressed",
                                                    image_max_age_s=60.0))
    raw = ImageInput(probe, ImageInputConfig(image_topic=f"{ns}/color/image_raw", image_max_age_s=60.0))
    clocks = ros.collect(Clock, "/clock", 50)
    instructions = ros.collect(String, "/instruction", RELIABLE)
    remap = (f"'/camera/color/image_raw/compressed:={ns}/camera/image_raw/compressed', "  # quoted: ':=' in YAML
             f"'/camera/color/image_raw:={ns}/color/image_raw'")
    log = tmp_path / "replay.log"
    with process(node_command("bag_replay_node", "-p", f"bag:={bag}", "-p", "clock_hz:=20.0",
                              "-p", f"remap:=[{remap}]"), log) as proc:
        assert proc.wait(timeout=40) == 0, log.read_text()
    out = log.read_text()
    wait_for(lambda: raw.received == 6 and compressed.received == 6 and instructions, 5, f"every frame ({out})")
    # every frame, converted: bgr8 exactly, JPEG closely
    assert np.array_equal(raw.latest(max_age_s=60).rgb, PICTURE)
    assert np.abs(compressed.latest(max_age_s=60).rgb.astype(int) - PICTURE).mean() < 3
    assert instructions[0].data == "find the silver bottle"
    # /clock runs on bag time, never backwards; the use_sim_time node took its frames' time from it
    times = [c.clock.sec * 10**9 + c.clock.nanosec for c in clocks]
    assert times[0] == T0 and times == sorted(times) and times[-1] == T0 + 5 * FRAME_PERIOD_NS + 1000  # the last message played
    assert len(times) >= 15  # 20 Hz over 1 s of bag time, besides one per message
    assert T0 <= raw.latest(max_age_s=60).received_ns <= T0 + 5 * FRAME_PERIOD_NS + 1000
    assert probe.get_clock().now().nanoseconds >= T0 + 5 * FRAME_PERIOD_NS
    # unknown types: skipped, one warning per type (LegState is on two topics), the rest played
    assert out.count("skipping tf2_msgs/msg/TFMessage (/tf)") == 1
    assert out.count("skipping acme_msgs/msg/LegState") == 1
    assert "replayed 13 messages" in out
    for images in (compressed, raw):
        images.destroy()
    ros.executor.remove_node(probe)
    probe.destroy_node()


def test_topic_filter_and_what_is_not_there(ros, tmp_path):
    bag = write_foreign_bag(tmp_path / "robot_bag", "mcap", 9)
    raw = ImageInput(ros.node, ImageInputConfig(image_topic="/camera/color/image_raw", image_max_age_s=60.0))
    instructions = ros.collect(String, "/instruction", RELIABLE)
    log = tmp_path / "replay.log"
    seen_compressed = []
    with process(node_command("bag_replay_node", "-p", f"bag:={bag}", "-p", "wait_for_subscribers_s:=10.0",
                              "-p", "topics:=[/camera/color/image_raw, /tf, /nope]"), log) as proc:
        wait_for(lambda: raw.received > 0, 30, lambda: f"a frame ({log.read_text()})")
        seen_compressed.append(ros.node.count_publishers("/camera/color/image_raw/compressed"))
        assert proc.wait(timeout=30) == 0, log.read_text()
    out = log.read_text()
    wait_for(lambda: raw.received == 6, 5, f"every frame ({raw.received} {raw.dropped} {out})")
    assert seen_compressed == [0] and not instructions  # filtered out: not even advertised
    assert out.count("skipping tf2_msgs/msg/TFMessage (/tf)") == 1 and "acme_msgs" not in out
    assert "not in the bag: /nope" in out and "replayed 6 messages" in out
    raw.destroy()


def test_a_bag_that_cannot_be_read_is_one_error_and_status_1(tmp_path):
    result = warm_start.run(node_command("bag_replay_node", "-p", f"bag:={tmp_path / 'missing'}"),
                            capture_output=True, text=True, timeout=60)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert f"cannot open bag {tmp_path / 'missing'}" in out and "Traceback" not in out


def test_bringup_drives_the_stack_from_a_foreign_bag(ros, server_endpoint, tmp_path):
    """`bringup --bag` with a topic filter, a remap of the robot's camera topic onto the drafter's and
    /clock: the drafter, which never decides without a frame, decides on the bag's frames."""
    # the instruction 4 s into the bag: the decision it causes is published once, and this process's
    # reader must have matched the drafter's writer by then (a loaded machine discovers slowly)
    bag = write_foreign_bag(tmp_path / "robot_bag", "mcap", 9, frames=25, instruction_at_s=4.0)
    config = yaml.safe_load((ROOT / "config" / "go2_nav.yaml").read_text())
    config["bridge"]["ros__parameters"]["verifier_endpoint"] = server_endpoint
    config["drafter"]["ros__parameters"].update(max_new_tokens=16, predraft_threads=2, decide_without_image=False,
                                                max_decisions=1)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(config))
    decisions = ros.collect(Decision, "edge_spec/decision", RELIABLE)
    clocks = ros.collect(Clock, "/clock", 50)
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "bringup", "--params", str(params), "--bag", str(bag),
           "--bag-topic", "/camera/color/image_raw", "--bag-topic", "/instruction", "--bag-topic", "/tf",
           "--bag-remap", "/camera/color/image_raw:=/camera/image_raw", "--bag-clock", "20", "--timeout", "60"]
    log = tmp_path / "bringup.log"
    with process(cmd, log):
        wait_for(lambda: decisions, 90, lambda: f"a decision ({log.read_text()[-3000:]})")
    out = log.read_text()
    assert decisions[0].instruction == "find the silver bottle" and decisions[0].text
    assert "no camera frame" not in out
    assert out.count("skipping tf2_msgs/msg/TFMessage (/tf)") == 1
    assert "/camera/color/image_raw → /camera/image_raw" in out
    assert clocks and all(T0 <= c.clock.sec * 10**9 + c.clock.nanosec <= T0 + 5 * 10**9 for c in clocks)
