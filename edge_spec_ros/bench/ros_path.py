"""The bench's ROS path: the same decisions as the direct ZeroMQ client, through the ROS nodes.

The robot side is what ``drafter_node`` runs: ``EdgeDecoder`` over a ``nodes.ros_link.RosVerifierLink``
held by a node of the bench process (its own rclpy context, a single-threaded executor spinning on
a background thread, as in a drafter node; the link's replies arrive on its own receiver thread,
not through the executor). The link talks over DDS topics to a ``bridge_node`` in a separate
process, which owns its own ZeroMQ client to the same verifier process as the direct path. So a
round on this path pays what a deployment pays on top of direct ZeroMQ: two DDS hops (draft up,
each exit result down), message conversion on both sides, and the wake-ups of the receiving
threads of two processes (the bridge's receiver thread for a draft, the link's for each reply).

Both nodes live in a namespace of their own (``/edge_spec_bench_<pid>_<n>``), so a bench never talks
to another bench's or a robot's bridge in the same ROS domain. rclpy is imported only here
(``bench --paths ...,ros``); the DDS traffic stays on this machine where the project's one-machine
profile (shared memory only) is in force: ``FASTDDS_BUILTIN_TRANSPORTS=SHM`` and
``FASTDDS_DEFAULT_PROFILES_FILE`` default to it when unset.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from edge_spec_ros import warm_start
from edge_spec_ros.bench.profiles import Profile
from edge_spec_ros.nodes.matched import matched_publishers

START_TIMEOUT_S = 60.0  # wall seconds for bridge_node to start and its topics to match ours
DDS_PROFILE = Path(__file__).resolve().parents[2] / "config" / "fastdds_local.xml"
_PATHS = itertools.count()  # a namespace per RosPath: an earlier one's endpoints, not yet forgotten by
# discovery, cannot count as matched for this one's
BRIDGE_TOPICS = ("decision_request", "draft")  # the bridge's subscriptions, as its log names them


def bridge_matched(log_text: str, topic: str) -> int:
    """How many publishers of ``topic`` the bridge's subscription has matched, by its log line
    ``<topic>: N publisher(s) matched`` (the latest; 0 before the first)."""
    return matched_publishers(log_text, topic)


def local_dds_env() -> None:
    """The one-machine DDS setting (shared memory only) unless the caller chose one."""
    os.environ.setdefault("FASTDDS_BUILTIN_TRANSPORTS", "SHM")
    if DDS_PROFILE.is_file():
        os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(DDS_PROFILE))


def bridge_args(endpoint: str, profile: Profile, namespace: str, open_timeout_s: float,
                reply_timeout_s: float) -> list[str]:
    """``bridge_node``'s command line for ``profile``: the emulated link is the bridge's (it owns the
    ZeroMQ link), the same shape both ways as the direct client's."""
    if profile.uplink != profile.downlink:
        raise ValueError(f"profile {profile.name}: the bridge emulates one link shape for both directions")
    params = {"verifier_endpoint": endpoint, "open_timeout_s": open_timeout_s, "reply_timeout_s": reply_timeout_s}
    shape = profile.uplink
    if shape is not None and not shape.ideal:
        params |= {"emulate_delay_s": shape.delay_s, "emulate_jitter_s": shape.jitter_s,
                   "emulate_bandwidth_bps": shape.bandwidth_bps, "emulate_loss": shape.loss}
    out = [sys.executable, "-m", "edge_spec_ros.nodes.bridge_node", "--ros-args", "-r", f"__ns:={namespace}"]
    for name, value in params.items():
        out += ["-p", f"{name}:={float(value)!r}" if isinstance(value, float) else f"{name}:={value}"]
    return out


class RosPath:
    """``with RosPath(endpoint, profile) as ros: EdgeDecoder(ros.link, ...)``: a RosVerifierLink in
    this process, a bridge_node process, both matched before the first decision; everything stopped
    and joined on exit."""

    def __init__(self, endpoint: str, profile: Profile, open_timeout_s: float = 60.0,
                 reply_timeout_s: float = 60.0) -> None:
        self.endpoint = endpoint
        self.profile = profile
        self.open_timeout_s = open_timeout_s
        self.reply_timeout_s = reply_timeout_s
        self.namespace = f"/edge_spec_bench_{os.getpid()}_{next(_PATHS)}"
        self.link = None
        self._context = self._node = self._executor = self._thread = self._bridge = None
        self._log = None

    def __enter__(self) -> RosPath:
        local_dds_env()
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from edge_spec_ros.nodes.ros_link import RosVerifierLink

        try:
            self._context = rclpy.Context()
            rclpy.init(context=self._context)
            self._node = rclpy.create_node("bench_drafter", namespace=self.namespace, context=self._context)
            self.link = RosVerifierLink(self._node, self.open_timeout_s, self.reply_timeout_s)
            self._executor = SingleThreadedExecutor(context=self._context)
            self._executor.add_node(self._node)
            self._thread = threading.Thread(target=self._executor.spin, name="bench-ros-executor", daemon=True)
            self._thread.start()
            self._log = tempfile.NamedTemporaryFile("w+", prefix="bench_bridge_", suffix=".log", delete=False)
            self._bridge = warm_start.popen(
                bridge_args(self.endpoint, self.profile, self.namespace, self.open_timeout_s, self.reply_timeout_s),
                stdout=self._log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
            self._wait_matched()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_matched(self) -> None:
        """Until both of the link's publishers reach the bridge's subscriptions, the bridge's
        subscriptions have matched them back (its log says so), and both of the link's subscriptions
        hear the bridge's publishers (reliable, volatile: a message sent before the reader has matched
        its writer is lost, whatever the writer's own count says)."""
        link = self.link
        pubs = (link._requests, link._drafts)  # noqa: SLF001 - the link's own endpoints
        subs = [s for s in self._node.subscriptions]
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._bridge.poll() is not None:
                raise RuntimeError(f"bridge_node exited with status {self._bridge.returncode}:\n{self.bridge_log()}")
            if all(p.get_subscription_count() > 0 for p in pubs) and all(s.get_publisher_count() > 0 for s in subs):
                log = self.bridge_log(lines=0)
                if all(bridge_matched(log, topic) > 0 for topic in BRIDGE_TOPICS):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"bridge_node's topics did not match within {START_TIMEOUT_S:.0f} s:\n{self.bridge_log()}")

    def bridge_log(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the bridge's output (0: all of it)."""
        if self._log is None:
            return ""
        text = Path(self._log.name).read_text(errors="replace")
        return text if lines == 0 else "".join(text.splitlines(keepends=True)[-lines:])

    def __exit__(self, *exc) -> None:
        from edge_spec_ros.server_process import stop

        if self.link is not None:
            self.link.close()
        if self._bridge is not None:
            stop(self._bridge)
        if self._executor is not None:
            self._executor.shutdown(timeout_sec=1.0)
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._node is not None:
            self._node.destroy_node()
        if self._context is not None:
            import rclpy

            rclpy.try_shutdown(context=self._context)
        if self._log is not None:
            self._log.close()
            os.unlink(self._log.name)
            self._log = None
