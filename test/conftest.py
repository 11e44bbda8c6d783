"""Shared fixtures: the project's tokenizer, small Qwen2-VL models and image + instruction prompts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing in the suite may reach a model hub

import numpy as np
import pytest
import torch

from edge_spec_ros.camera.synthetic import synthetic_camera_image
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
SERVER_IDLE_EXIT_S = 60  # the server stops by itself after this long without a request
START_TIMEOUT_S = 60


@contextmanager
def server_process(*extra: str) -> Iterator[str]:
    """Start ``edge-spec-ros serve`` on a free loopback port; yield its endpoint; stop it."""
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "serve", "--bind", "tcp://127.0.0.1:*",
           "--idle-exit", str(SERVER_IDLE_EXIT_S), *extra]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    endpoint = None
    deadline = time.monotonic() + START_TIMEOUT_S
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("listening on "):
            endpoint = line.split()[-1]
            break
    if endpoint is None:
        proc.kill()
        raise RuntimeError("verifier server did not start:\n" + "".join(lines))
    try:
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        proc.stdout.close()


@pytest.fixture(scope="session")
def server_endpoint() -> Iterator[str]:
    with server_process() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def start_server():
    """``with start_server(*cli_args) as endpoint:`` for tests that need their own server."""
    return server_process


@pytest.fixture(scope="session")
def text_prompt(encoder):
    """A prompt without an image."""
    return encoder.encode("stop")
