"""Shared fixtures: the project's tokenizer, small Qwen2-VL models and image + instruction prompts."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing in the suite may reach a model hub
# ROS 2 traffic stays on this machine (shared memory only), in domains of this test run's own (below).
os.environ["FASTDDS_BUILTIN_TRANSPORTS"] = "SHM"
os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE",
                      str(Path(__file__).resolve().parents[1] / "config" / "fastdds_local.xml"))
# Verifiers, nodes and bring-ups the tests start are forked from a process that has imported torch,
# transformers and rclpy once (edge_spec_ros/warm_start.py; EDGE_SPEC_ROS_WARM_START=0 turns it off).
os.environ.setdefault("EDGE_SPEC_ROS_WARM_START", "1")


# ROS domains 1-230: 0 is a robot's default, and above 232 Fast DDS's port numbers overflow.
DOMAINS = range(1, 231)


def ros_domains() -> Iterator[int]:
    """The DDS domains of this test process, a fresh one for each test module (``ros_domain``).

    A module of its own: Fast DDS's shared-memory transport (every release to date) can close a
    domain's discovery after two processes of that domain died uncleanly (SIGKILL, a crash): every
    participant started afterwards discovers nobody, however long it waits. Tests kill nodes on
    purpose (SIGKILL mid-motion), so a closed domain stays with the module that closed it. The workers
    of one pytest-xdist run share a run id and interleave their domains, so no two of them ever share
    one; the run id (a process id without xdist) moves the start, so a run does not begin in the
    domains the run before it used (their shared-memory ports outlive their processes)."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))  # gw0, gw1, ... of `-n N`
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    run = int(os.environ.get("PYTEST_XDIST_TESTRUNUID", "") or f"{os.getpid():x}", 16)
    for k in itertools.count(run % len(DOMAINS)):
        yield DOMAINS[(k * count + worker) % len(DOMAINS)]


_DOMAINS = ros_domains()
os.environ["ROS_DOMAIN_ID"] = str(next(_DOMAINS))  # what runs at import or collection

import numpy as np
import pytest
import torch

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.server_process import verifier_process
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.tiny import VERIFIER_SPEC, build_tiny_qwen2vl
from edge_spec_ros.models.tokenizer import load_tokenizer

INSTRUCTIONS = ("find the silver bottle", "go to the red chair", "turn left at the door", "stop")

torch.set_num_threads(1)  # deterministic kernels, and the suite is sized for 2 cores


# pytest-xdist (pytest.ini: -n auto --dist loadfile): a test module runs whole on one worker, in
# order, so that its module- and session-scoped fixtures (a model, a verifier process, a colcon build)
# are built once. The tests of the modules below are long, independent and need only cheap module
# fixtures: each goes to whichever worker is free.
SPREAD_MODULES = (
    "test/decoding/test_exactness.py",
    "test/edge/test_network_modes.py",
    "test/edge/test_protocol_distributions.py",
    "test/edge/test_reconnect.py",
)
# Started first, so that no long module starts last while the other workers have run out of work.
LONG_MODULES = (
    "test/packaging/test_colcon.py",
    "test/models/test_smollm2.py",
    "test/nodes/test_robot_stack.py",
    "test/nodes/test_navigate.py",
    "test/edge/test_network_modes.py",
    "test/edge/test_reconnect.py",
    "test/decoding/test_exactness.py",
    "test/edge/test_protocol_distributions.py",
)


def auto_workers(cores: int) -> int:
    """Workers of ``-n auto`` (pytest.ini) on ``cores`` CPU cores: one and a half per core. The suite's
    processes wait on verifiers, nodes and sockets part of the time: on two cores two workers ran it
    in 10 min 00 s, three in 8 min 27-36 s, four in 9 min 42 s (docs/testing.md)."""
    return max(1, cores + cores // 2)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int | None:
    """``-n auto``: ``auto_workers`` of the cores this process may run on; PYTEST_XDIST_AUTO_NUM_WORKERS,
    where set, decides (None: pytest-xdist reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return auto_workers(cores)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, with the tests of SPREAD_MODULES as work units of their own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if _module(nodeid) in SPREAD_MODULES else _module(nodeid)

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    """In an xdist worker, LONG_MODULES first (the collection the scheduler hands out in order)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {module: i for i, module in enumerate(LONG_MODULES)}
        items.sort(key=lambda item: rank.get(_module(item.nodeid), len(rank)))  # stable


@pytest.fixture(scope="module", autouse=True)
def ros_domain() -> int:
    """The module's own ROS domain (``ros_domains``): its nodes, in this process or started by it, and
    no other module's. Autouse, so it is set before any of the module's other fixtures."""
    domain = next(_DOMAINS)
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    return domain


@pytest.fixture(scope="session")
def tokenizer():
    return load_tokenizer()


@pytest.fixture(scope="session")
def encoder(tokenizer):
    return PromptEncoder(tokenizer)


@pytest.fixture(scope="session")
def target_model(tokenizer):
    return build_tiny_qwen2vl(VERIFIER_SPEC, tokenizer, seed=0)


@pytest.fixture(scope="session")
def prompts(encoder):
    """Image + instruction prompts: synthetic camera frames and noise images of several sizes."""
    out = []
    for i, instruction in enumerate(INSTRUCTIONS):
        if i % 2:
            image = (np.random.default_rng(i).random((84 + 14 * i, 112, 3)) * 255).astype(np.uint8)
        else:
            image = synthetic_camera_image(seed=i)
        out.append(encoder.encode(instruction, image))
    return out


# --- a real verifier server in a separate process, on 127.0.0.1, bounded in time --------------------
SERVER_IDLE_EXIT_S = 900  # a server left behind (a killed test run) stops by itself after this long idle


@pytest.fixture(scope="session")
def server_endpoint() -> Iterator[str]:
    with verifier_process(idle_exit_s=SERVER_IDLE_EXIT_S) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def start_server():
    """``with start_server(*cli_args) as endpoint:`` for tests that need their own server."""
    return lambda *args: verifier_process(*args, idle_exit_s=SERVER_IDLE_EXIT_S)


@pytest.fixture(scope="session")
def text_prompt(encoder):
    """A prompt without an image."""
    return encoder.encode("stop")
