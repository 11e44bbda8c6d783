"""FSD pre-drafting on the robot (FSD paper, Algorithm 1: Q_p, PREDRAFT, the pre-draft cache C).

Early-exit results go into the client queue Q_p; N worker threads pop them (by confidence, FIFO or
at random) and draft the next γ tokens as if that exit's output were final, each on its own fork of
the drafter's KV cache. When the final result arrives, a cached draft for exactly its tokens is sent
at once (a hit); a draft still being computed for them is awaited (also a hit: it is ahead of a
fresh one); otherwise the robot drafts anew (a miss). Stale work is cancelled between draft steps.

Legend: γ — draft length; x'_{t+1:t+δ'+1} — an early exit's tokens; C — the pre-draft cache.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from edge_spec_ros.models.drafter import Draft, DraftCancelled, Drafter
from edge_spec_ros.models.kv_cache import KVCache
from edge_spec_ros.spec.queues import ExitQueue
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedDraft:
    draft: Draft
    kv: KVCache  # the worker's cache after drafting: the robot continues from it on a hit
    layer: int  # the exit layer whose output it was drafted from


class PreDrafter:
    """Q_p + N workers + C for one decision."""

    def __init__(self, drafter: Drafter, threads: int, policy: str, gamma: int, sampling: SamplingConfig,
                 rng: PositionalRNG, min_step_s: float = 0.0) -> None:
        if threads < 1:
            raise ValueError(f"need at least one pre-draft thread, got {threads}")
        self.drafter = drafter
        self.gamma = gamma
        self.sampling = sampling
        self.rng = rng
        self.min_step_s = min_step_s
        self._cv = threading.Condition()
        self._queue: ExitQueue[tuple[int, tuple[int, ...], int]] = ExitQueue(policy)
        self._cache: dict[tuple[int, ...], CachedDraft] = {}
        self._running: set[tuple[int, ...]] = set()
        self._round = -1
        self._prefix: list[int] = []
        self._base: KVCache | None = None
        self._closed = False
        self._workers = [threading.Thread(target=self._work, name=f"predraft-{i}", daemon=True)
                         for i in range(threads)]
        for w in self._workers:
            w.start()

    def begin_round(self, round_: int, prefix: list[int], base: KVCache, gamma: int | None = None) -> None:
        """A draft for ``round_`` left; pre-drafts of ``gamma`` tokens (default: as constructed) will
        extend ``prefix`` from a fork of ``base`` (a snapshot: the caller may keep using its own cache)."""
        with self._cv:
            self._round, self._prefix, self._base = round_, list(prefix), base
            self.gamma = gamma or self.gamma
            self._queue.clear()
            self._cache.clear()

    def offer(self, round_: int, tokens: tuple[int, ...], confidence: float, layer: int) -> None:
        """An early exit's output (Algorithm 1, RECEIVER: Q_p.push)."""
        with self._cv:
            if round_ != self._round or tokens in self._cache or tokens in self._running:
                return
            self._queue.push((round_, tokens, layer), confidence)
            self._cv.notify()

    def take(self, tokens: tuple[int, ...]) -> CachedDraft | None:
        """The final output arrived: return the cached draft for it (waiting for one in progress), or
        None on a miss. Ends the round: everything else is discarded."""
        with self._cv:
            while tokens in self._running and tokens not in self._cache:
                self._cv.wait()
            hit = self._cache.get(tokens)
            self._round = -1  # cancels running drafts at their next step
            self._queue.clear()
            self._cache.clear()
            self._base = None
            return hit

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._round = -1
            self._cv.notify_all()
        for w in self._workers:
            w.join(timeout=5)

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._closed and not self._queue:
                    self._cv.wait()
                if self._closed:
                    return
                round_, tokens, layer = self._queue.pop()
                if round_ != self._round or tokens in self._cache or tokens in self._running:
                    continue
                self._running.add(tokens)
                prefix, base, gamma = self._prefix + list(tokens), self._base, self.gamma
            result = None
            try:
                kv = base.fork()
                draft = self.drafter.draft(kv, prefix, gamma, self.sampling, self.rng, self.min_step_s,
                                           cancelled=lambda r=round_: self._round != r)
                result = CachedDraft(draft, kv, layer)
            except DraftCancelled:
                pass
            except Exception:  # a failed pre-draft only costs a cache miss
                log.exception("pre-draft failed")
            finally:
                with self._cv:
                    self._running.discard(tokens)
                    if result is not None and self._round == round_:
                        self._cache[tokens] = result
                    self._cv.notify_all()
