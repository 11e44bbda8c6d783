"""Decoding statistics shared by every decoder (FSD paper, Table 3 notation).

τ — tokens emitted per draft–verify round; α — fraction of drafted tokens accepted; γ — draft length;
r — pre-draft cache miss rate; T_p — one draft forward; T_q — one verification; T_c — one-way
communication latency (estimated per round as (round trip − T_q) / 2).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from edge_spec_ros.spec.pipeline import latency_immunity_bound


@dataclass
class DecodeStats:
    """Counters and timings of one decode; derived figures are properties."""

    mode: str
    tokens: int = 0  # n: tokens emitted
    rounds: int = 0  # draft–verify rounds (AR: target forward passes)
    drafted: int = 0  # draft tokens sent for verification
    accepted: int = 0  # draft tokens accepted (Σ δ)
    full_rounds: int = 0  # rounds whose whole draft was accepted (δ = γ)
    wall_s: float = 0.0
    ttft_s: float = 0.0  # time to first emitted token
    first_tokens: int = 0  # tokens known at that time (the first verdict's, up to γ + 1)
    steady_s: float = 0.0  # wall_s − ttft_s: the decode after its first verdict ...
    steady_tokens: int = 0  # ... and the tokens emitted in it (tokens − first_tokens) ...
    steady_rounds: int = 0  # ... by its rounds (rounds − 1)
    prefill_s: float = 0.0
    draft_prefill_s: float = 0.0  # T_pre: the drafter's prefill of the prompt, before its first draft step
    draft_s: float = 0.0  # Σ drafting time (γ·T_p per round)
    verify_s: float = 0.0  # Σ verification time as the robot waits for it (AR: per token)
    draft_forwards: int = 0  # drafter forward passes on the critical path
    cache_hits: int = 0  # FSD: rounds whose next draft came from the pre-draft cache
    cache_misses: int = 0
    hit_exit_sum: int = 0  # Σ over hits of the earliest exit layer that matched the final output
    branches_held: int = 0  # PicoSpec: rounds whose block was a branch block that held (edge.pipeline)
    after_next_held: int = 0  # PicoSpec: rounds whose block was drafted two rounds ahead and held (edge.pipeline)
    server_s: float = 0.0  # Σ server compute reported per round (T_q)
    round_trip_s: float = 0.0  # Σ from sending a draft (or request) to its final result
    bytes_up: int = 0
    bytes_down: int = 0
    cloud_fallback: int = 0  # AS²: decodes that switched to cloud-only decoding part-way
    resamples: int = 0  # DSSD: rejections resampled on the robot
    tv_sum: float = 0.0  # LOSSY top-K downlink: Σ TV(p_δ, pruned p_δ) over resamples
    round_overheads_s: list[float] = field(default_factory=list)  # per round: round trip − server T_q
    # per verified round, in order: its block's γ. The decision's partition into blocks: a block cut short
    # (PicoSpec's truncation) moves where the bonus tokens fall, and with the seed the partition fixes a
    # sampled decision's tokens (``decoding.reference.speculative(gammas=...)`` replays it)
    block_gammas: list[int] = field(default_factory=list)

    @property
    def tau(self) -> float:
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def alpha(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def alpha_mle(self) -> float:
        """Per-token acceptance probability: accepted / (accepted + rejections), every round that was
        not fully accepted ending in one rejection (accepted/drafted underestimates it)."""
        trials = self.accepted + self.rounds - self.full_rounds
        return self.accepted / trials if trials else 0.0

    @property
    def per_token_s(self) -> float:
        return self.wall_s / self.tokens if self.tokens else 0.0

    @property
    def steady_per_token_s(self) -> float:
        """Seconds per token after the first verdict: the pipeline's steady state, which the bound below
        describes. A decision's start (the open's prefill and round trip, the first round, which
        nothing can overlap) is in ``ttft_s``, outside any pipeline (PicoSpec's eqs. 5-9 model the
        cycles only)."""
        return self.steady_s / self.steady_tokens if self.steady_tokens else 0.0

    @property
    def steady_round_s(self) -> float:
        """Seconds per round after the first verdict (the bound's T_q when nothing but verification is
        on the critical path)."""
        return self.steady_s / self.steady_rounds if self.steady_rounds else 0.0

    @property
    def steady_tau(self) -> float:
        """Tokens per round after the first verdict (the bound's τ(α, γ) for an endless answer; an answer
        that ends inside a block emits fewer in its last round)."""
        return self.steady_tokens / self.steady_rounds if self.steady_rounds else 0.0

    @property
    def bound_per_token_s(self) -> float:
        """PicoSpec's latency-immunity bound T_q / τ(α, γ) at this decode's own T_q, per-token α and
        mean γ (``spec.pipeline.latency_immunity_bound``); 0 without rounds."""
        if not self.rounds:
            return 0.0
        return latency_immunity_bound(self.tq_s, self.alpha_mle, self.drafted / self.rounds)

    @property
    def miss_rate(self) -> float:
        n = self.cache_hits + self.cache_misses
        return self.cache_misses / n if n else 0.0

    @property
    def avg_hit_exit(self) -> float:
        return self.hit_exit_sum / self.cache_hits if self.cache_hits else 0.0

    @property
    def tp_s(self) -> float:
        return self.draft_s / self.draft_forwards if self.draft_forwards else 0.0

    @property
    def tq_s(self) -> float:
        return self.server_s / self.rounds if self.rounds else 0.0

    @property
    def tc_s(self) -> float:
        return max(0.0, self.round_trip_s - self.server_s) / 2 / self.rounds if self.rounds else 0.0

    @property
    def bytes_up_per_round(self) -> float:
        return self.bytes_up / self.rounds if self.rounds else 0.0

    @property
    def bytes_down_per_round(self) -> float:
        return self.bytes_down / self.rounds if self.rounds else 0.0

    @property
    def mean_tv(self) -> float:
        return self.tv_sum / self.resamples if self.resamples else 0.0

    @property
    def overhead_median_s(self) -> float:
        return statistics.median(self.round_overheads_s) if self.round_overheads_s else 0.0

    DERIVED = ("overhead_median_s", "mean_tv", "tau", "alpha", "alpha_mle", "per_token_s", "steady_per_token_s",
               "steady_round_s", "steady_tau", "bound_per_token_s",
               "miss_rate", "avg_hit_exit", "tp_s", "tq_s", "tc_s",
               "bytes_up_per_round", "bytes_down_per_round")

    def as_dict(self) -> dict:
        out = {**asdict(self), **{name: getattr(self, name) for name in self.DERIVED}}
        del out["round_overheads_s"], out["block_gammas"]
        return out
