"""Shared fixtures: the project's tokenizer, small Qwen2-VL models and image + instruction prompts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing in the suite may reach a model hub
# ROS 2 traffic stays on this machine (shared memory only) in a domain of this test run's own.
os.environ["FASTDDS_BUILTIN_TRANSPORTS"] = "SHM"
os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE",
                      str(Path(__file__).resolve().parents[1] / "config" / "fastdds_local.xml"))
os.environ["ROS_DOMAIN_ID"] = str(100 + os.getpid() % 100)

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
