"""The CPU budget: how many compute threads each process of the stack may use.

Two processes share a robot computer when the verifier runs beside the robot (``bringup --serve``,
``bench``, the demo): the robot-side process (drafter, pre-drafting, nodes) and the verifier. torch's
default of one thread per core in each of them oversubscribes the machine, and every decision slows
down many times over. One rule sizes both, from the cores this process may run on:

* torch threads per process: cores // processes (at least 1);
* pre-draft threads N (FSD's early-exit workers): cores // processes as well (at least 1), at most
  the FSD paper's 6 (Table 8): each worker runs drafter forwards, so more workers than cores only
  queue.

A value set explicitly (a node parameter, ``--threads``) wins over the rule.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

MAX_PREDRAFT_THREADS = 6  # the FSD paper's Go2 ran 6 early-exit threads (Table 8)


@dataclass(frozen=True)
class CpuBudget:
    cores: int
    torch_threads: int  # per process
    predraft_threads: int


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def cpu_budget(processes: int = 2, cores: int | None = None) -> CpuBudget:
    """The budget for ``processes`` compute processes sharing ``cores`` (default: this machine's)."""
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    cores = available_cores() if cores is None else cores
    share = max(1, cores // processes)
    return CpuBudget(cores, share, min(MAX_PREDRAFT_THREADS, share))


def set_torch_threads(n: int) -> int:
    """Set torch's intra-op threads to ``n`` (0: the rule's share for two processes); returns it."""
    import torch

    n = n or cpu_budget().torch_threads
    torch.set_num_threads(n)
    return n


def busy_loops(n: int) -> list[subprocess.Popen]:
    """``n`` busy-loop processes: the busy robot computer the benchmarks measure beside (the caller stops them)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
