"""One speculative decision between its rounds, and AS²'s cloud-only fallback as a policy object.

``DecisionState`` holds what a decision carries from one round to the next (the committed sequence,
the output, the drafter's cache, the round number, DSSD's resampled token, the last emission's time)
and the round's plugged-in parts (draft sources, round type), built again after cloud-only tokens.
``commit`` is the one place tokens are emitted, whether a verdict's or the cloud's. ``CloudFallback``
(TK-SLT's AS²): while the γ policy finds that speculation does not pay, the cloud decodes chunks of
the decision alone.

Legend: γ — draft length.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.decoding.reference import DecodeConfig, append_until_stop
from edge_spec_ros.edge.draft_sources import DraftChain
from edge_spec_ros.edge.gamma import CloudWall, GammaPolicy
from edge_spec_ros.edge.pipeline import PipelinedRound, SerialRound
from edge_spec_ros.models.kv_cache import KVCache


@dataclass(frozen=True)
class CloudTokens:
    """A cloud-only chunk: its tokens, when its Generate left, when the first tokens arrived and how many."""

    tokens: list[int]
    sent_at: float
    first_at: float
    first_count: int

    def wall(self, end: float) -> CloudWall:
        """Its wall times as the γ policy measures them (``edge.gamma.CloudWall``)."""
        return CloudWall(first_s=self.first_at - self.sent_at if self.first_count else 0.0,
                         first_count=self.first_count, rest_s=end - self.first_at if self.first_count else 0.0,
                         rest_count=len(self.tokens) - self.first_count)


NewRound = Callable[[int], SerialRound | PipelinedRound]  # round number -> that round
RoundParts = Callable[[int], tuple[DraftChain, NewRound]]  # round number -> draft sources and round type from it on


@dataclass
class DecisionState:
    """A speculative decision between rounds. ``parts(number)``: the draft sources and the round type
    from round ``number`` on (``restart`` builds them again, so that nothing settled before cloud-only
    tokens, a pre-draft or a block drafted ahead, outlives them)."""

    seq: list[int]  # the committed sequence: prompt + output
    decode: DecodeConfig
    stats: DecodeStats
    t0: float  # the decision's start (perf_counter): its time to first token counts from it
    parts: RoundParts
    out: list[int] = field(default_factory=list)
    kv: KVCache | None = None  # the drafter's cache: its prefill waits for the first speculative round
    number: int = 0
    resampled: int = -1  # DSSD: the token the robot resampled last round, which the next block tells the cloud
    mark: float = field(default_factory=time.perf_counter)  # the last emission: a round's wall time counts from it
    sources: DraftChain = field(init=False)
    new_round: NewRound = field(init=False)

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """The draft sources and the round type built again from the current round on."""
        self.sources, self.new_round = self.parts(self.number)

    @property
    def remaining(self) -> int:
        """Tokens the decision may still emit."""
        return self.decode.max_new_tokens - len(self.out)

    def commit(self, tokens: tuple[int, ...], mark: float, resampled: int = -1) -> bool:
        """Commit and emit ``tokens`` (to a stop token or the budget); True when the decision is done."""
        self.mark, self.resampled = mark, resampled
        self.seq.extend(tokens)
        return emit(self.out, tokens, self.decode, self.stats, self.t0)


def emit(out: list[int], tokens: tuple[int, ...], config: DecodeConfig, stats: DecodeStats, t0: float) -> bool:
    """Append a verdict's tokens to the output (to a stop token or the budget); True when done. The
    first tokens set the time to first token, unless a cloud-only chunk already did as they streamed in
    (``_cloud_ar``: its first ``Tokens`` message, not the chunk's end)."""
    first = not out
    done = append_until_stop(out, tokens, config)
    if first and not stats.ttft_s:
        stats.ttft_s = time.perf_counter() - t0
        stats.first_tokens = len(out)
    return done


class CloudFallback:
    """AS² (TK-SLT): γ for the next round from the policy; while it says speculation does not pay
    (None), the cloud decodes a chunk of the decision alone (``cloud(n, resampled)``: at most n
    tokens, starting with DSSD's resampled token when one is owed), the policy measures it, and γ is
    asked again (a probe after enough cloud-only tokens)."""

    def __init__(self, policy: GammaPolicy, cloud: Callable[[int, int], CloudTokens]) -> None:
        self.policy = policy
        self.cloud = cloud

    def gamma(self, state: DecisionState) -> int | None:
        """γ for the next speculative round, after the cloud-only chunks the policy asks for first;
        None when they finished the decision."""
        gamma = self.policy.gamma(state.remaining)
        while gamma is None:
            state.stats.cloud_fallback = 1
            budget = state.remaining
            chunk = self.policy.cloud_chunk()
            n = budget if chunk is None else min(chunk, budget)
            server_before = state.stats.server_s
            cloud = self.cloud(n, state.resampled)
            mark = time.perf_counter()  # the next speculative round's wall time counts from here
            tokens = tuple(cloud.tokens)
            self.policy.observe_cloud(len(tokens), state.stats.server_s - server_before, cloud.wall(mark))
            if state.commit(tokens, mark) or len(tokens) < n or n == budget:
                return None
            state.restart()
            gamma = self.policy.gamma(state.remaining)
        return gamma
