"""How long the robot's client takes to know its verifier lost, and to know it back (the heartbeat,
``wire/heartbeat.py``): a verifier process on loopback, killed with SIGKILL (its connection closes) or
frozen with SIGSTOP (it stays connected and answers nothing), ``--runs`` times each; then, for a
SIGSTOPped one, SIGCONT and the time until the link is alive again.

``edge-spec-ros bench link-health --runs 5``
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time

from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.server_process import verifier_server

POLL_S = 0.005
UP_S = 60.0


def _wait(predicate, timeout_s: float) -> float:
    """Seconds until ``predicate`` holds (polled every POLL_S)."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise TimeoutError("the link did not change state in time")
        time.sleep(POLL_S)
    return time.monotonic() - start


def measure(runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"sigkill_to_dead_s": [], "sigstop_to_dead_s": [], "sigcont_to_alive_s": []}
    for _ in range(runs):
        with verifier_server() as server, VerifierClient(ClientConfig(endpoint=server.endpoint)) as client:
            _wait(lambda: client.link_state().alive, UP_S)
            os.kill(server.pid, signal.SIGSTOP)
            out["sigstop_to_dead_s"].append(_wait(lambda: client.link_state().dead, UP_S))
            os.kill(server.pid, signal.SIGCONT)
            out["sigcont_to_alive_s"].append(_wait(lambda: client.link_state().alive, UP_S))
            time.sleep(1.0)  # a few pings answered: the last sign of life is at most one interval old
            server.proc.kill()
            out["sigkill_to_dead_s"].append(_wait(lambda: client.link_state().dead, UP_S))
            server.proc.wait()
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench link-health``."""
    parser.add_argument("--runs", type=int, default=5)


def command(args: argparse.Namespace) -> int:
    for name, values in measure(args.runs).items():
        print(f"{name}: min {min(values):.3f} median {statistics.median(values):.3f} max {max(values):.3f} "
              f"({len(values)} runs)")
    return 0
