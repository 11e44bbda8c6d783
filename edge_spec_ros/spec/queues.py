"""Early-exit queues of the FSD paper (Appendix A, Algorithms 1-2; ablation in Table 7).

The server queue Q_e holds exit results waiting for the link; the client queue Q_p holds exit results
waiting for a pre-draft worker. Both pop by policy: ``priority`` (highest confidence S first, FIFO
among equals), ``fifo``, or ``random`` (seeded). With a server's outgoing link shared by a fleet,
``egress_key`` orders the heads of every session's Q_e on it.
"""

from __future__ import annotations

import heapq
import itertools
import math
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

    def peek(self) -> T:
        """The item ``pop`` would return, left in the queue."""
        return self._heap[0][2]

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


EGRESS_POLICIES = ("priority", "fifo")
EGRESS_LEAD_S = 0.05  # per priority level: how much later a final result may be queued on a shared
# egress and still leave before a lower-priority one


def egress_key(confidence: float, priority: int, queued_at: float, order: int, policy: str = "priority",
               lead_s: float = EGRESS_LEAD_S) -> tuple:
    """Order of one message on the server's shared outgoing link: Q_e of FSD Appendix A (Eq. 8) kept
    across sessions, so a fleet's results leave in one order whichever robot they are for; the least
    key is sent first.

    ``priority``: a final result or a reply (S = +inf) first, by the deadline queued_at − p × lead_s
    (p: the session's ``Open.priority``; a robot in motion is 1); then early exits, the robot of higher
    p first, then the highest confidence S^(l) (Eq. 4) first. ``fifo``: in queuing order.

    Departure from the paper (one client, one queue): across sessions a final result's place comes from
    a deadline rather than from S, which is +inf for every final. Bound: a final result never waits for
    one queued more than (p_j − p_i) × lead_s after it (none of lower or equal priority queued later), nor
    for an early exit, plus the one message on the link; an early exit waits at most until its own
    round's final result, which drops it (the robot no longer needs it)."""
    if policy == "fifo":
        return (queued_at, order)
    if confidence == math.inf:
        return (0, queued_at - priority * lead_s, order)
    return (1, -priority, -confidence, queued_at, order)
