"""Run ``edge-spec-ros serve`` as a child process on loopback (benchmarks, tests, the demo).

It starts the command line (``edge_spec_ros.cli``), so it sits with the application, above the
verifier service it runs; ``stop`` ends any child process the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from edge_spec_ros import warm_start

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0


@dataclass
class ServerProcess:
    """A running ``edge-spec-ros serve``: its endpoint, its process and its output so far."""

    endpoint: str
    proc: warm_start.Process
    lines: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def memory_kib(self) -> dict[str, int]:
        """VmRSS and VmHWM (peak RSS) from /proc, in KiB (Linux)."""
        out = {}
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    out[name] = int(value.split()[0])
        return out

    def reset_peak(self) -> None:
        """Reset VmHWM to the current RSS (Linux: ``echo 5 > /proc/PID/clear_refs``)."""
        with open(f"/proc/{self.pid}/clear_refs", "w") as f:
            f.write("5")


@contextmanager
def verifier_process(*args: str, idle_exit_s: float = 120.0) -> Iterator[str]:
    """Start a verifier on a free 127.0.0.1 port; yield its endpoint; stop it on exit.

    The server also stops by itself after ``idle_exit_s`` without a request, so nothing outlives a
    crashed parent for long. Compute emulation, where wanted, is the server's: pass
    ``--emulate-tq-s``.
    """
    with verifier_server(*args, idle_exit_s=idle_exit_s) as server:
        yield server.endpoint


@contextmanager
def verifier_server(*args: str, idle_exit_s: float = 120.0) -> Iterator[ServerProcess]:
    """``verifier_process`` yielding a ``ServerProcess`` handle (endpoint, pid, memory)."""
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "serve", "--bind", "tcp://127.0.0.1:*",
           "--idle-exit", str(idle_exit_s), *args]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = warm_start.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
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
    server = ServerProcess(endpoint, proc, lines)
    # keep reading its output, so a chatty server never blocks on a full pipe
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        yield server
    finally:
        stop(proc)
        reader.join(timeout=STOP_TIMEOUT_S)
        proc.stdout.close()


def stop(proc: warm_start.Process, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within ``timeout_s``."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
