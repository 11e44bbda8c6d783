"""A link emulator for one direction of a connection: one-way delay, jitter, bandwidth cap, loss.

It is pure bookkeeping on times passed in by the caller, so it is testable without sleeping and
usable by both ends' I/O threads: a message of b bytes offered at time ``now`` starts transmitting
when the link is free, occupies it for 8b/bandwidth seconds, and arrives one-way delay + jitter later.
Loss is modelled as TCP sees it over ZeroMQ: nothing is dropped, a lost message arrives one
retransmission timeout late. Arrivals keep their sending order (a TCP stream does not reorder).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class LinkShape:
    delay_s: float = 0.0  # one-way propagation delay
    jitter_s: float = 0.0  # uniform extra delay in [0, jitter]
    bandwidth_bps: float = 0.0  # bits per second; 0 = unlimited
    loss: float = 0.0  # probability that a message is retransmitted once
    rto_s: float = 0.2  # retransmission timeout

    def __post_init__(self) -> None:
        values = (self.delay_s, self.jitter_s, self.bandwidth_bps, self.rto_s)
        if not all(math.isfinite(v) and v >= 0 for v in values) or not 0 <= self.loss < 1:
            raise ValueError(f"invalid link shape {self}: times and bandwidth must be finite and >= 0, "
                             "loss in [0, 1)")

    @property
    def ideal(self) -> bool:
        return self.delay_s == self.jitter_s == self.bandwidth_bps == self.loss == 0


class LinkEmulator:
    """Transmission schedule of one direction."""

    def __init__(self, shape: LinkShape, seed: int = 0) -> None:
        self.shape = shape
        self.free_at = 0.0  # when the link finishes sending what it already took
        self._last_arrival = 0.0
        self._rng = random.Random(seed)

    def transmit(self, nbytes: int, now: float) -> float:
        """Take a message of ``nbytes`` at time ``now``; return its arrival time."""
        s = self.shape
        start = max(now, self.free_at)
        self.free_at = start + (nbytes * 8 / s.bandwidth_bps if s.bandwidth_bps else 0.0)
        arrival = self.free_at + s.delay_s + (self._rng.uniform(0.0, s.jitter_s) if s.jitter_s else 0.0)
        if s.loss and self._rng.random() < s.loss:
            arrival += s.rto_s
        self._last_arrival = max(arrival, self._last_arrival)
        return self._last_arrival
