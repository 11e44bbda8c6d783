"""A round's wait for its verdict: serial (every mode but PicoSpec's) or pipelined (PicoSpec §3).

Pipelined round i: while the cloud verifies S_i, the robot drafts S_{i+1} — its guess of the cloud's
own token, then γ more — on a fork of its cache, as if S_i were fully accepted, and stops as soon as
the verdict arrives (latency-aware truncation). Finished first, S_{i+1} leaves at once as round i+1,
chained: the cloud verifies it right after S_i if the assumption held and answers "stale" otherwise
(overlapped communication), and round i+1's number is then spent. Arriving with the verdict, it is
kept if the assumption held, dropped otherwise (its cache fork with it). Either way the block was
drafted from the same prefix, with the same position-indexed draws, as a fresh draft would be.

Each round object owns its state (the block drafted ahead, its cache, when it left) and answers
three questions: the verdict, the block the next round can use, and the next round's number.

Legend: S_i — round i's block; γ — draft length; T_q — verification; x_t — the cloud's own token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from edge_spec_ros.edge.draft_sources import SourcedDraft
from edge_spec_ros.edge.round_link import OnExit, RoundLink
from edge_spec_ros.models.drafter import Draft, Drafter
from edge_spec_ros.models.kv_cache import KVCache
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.wire.messages import ExitResult


@dataclass(frozen=True)
class Settled:
    """What a round leaves to the next: the next round's number and (PicoSpec) the block drafted
    ahead, when its assumption held."""

    next_number: int
    ahead: SourcedDraft | None = None


class SerialRound:
    """Send, then wait: the verdict of round ``number`` and nothing drafted ahead."""

    def __init__(self, number: int, link: RoundLink, on_exit: OnExit) -> None:
        self.number = number
        self.link = link
        self.on_exit = on_exit

    def verdict(self, seq: list[int], kv: KVCache, draft: Draft, gamma: int) -> ExitResult:
        """The final exit of this round; early exits go to ``on_exit``."""
        return self.link.await_final(self.number, self.on_exit)

    def settle(self, draft: Draft, final: ExitResult, tokens: tuple[int, ...]) -> Settled:
        """The verdict ``final`` of ``draft`` committed ``tokens``."""
        return Settled(self.number + 1)


@dataclass(frozen=True)
class Ahead:
    """S_{i+1} as drafted during T_q: 1 + γ' tokens (the guess of x_t first) on its own cache fork."""

    draft: Draft
    kv: KVCache
    t_token_s: float  # its measured draft time per token
    chained_at: float | None  # sent before the verdict (perf_counter), None if kept back


class PipelinedRound(SerialRound):
    """PicoSpec's round: verify S_i while drafting S_{i+1} (see the module docstring)."""

    def __init__(self, number: int, link: RoundLink, on_exit: OnExit, drafter: Drafter,
                 sampling: SamplingConfig, rng: PositionalRNG, tp_s: float) -> None:
        super().__init__(number, link, on_exit)
        self.drafter = drafter
        self.sampling = sampling
        self.rng = rng
        self.tp_s = tp_s
        self.ahead: Ahead | None = None

    def verdict(self, seq: list[int], kv: KVCache, draft: Draft, gamma: int) -> ExitResult:
        arrived: list[ExitResult] = []

        def verdict_in() -> bool:  # polled after each token: truncate once the verdict is here
            if not arrived and (final := self.link.poll_final(self.number, self.on_exit)) is not None:
                arrived.append(final)
            return bool(arrived)

        fork = kv.fork()
        t = time.perf_counter()
        block = self.drafter.draft(fork, seq + list(draft.tokens), gamma + 1, self.sampling, self.rng, self.tp_s,
                                   distribution=self.link.distribution, truncate=verdict_in)
        t_token_s = (time.perf_counter() - t) / block.gamma
        chained_at = None
        if not arrived and block.gamma >= 2:  # overlapped: S_{i+1} leaves before S_i's verdict
            chained_at = self.link.send(self.number + 1, block, -1, chained=True)
        self.ahead = Ahead(block, fork, t_token_s, chained_at)
        return arrived[0] if arrived else self.link.await_final(self.number, self.on_exit)

    def settle(self, draft: Draft, final: ExitResult, tokens: tuple[int, ...]) -> Settled:
        """S_{i+1} without its guessed first token is the next block if the assumption held: S_i fully
        accepted (no resample) and the guess equal to the cloud's token ``tokens[-1]``. A chained
        block that did not hold was answered stale and spent round i+1's number."""
        a = self.ahead
        if a is None:
            return Settled(self.number + 1)
        held = (final.accepted == draft.gamma and not final.resample and a.draft.gamma >= 2
                and a.draft.tokens[0] == tokens[-1])
        if held:
            return Settled(self.number + 1, SourcedDraft(a.draft.tail(1), a.kv, a.t_token_s, a.chained_at))
        stale = a.chained_at is not None
        return Settled(self.number + 2 if stale else self.number + 1)
