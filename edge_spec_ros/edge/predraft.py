"""FSD pre-drafting on the robot (FSD paper, Algorithm 1: Q_p, PREDRAFT, the pre-draft cache C).

Early-exit results go into the client queue Q_p; N worker threads pop them (by confidence, FIFO or
at random) and draft the next γ tokens as if that exit's output were final, each on its own fork of
the drafter's KV cache. When the final result arrives, a cached draft for exactly its tokens is sent
at once (a hit); a draft still being computed for them is awaited (also a hit: it is ahead of a
fresh one); otherwise the robot drafts anew (a miss). Stale work is cancelled between draft steps.

Lifetime: the workers live as long as the ``PreDrafter`` (the robot's decoder keeps one for its whole
life); ``begin`` opens a decision (its seed's draws, sampling, γ, emulated T_p), ``begin_round`` /
``take`` bracket each round, ``end`` closes the decision, ``close`` stops the workers. Work is keyed
by (decision, round), so a pre-draft still running from an earlier decision or round can never land
in the cache of a later one, even when the round numbers coincide.

Legend: γ — draft length; x'_{t+1:t+δ'+1} — an early exit's tokens; C — the pre-draft cache;
T_p — one draft forward.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from edge_spec_ros.models.drafter import Draft, DraftCancelled, Drafter
from edge_spec_ros.models.kv_cache import KVCache
from edge_spec_ros.spec.queues import ExitQueue
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig

log = logging.getLogger(__name__)
JOIN_S = 5.0

Key = tuple[int, int]  # (decision, round)


@dataclass(frozen=True)
class CachedDraft:
    draft: Draft
    kv: KVCache  # the worker's cache after drafting: the robot continues from it on a hit
    layer: int  # the exit layer whose output it was drafted from
    draft_s: float = 0.0  # the worker's measured drafting time (γ·T_p as it ran, beside the others)


@dataclass(frozen=True)
class _Decision:
    """What a decision fixes for its pre-drafts: the seed's draws, sampling and emulated T_p."""

    number: int
    rng: PositionalRNG
    sampling: SamplingConfig
    min_step_s: float


class PreDrafter:
    """Q_p + N workers + C, reused across decisions (``begin`` / ``end``)."""

    def __init__(self, drafter: Drafter, threads: int, policy: str, gamma: int = 4,
                 sampling: SamplingConfig | None = None, rng: PositionalRNG | None = None,
                 min_step_s: float = 0.0) -> None:
        if threads < 1:
            raise ValueError(f"need at least one pre-draft thread, got {threads}")
        self.drafter = drafter
        self.threads = threads
        self.policy = policy
        self.gamma = gamma
        self._cv = threading.Condition()
        self._queue: ExitQueue[tuple[Key, tuple[int, ...], int]] = ExitQueue(policy)
        self._cache: dict[tuple[int, ...], CachedDraft] = {}
        self._running: dict[tuple[int, ...], Key] = {}  # tokens → the (decision, round) drafting them
        self._decision = _Decision(0, PositionalRNG(), SamplingConfig(), 0.0)
        self._key: Key | None = None  # the round pre-drafts are for; None between rounds
        self._prefix: list[int] = []
        self._base: KVCache | None = None
        self._closed = False
        self.begin(rng or PositionalRNG(), sampling or SamplingConfig(), gamma, min_step_s)
        self._workers = [threading.Thread(target=self._work, name=f"predraft-{i}", daemon=True)
                         for i in range(threads)]
        for w in self._workers:
            w.start()

    # --- a decision ---------------------------------------------------------------------------
    def begin(self, rng: PositionalRNG, sampling: SamplingConfig, gamma: int, min_step_s: float = 0.0) -> None:
        """Open a decision: its pre-drafts use ``rng``'s position-indexed draws (the decision's seed),
        ``sampling`` and emulated T_p ``min_step_s``; ``gamma`` until a round names another."""
        with self._cv:
            self._decision = _Decision(self._decision.number + 1, rng, sampling, min_step_s)
            self.gamma = gamma
            self._forget()

    def end(self) -> None:
        """Close the decision: queued and cached work is dropped, running drafts cancel at their next
        step. The workers stay, idle, for the next ``begin``."""
        with self._cv:
            self._forget()
            self._cv.notify_all()

    # --- a round ------------------------------------------------------------------------------
    def begin_round(self, round_: int, prefix: list[int], base: KVCache, gamma: int | None = None) -> None:
        """A draft for ``round_`` left; pre-drafts of ``gamma`` tokens (default: the decision's) will
        extend ``prefix`` from a fork of ``base`` (a snapshot: the caller may keep using its own cache)."""
        with self._cv:
            self._forget()
            self._key, self._prefix, self._base = (self._decision.number, round_), list(prefix), base
            self.gamma = gamma or self.gamma

    def offer(self, round_: int, tokens: tuple[int, ...], confidence: float, layer: int) -> None:
        """An early exit's output (Algorithm 1, RECEIVER: Q_p.push)."""
        with self._cv:
            key = (self._decision.number, round_)
            if key != self._key or tokens in self._cache or self._running.get(tokens) == key:
                return
            self._queue.push((key, tokens, layer), confidence)
            self._cv.notify()

    def take(self, tokens: tuple[int, ...]) -> CachedDraft | None:
        """The final output arrived: return the cached draft for it (waiting for one in progress), or
        None on a miss. Ends the round: everything else is discarded."""
        with self._cv:
            while self._key is not None and self._running.get(tokens) == self._key and tokens not in self._cache:
                self._cv.wait()
            hit = self._cache.get(tokens)
            self._forget()  # cancels running drafts at their next step
            return hit

    def end_round(self) -> None:
        """End the round without a result (its next draft came from elsewhere): as ``take``, no wait."""
        with self._cv:
            self._forget()

    # --- the workers' life ----------------------------------------------------------------------
    def stop(self) -> None:
        """Tell the workers to exit; returns at once (safe from any thread, a finaliser included)."""
        with self._cv:
            self._closed = True
            self._forget()
            self._cv.notify_all()

    def close(self) -> None:
        """Stop the workers and join them."""
        self.stop()
        for w in self._workers:
            if w is not threading.current_thread():
                w.join(timeout=JOIN_S)

    def _forget(self) -> None:
        """No round: drop the queue and the cache (caller holds the lock)."""
        self._key, self._base = None, None
        self._queue.clear()
        self._cache.clear()

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._closed and not self._queue:
                    self._cv.wait()
                if self._closed:
                    return
                key, tokens, layer = self._queue.pop()
                if key != self._key or tokens in self._cache or self._running.get(tokens) == key:
                    continue
                self._running[tokens] = key
                prefix, base, gamma, decision = self._prefix + list(tokens), self._base, self.gamma, self._decision
            result = None
            try:
                kv = base.fork()
                t = time.perf_counter()
                draft = self.drafter.draft(kv, prefix, gamma, decision.sampling, decision.rng, decision.min_step_s,
                                           cancelled=lambda k=key: self._key != k)
                result = CachedDraft(draft, kv, layer, time.perf_counter() - t)
            except DraftCancelled:
                pass
            except Exception:  # a failed pre-draft only costs a cache miss
                log.exception("pre-draft failed")
            finally:
                with self._cv:
                    if self._running.get(tokens) == key:
                        del self._running[tokens]
                    if result is not None and self._key == key:
                        self._cache[tokens] = result
                    self._cv.notify_all()
