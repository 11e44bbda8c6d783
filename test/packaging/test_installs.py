"""The robot's and the cloud's installs, each built into an empty virtual environment as a user builds it.

    python -m venv V;  V/bin/pip install torch==2.13.0     (first: the machine's own torch)
    V/bin/pip install -r requirements-robot.txt '<sources>[robot]'   or   ...-cloud.txt '<sources>[cloud]'

from a copy of the sources (what `git archive` ships). The robot's ROS 2 comes from its ROS install, not
from pip: here the ROS 2 wheels that requirements.txt pins (rclpy, the message packages, the rosidl
generators) play it, installed into the robot's environment after the robot's install, and the
package's interfaces are built into it with scripts/build_interfaces.sh, as colcon builds them on a
robot. Then each side's entry points run there: the robot's node modules import, `edge-spec-ros --help`
answers, the drafter loads the embedded pair and decodes one decision with the cloud's verifier, which
`edge-spec-ros serve` in the cloud's environment serves on 127.0.0.1 until SIGTERM stops it. The other
side's entry points fail with the one line naming the extra (edge_spec_ros/extras.py).

Slow (two environments with torch, Ray and a cmake build of the interfaces): `make test-installs`; the
first test (setup.py's ranges against the pins) is quick and runs in the default suite.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import zmq

from edge_spec_ros.extras import MODULES
from edge_spec_ros.server_process import stop
from edge_spec_ros.wire.codec import decode, encode
from edge_spec_ros.wire.messages import Envelope, Stats, StatsReply

# the first test of each install waits for the install itself (pytest.ini's 600 s are too few on a busy
# machine: the robot's took 811 s beside other builds)
pytestmark = pytest.mark.timeout(3600)

REPO = Path(__file__).resolve().parents[2]
TORCH = "torch==2.13.0"  # the development environment's (the CPU build, a file on this machine)
PIP_TIMEOUT_S = 1200  # one pip install (torch, Ray: hundreds of MB)
BUILD_TIMEOUT_S = 900  # the interfaces' cmake build
RUN_TIMEOUT_S = 300  # a command in an installed environment (a model load, one decision)
START_TIMEOUT_S = 180  # `serve` loading the embedded verifier until it listens
REPLY_TIMEOUT_S = 30
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv*", "build", "install", "log", "artifacts", "__pycache__",
                                     ".pytest_cache", "pytest-cache-files-*", "*.egg-info", "*.pyc", ".train")
# what a process here must not inherit: the development environment and its ROS 2 set-up
DROPPED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH", "LD_LIBRARY_PATH",
           "COLCON_PREFIX_PATH", "_ROS_WHEELS_BOOTSTRAP_COMPLETE", "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS",
           "ROS_DISTRO", "ROS_VERSION", "ROS_PYTHON_VERSION", "RMW_IMPLEMENTATION")
# distributions neither install may bring: the development environment's tools
DEV_ONLY = {"matplotlib", "pytest", "colcon-core", "gguf", "accelerate", "catkin-pkg"}
ROBOT_ONLY = {"scipy", "opencv-python-headless", "rosbags"}
CLOUD_ONLY = {"ray"}
# the ROS 2 wheels of requirements.txt: the robot's ROS install in this test
ROS_WHEEL = re.compile(r"^(ros-[a-z0-9-]+|catkin-pkg)==\S+$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Install:
    """A virtual environment in ``root`` holding one install of the package."""

    root: Path
    extra: str
    timings: dict[str, float] = field(default_factory=dict)
    distributions: set[str] = field(default_factory=set)  # right after `pip install .[extra]`

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def env(self) -> dict[str, str]:
        path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)]
        env = {k: v for k, v in os.environ.items() if k not in DROPPED}
        env.update(PATH=os.pathsep.join([str(self.root / "bin"), *path]), VIRTUAL_ENV=str(self.root),
                   HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", FASTDDS_BUILTIN_TRANSPORTS="SHM")
        return env

    def run(self, *cmd: str | Path, timeout_s: float = RUN_TIMEOUT_S, step: str = "",
            check: bool = True) -> subprocess.CompletedProcess:
        started = time.monotonic()
        proc = subprocess.run([str(c) for c in cmd], cwd=self.root, env=self.env(), timeout=timeout_s,
                              capture_output=True, text=True)
        if step:
            self.timings[step] = time.monotonic() - started
        if check:
            assert proc.returncode == 0, f"{' '.join(map(str, cmd))} ({proc.returncode}):\n" \
                                         f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        return proc

    def pip(self, *args: str | Path, step: str) -> None:
        self.run(self.python, "-m", "pip", "install", "--quiet", *args, timeout_s=PIP_TIMEOUT_S, step=step)

    def installed(self) -> set[str]:
        out = self.run(self.python, "-c", "import importlib.metadata as m, json; "
                                          "print(json.dumps(sorted({d.metadata['Name'] for d in m.distributions()})))")
        return {canonical(name) for name in json.loads(out.stdout)}

    def python_code(self, code: str, check: bool = True, timeout_s: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
        return self.run(self.python, "-c", code, check=check, timeout_s=timeout_s)


def build(root: Path, sources: Path, extra: str) -> Install:
    install = Install(root, extra)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=RUN_TIMEOUT_S)
    install.pip(TORCH, step="torch")
    install.pip("-r", sources / f"requirements-{extra}.txt", f"{sources}[{extra}]", step=f".[{extra}]")
    install.distributions = install.installed()
    install.run(install.python, "-m", "pip", "check", step="pip check")
    install.timings["total"] = time.monotonic() - started
    return install


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("installs") / "edge_spec_ros"
    shutil.copytree(REPO, src, ignore=NOT_SOURCES)
    return src


@pytest.fixture(scope="module")
def robot(sources, tmp_path_factory) -> Install:
    install = build(tmp_path_factory.mktemp("robot") / "venv", sources, "robot")
    # the robot's ROS install: the ROS 2 wheels, and the package's interfaces built into that prefix
    ros = [line for line in (REPO / "requirements.txt").read_text().splitlines() if ROS_WHEEL.match(line)]
    assert any(line.startswith("ros-rclpy==") for line in ros)
    started = time.monotonic()
    install.pip(*ros, step="ROS 2 wheels")
    install.run("bash", sources / "scripts" / "build_interfaces.sh", install.root, timeout_s=BUILD_TIMEOUT_S,
                step="interfaces")
    install.timings["total"] += time.monotonic() - started
    print(f"robot install: {json.dumps({k: round(v, 1) for k, v in install.timings.items()})}")
    return install


@pytest.fixture(scope="module")
def cloud(sources, tmp_path_factory) -> Install:
    install = build(tmp_path_factory.mktemp("cloud") / "venv", sources, "cloud")
    print(f"cloud install: {json.dumps({k: round(v, 1) for k, v in install.timings.items()})}")
    return install


@pytest.fixture(scope="module")
def verifier(cloud):
    """``edge-spec-ros serve`` of the cloud's install on a free 127.0.0.1 port: (endpoint, process)."""
    proc = subprocess.Popen([str(cloud.root / "bin" / "edge-spec-ros"), "serve", "--verifier", "embedded",
                             "--device", "cpu", "--dtype", "float32", "--threads", "1",
                             "--bind", "tcp://127.0.0.1:*", "--idle-exit", "600"],
                            cwd=cloud.root, env=cloud.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    endpoint = None
    while endpoint is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("listening on "):
            endpoint = line.split()[-1]
    if endpoint is None:
        stop(proc)
        raise AssertionError("the cloud's `edge-spec-ros serve` did not start:\n" + "".join(lines[-30:]))
    yield endpoint, proc, lines
    if proc.poll() is None:
        stop(proc)
    proc.stdout.close()


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The whole of stderr of a process that failed, which must be one line."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def extra_line(what: str, extra: str) -> str:
    return f"error: {what} needs the {extra} extra: pip install 'edge_spec_ros[{extra}]'"


def test_setup_py_ranges_hold_every_pin_of_the_requirements_files():
    """setup.py names each distribution of requirements-{core,robot,cloud}.txt (and requirements.txt's
    plots and progress bars) in the matching place, and each pin lies in its range; extras.MODULES
    names what each extra's distributions are imported as."""
    from packaging.requirements import Requirement

    setup = (REPO / "setup.py").read_text()
    namespace: dict = {}
    exec(setup[:setup.index("setup(\n")].replace("from setuptools import find_packages, setup", ""), namespace)
    places = {"core": namespace["CORE"], "robot": namespace["ROBOT"], "cloud": namespace["CLOUD"],
              "all": namespace["DEV"]}
    assert namespace["EXTRAS"] == {"robot": places["robot"], "cloud": places["cloud"],
                                   "all": places["robot"] + places["cloud"] + places["all"]}

    def pins(name: str) -> dict[str, str]:
        out = {}
        for line in (REPO / name).read_text().splitlines():
            if "==" in line and not line.startswith("#"):
                dist, version = line.split("==")
                out[canonical(dist)] = version.strip()
        return out

    pinned = {"core": pins("requirements-core.txt"), "robot": pins("requirements-robot.txt"),
              "cloud": pins("requirements-cloud.txt"), "all": pins("requirements.txt")}
    transitive = {"huggingface-hub"}  # transformers' own dependency, pinned in requirements-core.txt only
    for place, requirements in places.items():
        ranges = {canonical(Requirement(r).name): Requirement(r).specifier for r in requirements}
        assert "torch" not in ranges or str(ranges["torch"]) == "", "torch: the machine's own, no version"
        for dist, specifier in ranges.items():
            if dist == "torch":
                continue
            assert dist in pinned[place], f"{dist} ({place}) has no pin in its requirements file"
            assert specifier.contains(pinned[place][dist]), f"{dist}=={pinned[place][dist]} is not in {specifier}"
        if place != "all":
            assert set(pinned[place]) - transitive <= set(ranges), f"pins of {place} that setup.py lacks"
    # the Jazzy environment's pins (Python 3.10) lie in the ranges too
    jazzy = REPO / "requirements-jazzy.txt"
    if jazzy.is_file():
        everything = {canonical(Requirement(r).name): Requirement(r).specifier
                      for r in places["core"] + namespace["EXTRAS"]["all"]}
        for dist, version in pins("requirements-jazzy.txt").items():
            if dist in everything and dist != "torch":
                assert everything[dist].contains(version), f"requirements-jazzy.txt: {dist}=={version}"
    imported = {"opencv-python-headless": "cv2", "pyyaml": "yaml", "scipy": "scipy", "rosbags": "rosbags",
                "ray": "ray", "matplotlib": "matplotlib", "tqdm": "tqdm"}
    for extra in ("robot", "cloud", "all"):
        assert tuple(imported[canonical(Requirement(r).name)] for r in namespace["EXTRAS"][extra]) == MODULES[extra]


@pytest.mark.slow
def test_the_robot_installs_neither_the_cloud_nor_the_development_tools(robot):
    assert ROBOT_ONLY <= robot.distributions
    assert not (CLOUD_ONLY | DEV_ONLY) & robot.distributions, sorted(robot.distributions)
    # nor after the stand-in of its ROS install
    assert not (CLOUD_ONLY | {"matplotlib", "pytest", "colcon-core"}) & robot.installed()


@pytest.mark.slow
def test_the_cloud_installs_neither_the_robot_nor_the_development_tools(cloud):
    assert CLOUD_ONLY <= cloud.distributions
    assert not (ROBOT_ONLY | DEV_ONLY) & cloud.distributions, sorted(cloud.distributions)
    assert not [d for d in cloud.distributions if d.startswith("ros-")]


@pytest.mark.slow
def test_the_robot_imports_its_nodes_and_runs_its_commands(robot, tmp_path):
    nodes = sorted(p.stem for p in (REPO / "edge_spec_ros" / "nodes").glob("*.py") if p.stem != "__init__")
    got = json.loads(robot.python_code(f"""
import importlib, json, edge_spec_ros, edge_spec_ros.msg
for name in {nodes!r}:
    importlib.import_module("edge_spec_ros.nodes." + name)
print(json.dumps({{"package": edge_spec_ros.__file__, "msg": edge_spec_ros.msg.__file__}}))
""").stdout.strip().splitlines()[-1])
    assert got["package"].startswith(str(robot.root)) and got["msg"].startswith(str(robot.root)), got
    help_text = robot.run(robot.root / "bin" / "edge-spec-ros", "--help").stdout
    assert "serve" in help_text and "bringup" in help_text
    for executable in ("drafter_node", "bridge_node", "action_node", "camera_node"):
        assert (robot.root / "bin" / executable).is_file()
    robot.run(robot.root / "bin" / "edge-spec-ros", "keys", "--out", tmp_path / "keys")
    assert (tmp_path / "keys" / "server.key_secret").is_file()


@pytest.mark.slow
def test_the_cloud_serves_answers_and_stops(cloud, verifier):
    endpoint, proc, lines = verifier
    assert endpoint.startswith("tcp://127.0.0.1:")
    assert cloud.run(cloud.root / "bin" / "edge-spec-ros", "--help").returncode == 0
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, REPLY_TIMEOUT_S * 1000)
    try:
        sock.connect(endpoint)
        sock.send_multipart(encode(Envelope(bytes(16), Stats())))
        reply = decode(sock.recv_multipart()).message
    finally:
        sock.close()
        context.term()
    assert isinstance(reply, StatsReply) and isinstance(json.loads(reply.counters), dict), reply


@pytest.mark.slow
def test_the_robot_decides_with_the_cloud_verifier(robot, verifier):
    """The robot's drafter (the embedded pair, loaded in the robot's install) decodes one decision with
    the cloud install's verifier; the tokens are the verifier's own greedy ones."""
    endpoint, proc, lines = verifier
    got = json.loads(robot.python_code(f"""
import json
from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.models.embedded import embedded_pair
from edge_spec_ros.models.prompt import decode_image, encode_image

pair = embedded_pair()
jpg = encode_image(synthetic_camera_image(), quality=90)
prompt = pair.prompt_encoder().encode("find the silver bottle", decode_image(jpg))
config = DecodeConfig(max_new_tokens=16, gamma=3, stop_tokens=(pair.tokenizer.eos_token_id,))
expected = autoregressive(pair.verifier, prompt, config).tokens
with VerifierClient(ClientConfig(endpoint={endpoint!r})) as client:
    decoder = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config, threads=1))
    tokens = decoder.decode("fsd", prompt, jpg).tokens
    decoder.close()
print(json.dumps({{"tokens": list(tokens), "expected": list(expected)}}))
""").stdout.strip().splitlines()[-1])
    assert got["tokens"] and got["tokens"] == got["expected"], got
    proc.terminate()  # SIGTERM: the cloud's verifier stops cleanly
    assert proc.wait(timeout=30) == 0, "".join(lines[-20:])


@pytest.mark.slow
def test_the_cloud_side_in_the_robot_install_fails_with_one_line(robot):
    cli = robot.root / "bin" / "edge-spec-ros"
    serve = robot.run(cli, "serve", "--device", "cpu", check=False)
    assert serve.returncode == 2
    assert one_line(serve) == extra_line("edge-spec-ros serve", "cloud") + " (missing: ray)"
    replicas = robot.python_code("from edge_spec_ros.cloud.replicas import local_ray; local_ray()", check=False)
    assert one_line(replicas) == extra_line("the verifier's Ray replicas (cloud/replicas.py)", "cloud")
    bench = robot.run(cli, "bench", check=False)
    assert one_line(bench) == extra_line("edge-spec-ros bench", "all") + " (missing: ray, matplotlib)"
    bringup = robot.run(cli, "bringup", "--serve", check=False)
    assert one_line(bringup) == extra_line("edge-spec-ros bringup", "cloud") + " (missing: ray)"


@pytest.mark.slow
def test_the_robot_side_in_the_cloud_install_fails_with_one_line(cloud):
    missing = " (missing: scipy, cv2, rosbags)"  # PyYAML comes with transformers
    for executable in ("drafter_node", "action_node"):
        node = cloud.run(cloud.root / "bin" / executable, check=False)
        assert node.returncode == 1
        assert one_line(node) == extra_line("edge_spec_ros.nodes", "robot") + missing
    for command in (("bringup",), ("record", "--out", cloud.root / "bag")):
        proc = cloud.run(cloud.root / "bin" / "edge-spec-ros", *command, check=False)
        assert proc.returncode == 2
        assert one_line(proc) == extra_line(f"edge-spec-ros {command[0]}", "robot") + missing
    gamma = cloud.python_code("import edge_spec_ros.edge.gamma", check=False)
    assert one_line(gamma) == extra_line("the optimal draft length (spec/draft_length.py)", "robot")


def test_every_command_names_the_install_it_needs():
    from edge_spec_ros.cli import COMMAND_EXTRAS, build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert set(commands) == set(COMMAND_EXTRAS)
    assert all(set(extras) <= set(MODULES) for extras in COMMAND_EXTRAS.values())


def test_a_missing_module_of_an_extra_ends_the_process_with_one_line():
    """What each install shows for the other side's code, here with a module no install has: uncaught,
    the one line and status 1; caught, a MissingExtra (an ImportError) with the same line."""
    code = ("from edge_spec_ros.extras import require, MissingExtra\n"
            "try:\n    require('edge_spec_ros_no_such_module', 'cloud', 'the test')\n"
            "except ImportError as exc:\n    assert isinstance(exc, MissingExtra), exc\n    print(exc)\n"
            "require('edge_spec_ros_no_such_module.sub', 'robot', 'the test')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 1
    assert proc.stdout.strip() == extra_line("the test", "cloud").removeprefix("error: ")
    assert one_line(proc) == extra_line("the test", "robot")
