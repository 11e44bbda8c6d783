"""Early-exit queues of the FSD paper (Appendix A, Algorithms 1-2; ablation in Table 7).

The server queue Q_e holds exit results waiting for the link; the client queue Q_p holds exit results
waiting for a pre-draft worker. Both pop by policy: ``priority`` (highest confidence S first, FIFO
among equals), ``fifo``, or ``random`` (seeded).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

POLICIES = ("priority", "fifo", "random")


class ExitQueue(Generic[T]):
    """A queue of items with a confidence, popped by policy. Not thread-safe: callers lock."""

    def __init__(self, policy: str = "priority", seed: int = 0) -> None:
        if policy not in POLICIES:
            raise ValueError(f"queue policy {policy!r} is not one of {POLICIES}")
        self.policy = policy
        self._heap: list[tuple[float, int, T]] = []
        self._count = itertools.count()
        self._rng = random.Random(seed)

    def push(self, item: T, confidence: float) -> None:
        order = next(self._count)
        if self.policy == "priority":
            key = -confidence
        elif self.policy == "fifo":
            key = 0.0
        else:
            key = self._rng.random()
        heapq.heappush(self._heap, (key, order, item))

    def pop(self) -> T:
        return heapq.heappop(self._heap)[2]

    def remove_if(self, predicate: Callable[[T], bool]) -> int:
        """Drop every item for which ``predicate`` is true; returns how many were dropped."""
        kept = [entry for entry in self._heap if not predicate(entry[2])]
        dropped = len(self._heap) - len(kept)
        heapq.heapify(kept)
        self._heap = kept
        return dropped

    def clear(self) -> None:
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)
