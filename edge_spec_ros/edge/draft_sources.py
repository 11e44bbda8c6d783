"""Where a round's draft comes from: a chain of sources, asked in order.

1. the pipelined block (PicoSpec §3): drafted while the cloud verified the previous block, valid when
   that block was fully accepted and the cloud's own token was guessed right; possibly on the link
   already (a chained block);
2. the pre-draft cache C (FSD, Algorithm 1): drafted by a worker from an early exit whose output the
   final verdict matched;
3. a fresh draft of γ tokens on the critical path (every mode; the only source of SD, DSSD, TK-SLT).

A hit of 1 or 2 is bit-identical to the fresh draft from the same prefix (draws are position-indexed:
u(DRAFT, j) for token j), so the chain changes latency, never the tokens. Every source reports the
draft time it measured, T_SLM per token, for the γ policy (``edge.gamma``).

Legend: γ — draft length; V — vocabulary; T_SLM — one draft-token step; C — the pre-draft cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.edge.predraft import PreDrafter
from edge_spec_ros.edge.registry import check_fresh_source
from edge_spec_ros.edge.retrieval import Retrieval
from edge_spec_ros.edge.round_link import RoundLink
from edge_spec_ros.models.drafter import Draft, Drafter
from edge_spec_ros.models.kv_cache import KVCache
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.spec.sparse import DraftDistribution
from edge_spec_ros.wire.messages import ExitResult


@dataclass(frozen=True)
class SourcedDraft:
    """A round's draft, the drafter cache to continue from, and what producing it cost."""

    draft: Draft  # γ tokens from ``draft.position``; q (γ, V), None when greedy
    kv: KVCache  # the drafter's cache after the draft
    t_token_s: float  # T_SLM: the producing source's measured draft time per token
    sent_at: float | None = None  # a chained block already on the link: when it left (perf_counter)


@dataclass(frozen=True)
class FreshDraft:
    """Source 3: draft γ tokens now, timed into ``DecodeStats.draft_s`` (the critical path).

    ``split_head``: PicoSpec's fast verification — a block of γ ≥ 2 leaves in two parts, its first
    ⌈γ/2⌉ tokens as soon as they exist, so the cloud starts on them while the rest is drafted."""

    drafter: Drafter
    link: RoundLink
    sampling: SamplingConfig
    rng: PositionalRNG
    tp_s: float  # emulated T_p per step (0: real compute only)
    split_head: bool
    stats: DecodeStats
    stop: tuple[int, ...] = ()  # the decision's stop tokens: a drafted one ends the block (``Drafter.draft``)

    def draft(self, round_: int, kv: KVCache, seq: list[int], gamma: int, resampled: int) -> SourcedDraft:
        t = time.perf_counter()
        if self.split_head and gamma >= 2:
            head = self._draft(kv, seq, (gamma + 1) // 2)
            self.link.send(round_, head, resampled, partial=True)
            draft = head if head.tokens[-1] in self.stop else \
                head.join(self._draft(kv, seq + list(head.tokens), gamma - head.gamma))
        else:
            draft = self._draft(kv, seq, gamma)
        return SourcedDraft(draft, kv, (time.perf_counter() - t) / draft.gamma)

    def _draft(self, kv: KVCache, seq: list[int], gamma: int) -> Draft:
        t = time.perf_counter()
        draft = self.drafter.draft(kv, seq, gamma, self.sampling, self.rng, self.tp_s,
                                   distribution=self.link.distribution, stop=self.stop)
        self.stats.draft_s += time.perf_counter() - t
        self.stats.draft_forwards += draft.gamma
        return draft


class PreDraftCache:
    """Source 2 for one decision: the decoder's long-lived ``PreDrafter`` (FSD's Q_p, workers and C),
    and per round the earliest exit layer that produced each early output (``hit_exit_sum``)."""

    def __init__(self, predrafter: PreDrafter) -> None:
        self.predrafter = predrafter
        self._round = -1
        self._earliest: dict[tuple[int, ...], int] = {}
        self._pending: tuple[list[int], KVCache, int] | None = None

    def begin_round(self, round_: int, seq: list[int], kv: KVCache, gamma: int) -> None:
        """Round ``round_``'s block left: pre-drafts of γ tokens extend ``seq`` from a snapshot of ``kv``,
        taken at the round's first early exit. Until the verdict the decoder leaves ``kv`` alone (it
        waits, or drafts ahead on forks of its own), so the snapshot is the cache as the block left it,
        and a round in which the verifier computes no exit (its planner's choice) copies no cache."""
        self._round, self._earliest = round_, {}
        self._pending = (seq, kv, gamma)

    def on_exit(self, msg: ExitResult) -> None:
        """An early exit of the round: remember its earliest layer, hand it to Q_p."""
        if self._pending is not None:
            seq, kv, gamma = self._pending
            self._pending = None
            self.predrafter.begin_round(self._round, seq, kv.fork(), gamma)
        tokens = tuple(int(t) for t in msg.tokens)
        self._earliest[tokens] = min(self._earliest.get(tokens, msg.layer), msg.layer)
        self.predrafter.offer(self._round, tokens, msg.confidence, msg.layer)

    def take(self, tokens: tuple[int, ...]) -> tuple[SourcedDraft, int] | None:
        """The pre-draft for the verdict's ``tokens`` and its earliest exit layer, or None (a miss)."""
        self._pending = None
        hit = self.predrafter.take(tokens)
        if hit is None:
            return None
        return SourcedDraft(hit.draft, hit.kv, hit.draft_s / hit.draft.gamma), self._earliest.get(tokens, hit.layer)

    def end_round(self) -> None:
        self._pending = None
        self.predrafter.end_round()


class DraftChain:
    """The sources in order: the pipelined block, the pre-draft cache, a fresh draft. After each
    verdict it settles the next round's draft and counts a hit (1 or 2) or a miss (a mode with a
    source ahead of the fresh draft that had nothing)."""

    def __init__(self, fresh: FreshDraft, cache: PreDraftCache | None, pipelined: bool, stats: DecodeStats) -> None:
        self.fresh = fresh
        self.cache = cache
        self.pipelined = pipelined
        self.stats = stats
        self._next: SourcedDraft | None = None

    @property
    def in_flight(self) -> bool:
        """The next round's block is on the link already (a chained block that held): its γ is fixed."""
        return self._next is not None and self._next.sent_at is not None

    def preset(self, first: SourcedDraft) -> None:
        """The decision's first block, sent right behind the Open (``edge.first_block``): round 0's draft."""
        self._next = first

    def draft(self, round_: int, kv: KVCache, seq: list[int], gamma: int, resampled: int) -> SourcedDraft:
        """Round ``round_``'s draft: the one settled after the last verdict, else a fresh one of γ."""
        settled, self._next = self._next, None
        return settled if settled is not None else self.fresh.draft(round_, kv, seq, gamma, resampled)

    def begin_round(self, round_: int, seq: list[int], kv: KVCache, gamma: int) -> None:
        if self.cache is not None:
            self.cache.begin_round(round_, seq, kv, gamma)

    def on_exit(self, msg: ExitResult) -> None:
        if self.cache is not None:
            self.cache.on_exit(msg)

    def after_verdict(self, pipelined: SourcedDraft | None, tokens: tuple[int, ...]) -> None:
        """The verdict committed ``tokens``; ``pipelined``: the block drafted ahead, if it is valid."""
        stats = self.stats
        if pipelined is not None:
            if self.cache is not None:
                self.cache.end_round()
            stats.cache_hits += 1
            self._next = pipelined
            return
        hit = self.cache.take(tokens) if self.cache is not None else None
        if hit is not None:
            self._next, layer = hit
            stats.cache_hits += 1
            stats.hit_exit_sum += layer
        elif self.cache is not None or self.pipelined:
            stats.cache_misses += 1


# ---------------------------------------------------------------------------------------------------
# What a fresh draft is made of: a prompt-lookup source ahead of the drafter model.
#
# Prompt-lookup decoding (Saxena 2023; the n-gram source of LLMA, Yang et al. 2023): the last n
# tokens of the sequence (prompt + committed text) are searched for earlier in the sequence; the
# tokens that followed the most recent earlier occurrence are the draft. It costs no forward pass,
# and it agrees with the verifier where the answer copies its prompt or repeats itself (summaries,
# code, lists). A draft source only proposes: the verifier's verdict decides every token, so the
# output is the verifier's own (greedy: token for token, ``test/edge/test_draft_sources.py``).

LOOKUP_MAX_NGRAM = 3  # longest suffix n-gram searched for
LOOKUP_MIN_NGRAM = 2  # shortest one tried when the longer ones do not occur (one token: too often wrong)


@dataclass(frozen=True)
class PromptLookup:
    """Proposes, after ``context``, the tokens that followed the most recent earlier occurrence of its
    last n tokens (n = ``max_ngram`` down to ``min_ngram``, the longest that occurs), at most γ of
    them; () when no suffix n-gram occurs earlier. A pure function of the context."""

    max_ngram: int = LOOKUP_MAX_NGRAM
    min_ngram: int = LOOKUP_MIN_NGRAM

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")

    def propose(self, context: list[int] | tuple[int, ...], gamma: int) -> tuple[int, ...]:
        if gamma < 1:
            raise ValueError(f"γ must be >= 1, got {gamma}")
        seq = list(context)
        t = len(seq)
        for n in range(min(self.max_ngram, t - 1), self.min_ngram - 1, -1):
            suffix = seq[t - n:]
            # most recent earlier occurrence seq[i:i+n] == suffix with a continuation (i + n < t)
            for i in range(t - n - 1, -1, -1):
                if seq[i:i + n] == suffix:
                    return tuple(seq[i + n:i + n + gamma])
        return ()


class FirstProposal:
    """Several model-free sources (anything with ``propose(context, γ)``), asked in order: the first
    non-empty proposal (e.g. retrieval from a datastore, then prompt lookup)."""

    def __init__(self, *sources) -> None:
        if not sources:
            raise ValueError("FirstProposal needs at least one source")
        self.sources = sources

    def propose(self, context: list[int] | tuple[int, ...], gamma: int) -> tuple[int, ...]:
        for source in self.sources:
            if found := source.propose(context, gamma):
                return found
        return ()


class LookupDrafter(Drafter):
    """The draft-source chain inside one fresh draft: prompt lookup (or ``FirstProposal`` of several
    model-free sources) first, the drafter model after it.

    Greedy: the lookup proposes k ≤ γ tokens; the model drafts the other γ − k after them (none when
    the lookup filled the block). ``model`` None: lookup only, a draft of k tokens, or one model-free
    token (the last one repeated) when nothing matches, so a draft is never empty. With sampling
    (T > 0) the model drafts alone: its q is what the verdict needs, and a lookup token's q would be a
    point mass. Used wherever a ``Drafter`` is (``FreshDraft``, the reference decoders, pre-drafting).

    ``lookup_tokens`` / ``model_tokens`` count what each source drafted (the bench reports them)."""

    def __init__(self, model: Drafter | None, lookup: PromptLookup | FirstProposal = PromptLookup()  # noqa: B008
                 ) -> None:
        self.model = model
        self.lookup = lookup
        self.stack = model.stack if model is not None else None
        self.lookup_tokens = 0
        self.model_tokens = 0

    def start(self, prompt: EncodedPrompt) -> KVCache:
        return self.model.start(prompt) if self.model is not None else KVCache(None, [], 0, floor=0)

    def catch_up(self, kv: KVCache, seq: list[int]) -> bool:
        return self.model is not None and self.model.catch_up(kv, seq)

    def draft(self, kv: KVCache, prefix: list[int], gamma: int, sampling: SamplingConfig, rng: PositionalRNG,
              min_step_s: float = 0.0, cancelled: Callable[[], bool] | None = None,
              distribution: DraftDistribution | None = None, truncate: Callable[[], bool] | None = None,
              stop: Collection[int] = ()) -> Draft:
        if gamma < 1:
            raise ValueError(f"γ must be >= 1, got {gamma}")
        if not sampling.greedy and self.model is not None:
            draft = self.model.draft(kv, prefix, gamma, sampling, rng, min_step_s, cancelled, distribution, truncate,
                                     stop)
            self.model_tokens += draft.gamma
            return draft
        found = self.lookup.propose(prefix, gamma)
        ends = next((i + 1 for i, t in enumerate(found) if t in stop), None)  # a stop token ends the block
        found = found[:ends]
        self.lookup_tokens += len(found)
        draft = Draft(found, None, len(prefix))
        if ends is None and len(found) < gamma and self.model is not None:
            rest = self.model.draft(kv, list(prefix) + list(found), gamma - len(found), sampling, rng, min_step_s,
                                    cancelled, distribution, truncate, stop)
            self.model_tokens += rest.gamma
            draft = draft.join(rest) if found else rest
        elif not found:
            draft = Draft((prefix[-1],), None, len(prefix))
        return draft


def fresh_drafter(source: str, model: Drafter, datastore: str = "") -> Drafter:
    """The drafter of the fresh-draft source called ``source`` (``edge.registry.FRESH_SOURCES``) over
    the drafter model ``model``: ``model`` itself, ``LookupDrafter(model)``, or for ``retrieval`` the
    chain datastore (``edge.retrieval``, loaded from ``datastore``) → prompt lookup → ``model``."""
    name = check_fresh_source(source, datastore).name
    if name == "retrieval":
        return LookupDrafter(model, FirstProposal(Retrieval.load(datastore), PromptLookup()))
    return model if name == "model" else LookupDrafter(model, PromptLookup())
