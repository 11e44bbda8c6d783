"""`colcon test`: the package as `colcon build` installed it (ament_cmake_pytest, see CMakeLists.txt).

CMake passes the install prefix in EDGE_SPEC_ROS_INSTALL_PREFIX; the Python package, the generated
message module, the C libraries it loads, the executables, the launch file, the YAML and the .msg
definitions must all come from there. Every message type is filled, serialised by the generated
typesupport (rclpy), read back, cross-checked both ways against ``rosbags`` with the installed
.msg definitions (what ``edge-spec-ros record`` writes bags with), and one goes through DDS.
"""

from __future__ import annotations

import array
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

PREFIX = Path(os.environ.get("EDGE_SPEC_ROS_INSTALL_PREFIX", "/nonexistent")).resolve()
EXECUTABLES = ("action_node", "bag_replay_node", "bridge_node", "camera_node", "drafter_node", "sim_node",
               "memory_node", "navigate_node", "edge-spec-ros")

pytestmark = pytest.mark.skipif(not PREFIX.is_dir(), reason="run by `colcon test` (EDGE_SPEC_ROS_INSTALL_PREFIX)")


def installed(path: str | Path) -> bool:
    return Path(path).resolve().is_relative_to(PREFIX)


def message_types() -> dict[str, type]:
    import edge_spec_ros.msg as msgs

    names = sorted(p.stem for p in (PREFIX / "share" / "edge_spec_ros" / "msg").glob("*.msg"))
    return {name: getattr(msgs, name) for name in names}


def filled(cls, seed: int):
    """An instance of ``cls`` with every field set to a value that differs from its default."""
    msg = cls()
    for i, (name, kind) in enumerate(cls.get_fields_and_field_types().items()):
        value = seed + i + 1
        if kind == "std_msgs/Header":
            msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id = value, 1000 * value, f"frame{value}"
        elif kind.startswith("sequence<"):
            inner = kind[len("sequence<"):-1]
            items = [value + 0.25, value + 0.5] if inner in ("float", "double") else [value % 200, (value + 7) % 200]
            setattr(msg, name, items)
        elif kind in ("float", "double"):
            setattr(msg, name, value + 0.125)
        elif kind == "boolean":
            setattr(msg, name, True)
        elif kind == "string":
            setattr(msg, name, f"{name} {value} \u03b3")
        else:  # integers
            setattr(msg, name, value % 200)
    return msg


def plain(value, like=None):
    """``value`` (a ROS message or a ``rosbags`` one) as nested dicts and lists, with the fields of the
    ROS message ``like`` (rosbags classes also carry the constants and ``__msgtype__``)."""
    like = value if like is None else like
    if isinstance(value, (array.array, np.ndarray, list, tuple)):
        return [float(v) for v in value]
    if hasattr(like, "get_fields_and_field_types"):
        return {k: plain(getattr(value, k), getattr(like, k)) for k in like.get_fields_and_field_types()}
    return value


def test_everything_comes_from_the_install_tree():
    import edge_spec_ros
    import edge_spec_ros.msg
    from ament_index_python.packages import get_package_prefix, get_package_share_directory

    from edge_spec_ros import bags

    assert installed(edge_spec_ros.__file__), edge_spec_ros.__file__
    assert installed(edge_spec_ros.msg.__file__), edge_spec_ros.msg.__file__
    assert all(installed(p) for p in edge_spec_ros.__path__), edge_spec_ros.__path__
    from rclpy.serialization import serialize_message

    for cls in message_types().values():
        serialize_message(cls())  # loads the generated typesupport libraries
    with open("/proc/self/maps") as maps:
        libraries = {line.split()[-1] for line in maps if "edge_spec_ros" in line and ".so" in line}
    assert libraries and all(installed(p) for p in libraries), libraries
    assert Path(get_package_prefix("edge_spec_ros")).resolve() == PREFIX
    share = Path(get_package_share_directory("edge_spec_ros"))
    assert installed(share)
    assert (share / "launch" / "go2_nav.launch.py").is_file()
    assert (share / "config" / "go2_nav.yaml").is_file()
    assert bags.msg_dir() is not None and installed(bags.msg_dir()), bags.msg_dir()
    for name in EXECUTABLES:
        assert os.access(PREFIX / "lib" / "edge_spec_ros" / name, os.X_OK), name


def test_every_message_round_trips_and_matches_the_bag_definitions():
    from rclpy.serialization import deserialize_message, serialize_message

    from edge_spec_ros import bags

    store = bags.typestore()
    types = message_types()
    assert len(types) >= 7
    for seed, (name, cls) in enumerate(types.items()):
        msg = filled(cls, 10 * seed)
        data = serialize_message(msg)
        assert deserialize_message(data, cls) == msg, name
        typename = f"edge_spec_ros/msg/{name}"
        theirs = store.deserialize_cdr(data, typename)
        assert plain(theirs, msg) == plain(msg), name
        # and back: the bytes rosbags writes (alignment padding aside, which Fast CDR leaves
        # uninitialised) read as the same message through the generated typesupport
        assert deserialize_message(bytes(store.serialize_cdr(theirs, typename)), cls) == msg, name


def test_a_message_crosses_dds():
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from edge_spec_ros.msg import Decision

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node("installed_package_check", context=context)
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        received: list = []
        node.create_subscription(Decision, "installed_package_check/decision", received.append, qos)
        publisher = node.create_publisher(Decision, "installed_package_check/decision", qos)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, daemon=True)
        spinner.start()
        sent = Decision(decision=7, mode="fsd", text="Reasoning: clear. Action: stop")
        deadline = time.monotonic() + 20
        while not received and time.monotonic() < deadline:
            publisher.publish(sent)
            time.sleep(0.1)
        executor.shutdown()
        node.destroy_node()
        assert received and received[0] == sent
    finally:
        rclpy.try_shutdown(context=context)
