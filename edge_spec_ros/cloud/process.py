"""Run ``edge-spec-ros serve`` as a child process on loopback (benchmarks, tests, the demo)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0


@contextmanager
def verifier_process(*args: str, idle_exit_s: float = 120.0) -> Iterator[str]:
    """Start a verifier on a free 127.0.0.1 port; yield its endpoint; stop it on exit.

    The server also stops by itself after ``idle_exit_s`` without a request, so nothing outlives a
    crashed parent for long.
    """
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "serve", "--bind", "tcp://127.0.0.1:*",
           "--idle-exit", str(idle_exit_s), *args]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    endpoint = None
    deadline = time.monotonic() + START_TIMEOUT_S
    while endpoint is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("listening on "):
            endpoint = line.split()[-1]
    if endpoint is None:
        proc.kill()
        proc.wait()
        raise RuntimeError("the verifier server did not start:\n" + "".join(lines[-20:]))
    try:
        yield endpoint
    finally:
        stop(proc)
        proc.stdout.close()


def stop(proc: subprocess.Popen, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within ``timeout_s``."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
