"""rosbag2 files without ROS (the ``rosbags`` library): the package's types, reading and writing.

Messages stay CDR-serialised end to end: the recorder writes what the middleware delivered and the
replay node publishes the stored bytes, so a bag replays bit-identically.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from rosbags.rosbag2 import Reader, Writer
from rosbags.rosbag2.enums import StoragePlugin
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

MSG_DIR = Path(__file__).resolve().parent.parent / "msg"  # msg/ of a source checkout
STORAGE = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}


def msg_dir() -> Path | None:
    """Where this package's .msg definitions are: msg/ of the source checkout this module runs from,
    else share/edge_spec_ros/msg of the installed package (colcon / ament install, found through the
    ament index, i.e. AMENT_PREFIX_PATH), else that of the Python prefix (the pip virtual environment
    the interfaces were built into); None when there are none."""
    if (MSG_DIR / "Decision.msg").is_file():
        return MSG_DIR
    candidates = []
    try:
        from ament_index_python.packages import get_package_share_directory

        candidates.append(Path(get_package_share_directory("edge_spec_ros")) / "msg")
    except (ImportError, LookupError, OSError, ValueError):  # no ament index, or the package is not in it
        pass
    candidates.append(Path(sys.prefix) / "share" / "edge_spec_ros" / "msg")
    return next((d for d in candidates if (d / "Decision.msg").is_file()), None)


def typestore():
    """ROS 2 Jazzy's standard types plus this package's interfaces (from ``msg_dir()`` when found)."""
    store = get_typestore(Stores.ROS2_JAZZY)
    types = {}
    directory = msg_dir()
    for path in sorted(directory.glob("*.msg")) if directory else []:
        types.update(get_types_from_msg(path.read_text(), f"edge_spec_ros/msg/{path.stem}"))
    store.register(types)
    return store


@dataclass(frozen=True)
class BagMessage:
    topic: str
    msgtype: str  # e.g. "sensor_msgs/msg/Image"
    timestamp_ns: int
    data: bytes  # CDR


@dataclass(frozen=True)
class BagTopic:
    name: str
    msgtype: str
    count: int


@dataclass(frozen=True)
class BagInfo:
    path: Path
    storage: str  # "sqlite3" | "mcap"
    version: int  # rosbag2 metadata version (8: Humble/Iron, 9: Jazzy and later)
    topics: tuple[BagTopic, ...]
    start_ns: int
    end_ns: int
    message_count: int


def bag_info(path: str | Path) -> BagInfo:
    """What a bag holds (from its metadata; no message is read). ``ValueError`` if it cannot be opened."""
    path = Path(path)
    try:
        with Reader(path) as reader:
            counts: dict[tuple[str, str], int] = {}
            for conn in reader.connections:
                key = (conn.topic, conn.msgtype)
                counts[key] = counts.get(key, 0) + conn.msgcount
            meta_file = path / "metadata.yaml"
            meta = yaml.safe_load(meta_file.read_text())["rosbag2_bagfile_information"] if meta_file.is_file() else {}
            storage = str(meta.get("storage_identifier", path.suffix.lstrip(".")))
            return BagInfo(path, storage, int(meta.get("version", 0)),
                           tuple(BagTopic(t, m, n) for (t, m), n in counts.items()),
                           reader.start_time if reader.message_count else 0,
                           reader.end_time if reader.message_count else 0, reader.message_count)
    except Exception as exc:  # rosbags raises its own errors for a missing or unreadable bag
        raise ValueError(f"cannot open bag {path}: {exc}") from None


def read_bag(path: str | Path, topics: tuple[str, ...] = ()) -> Iterator[BagMessage]:
    """Messages in time order (all topics, or only ``topics``)."""
    with Reader(Path(path)) as reader:
        connections = [c for c in reader.connections if not topics or c.topic in topics]
        for conn, timestamp, data in reader.messages(connections=connections):
            yield BagMessage(conn.topic, conn.msgtype, timestamp, bytes(data))


class BagWriter:
    """Append CDR messages to a new bag; one connection per topic."""

    def __init__(self, path: str | Path, storage: str = "sqlite3", version: int = 8) -> None:
        if storage not in STORAGE:
            raise ValueError(f"storage must be one of {sorted(STORAGE)}, got {storage!r}")
        if version not in (8, 9):
            raise ValueError(f"version must be 8 (Humble and later read it) or 9 (Jazzy and later), got {version}")
        self.store = typestore()
        self.writer = Writer(Path(path), version=version, storage_plugin=STORAGE[storage])
        self.writer.open()
        self.connections: dict[str, object] = {}

    def write(self, topic: str, msgtype: str, timestamp_ns: int, data: bytes) -> None:
        conn = self.connections.get(topic)
        if conn is None:
            conn = self.connections[topic] = self.writer.add_connection(topic, msgtype, typestore=self.store)
        self.writer.write(conn, timestamp_ns, data)

    def write_message(self, topic: str, msg, timestamp_ns: int) -> None:
        """Write a ``rosbags`` message object (see ``typestore().types``)."""
        self.write(topic, msg.__msgtype__, timestamp_ns, bytes(self.store.serialize_cdr(msg, msg.__msgtype__)))

    def header(self, timestamp_ns: int, frame_id: str = "camera"):
        """A std_msgs/Header stamped ``timestamp_ns``."""
        types = self.store.types
        stamp = types["builtin_interfaces/msg/Time"](sec=timestamp_ns // 10**9, nanosec=timestamp_ns % 10**9)
        return types["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)

    def write_image(self, topic: str, rgb: np.ndarray, timestamp_ns: int, frame_id: str = "camera") -> None:
        """An RGB uint8 (H, W, 3) frame as sensor_msgs/Image rgb8."""
        image = self.store.types["sensor_msgs/msg/Image"](
            header=self.header(timestamp_ns, frame_id), height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8",
            is_bigendian=0, step=rgb.shape[1] * 3, data=np.ascontiguousarray(rgb, np.uint8).ravel())
        self.write_message(topic, image, timestamp_ns)

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> "BagWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_camera_bag(path: str | Path, frames: list[np.ndarray], instruction: str, rate_hz: float = 5.0,
                     instruction_at_s: float = 0.5, storage: str = "sqlite3") -> Path:
    """A bag of RGB frames on /camera/image_raw and one /instruction, for offline tests and demos."""
    with BagWriter(path, storage) as bag:
        t0 = time.time_ns()
        for i, rgb in enumerate(frames):
            bag.write_image("/camera/image_raw", rgb, t0 + int(i / rate_hz * 1e9))
        String = bag.store.types["std_msgs/msg/String"]
        bag.write_message("/instruction", String(data=instruction), t0 + int(instruction_at_s * 1e9))
    return Path(path)
