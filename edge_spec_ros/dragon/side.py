"""One side of Speculative Aggregation (DRAGON, Liu et al. 2025, §3 and §4.2): its own context and
Draft Queue.

Legend: l ≡ robot, r ≡ cloud (dragon/aggregation.py); x^s_t — side s's draft at position t; p^s_t,
log h̃^s_t — its locally aggregated distribution and weight; x_t — target token.

A side drafts x^s_t over its own context (prompt + committed tokens + its speculative drafts) into
its Draft Queue; the aggregator's verdict for the front draft either dequeues it (accepted: the
context already ends in x_t) or clears the queue, rolls the side's state back to the committed prefix
(the ``rollback(n)`` hook: a KV cache truncate, models/kv_cache.py) and appends x_t (§4.2 steps 1-5).
``dragon/peer.DragonPeer`` runs one over the link. Pure: no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edge_spec_ros.dragon.aggregation import LocalAggregate, SideFunction, SideName, draft_token
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig


@dataclass(frozen=True)
class Draft:
    """One entry of a Draft Queue: x^s_t with p^s_t and log h̃^s_t (what travels with it on the wire)."""

    position: int  # t, counted from 0 at the first generated token
    token: int  # x^s_t
    dist: LocalAggregate


class DraftingSide:
    """One side: its own context (prompt + committed tokens + speculative drafts) and Draft Queue."""

    def __init__(self, name: SideName, next_distribution: SideFunction, prompt: Sequence[int],
                 rng: PositionalRNG, sampling: SamplingConfig,
                 rollback: Callable[[int], None] | None = None) -> None:
        self.name = name
        self.next_distribution = next_distribution
        self.rollback_hook = rollback
        self.rng, self.sampling = rng, sampling
        self.prompt_length = len(prompt)
        self.context: list[int] = list(prompt)
        self.committed = len(prompt)  # length of prompt + target tokens so far
        self.queue: deque[Draft] = deque()
        self.drafted = 0  # drafts computed
        self.discarded = 0  # drafts thrown away by rollbacks (the aggregated rejected one included)
        self.rollbacks = 0

    @property
    def next_position(self) -> int:
        return len(self.context) - self.prompt_length

    def draft(self) -> Draft:
        """Decode x^s_t over the side's own context and enqueue it (§3 ①②)."""
        dist = self.next_distribution(self.context)
        position = self.next_position
        token = draft_token(dist.probs, self.name, self.rng, position, self.sampling)
        entry = Draft(position, token, dist)
        self.context.append(token)
        self.queue.append(entry)
        self.drafted += 1
        return entry

    def settle(self, target: int, accepted: bool) -> None:
        """Apply the broadcast result for the front draft (§4.2 steps 3-4)."""
        front = self.queue.popleft()
        if accepted:
            assert front.token == target
            self.committed += 1
            return
        self.discarded += 1 + len(self.queue)
        self.queue.clear()
        del self.context[self.committed:]
        self.rollbacks += 1
        if self.rollback_hook is not None:
            self.rollback_hook(self.committed)  # state back to prompt + x_<t; x_t is fed next
        self.context.append(target)
        self.committed += 1
