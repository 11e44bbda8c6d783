"""PicoSpec's throughput model (Section 3.4, eqs. 5-9).

Legend: γ — draft length; α — per-token acceptance probability; T_draft — drafting γ tokens on the
edge; T_RTT — network round trip; T_verify — one verification in the cloud; EL — expected tokens
generated per cycle; R — throughput (tokens per second).
"""

from __future__ import annotations

from dataclasses import dataclass


def expected_length(alpha: float, gamma: int) -> float:
    """EL = (1 − α^γ) / (1 − α) (eq. 5); γ as α → 1, 1 as α → 0."""
    if not 0 <= alpha <= 1 or gamma < 1:
        raise ValueError(f"need 0 <= α <= 1 and γ >= 1, got α={alpha}, γ={gamma}")
    return float(gamma) if alpha == 1 else (1 - alpha**gamma) / (1 - alpha)


@dataclass(frozen=True)
class PipelineTimes:
    t_draft: float
    t_rtt: float
    t_verify: float

    def __post_init__(self) -> None:
        if min(self.t_draft, self.t_rtt, self.t_verify) < 0:
            raise ValueError(f"times must be >= 0, got {self}")

    @property
    def sync_cycle(self) -> float:
        """L_sync = T_draft + T_RTT + T_verify (eq. 6)."""
        return self.t_draft + self.t_rtt + self.t_verify

    @property
    def overlapped_cycle(self) -> float:
        """L_async on a full hit: max(T_draft, T_RTT + T_verify) (eq. 2)."""
        return max(self.t_draft, self.t_rtt + self.t_verify)


def sync_throughput(alpha: float, gamma: int, times: PipelineTimes) -> float:
    """R_sync = EL / L_sync (eq. 7)."""
    return expected_length(alpha, gamma) / times.sync_cycle


def async_cycle(alpha: float, gamma: int, times: PipelineTimes) -> float:
    """E[T_async] = α^γ max(T_draft, T_RTT + T_verify) + (1 − α^γ)(T_draft + T_RTT + T_verify) (eqs. 8-9)."""
    hit = alpha**gamma
    return hit * times.overlapped_cycle + (1 - hit) * times.sync_cycle


def expected_round_tokens(alpha: float, gamma: float) -> float:
    """τ(α, γ) = (1 − α^(γ+1)) / (1 − α): tokens a round yields, the target's own token included (EL of
    eq. 5 at γ + 1); γ + 1 at α = 1. γ may be a mean over rounds (fractional)."""
    if not 0 <= alpha <= 1 or gamma < 0:
        raise ValueError(f"need 0 <= α <= 1 and γ >= 0, got α={alpha}, γ={gamma}")
    return gamma + 1.0 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def latency_immunity_bound(t_verify: float, alpha: float, gamma: float) -> float:
    """Seconds per token when the pipeline hides drafting and the network entirely ("latency
    immunity", Sec. 3.4) and only the verifier's occupancy remains: T_verify / τ(α, γ). No pipelined
    schedule with one verification per round beats it."""
    return t_verify / expected_round_tokens(alpha, gamma)


def async_throughput(alpha: float, gamma: int, times: PipelineTimes) -> float:
    """R_async = EL / E[T_async]."""
    return expected_length(alpha, gamma) / async_cycle(alpha, gamma, times)


@dataclass(frozen=True)
class OpenTimes:
    """Measured times of a decision's start: t_open — the Open's round trip to ``Opened`` (its upload,
    the verifier's prefill and 2T_c: what cloud-only decoding waits before its first ``Generate``);
    t_p — T_p, one draft step; t_q — T_q, one verification; t_c — T_c, one way; t_pre — T_pre, the
    drafter's own prefill of the prompt, which comes before its first draft step."""

    t_open: float
    t_p: float
    t_q: float
    t_c: float
    t_pre: float = 0.0

    def __post_init__(self) -> None:
        if min(self.t_open, self.t_p, self.t_q, self.t_c, self.t_pre) < 0:
            raise ValueError(f"times must be >= 0, got {self}")

    def drafted(self, gamma: int) -> float:
        """When a first block of γ drafted from the prompt is ready (t = 0: the Open leaves): T_pre + γT_p."""
        return self.t_pre + gamma * self.t_p

    def first_verdict(self, gamma: int) -> float:
        """When the verdict on a first block of γ drafted from the prompt while the Open travels is back
        (t = 0: the Open leaves): the verifier has prefilled at t_open − T_c, the block reaches it at
        T_pre + γT_p + T_c, and its verdict takes T_q + T_c more."""
        return self.t_q + self.t_c + max(self.t_open - self.t_c, self.drafted(gamma) + self.t_c)

    @property
    def cloud_first_token(self) -> float:
        """Cloud-only decoding's first token: the Open's round trip, then a Generate's, 2T_c + T_q."""
        return self.t_open + 2 * self.t_c + self.t_q


def first_block_gamma(alpha: float, times: OpenTimes, gamma_max: int) -> int:
    """γ₀ of the first block, drafted from the prompt while the Open travels and is prefilled.

    Drafting it costs T_pre + γ₀·T_p (the drafter's prefill of the prompt, then γ₀ steps), hidden by the
    Open's travel and prefill as long as T_pre + γ₀T_p ≤ t_open − 2T_c; beyond, each draft step delays
    the first verdict by T_p. Within T_pre + γ₀T_p ≤ t_open the first verdict
    (``OpenTimes.first_verdict``) is never later than cloud-only decoding's first token
    (``OpenTimes.cloud_first_token``: t_open + 2T_c + T_q); among those γ (1 ≤ γ ≤ ``gamma_max``) γ₀
    maximises the first round's rate τ(α, γ) / first_verdict(γ), the smallest on a tie. A γ of 1 when
    even one step does not fit: the block still saves the round trip that drafting after ``Opened``
    would cost."""
    if gamma_max < 1:
        raise ValueError(f"need gamma_max >= 1, got {gamma_max}")
    fits = [g for g in range(1, gamma_max + 1) if times.drafted(g) <= times.t_open] or [1]
    return max(fits, key=lambda g: (expected_round_tokens(alpha, g) / max(times.first_verdict(g), 1e-9), -g))


def pipelined_gamma(alpha: float, t_p: float, t_q: float, t_rtt: float, gamma_max: int,
                    t_rtt_token: float = 0.0) -> int:
    """γ of PicoSpec's pipeline: the γ (1 ≤ γ ≤ ``gamma_max``) that maximises τ(α, γ) / E[T_async] (eqs.
    8-9 with T_draft = γT_p and T_RTT = ``t_rtt`` + γ·``t_rtt_token``, the block's transmission growing
    with γ), the smallest on a tie. The serial optimum (ODLD) prices a round at γT_p + T_RTT + T_q;
    in the pipeline the next block is drafted while this one is verified, so after a fully accepted
    block a round costs max(γT_p, T_q + 2T_c), and a γ with γT_p > T_q + 2T_c makes the pipeline
    draft-bound: a γ policy of a pipelined mode asks this one."""
    if gamma_max < 1:
        raise ValueError(f"need gamma_max >= 1, got {gamma_max}")

    def rate(gamma: int) -> float:
        times = PipelineTimes(gamma * t_p, t_rtt + gamma * t_rtt_token, t_q)
        return expected_round_tokens(alpha, gamma) / max(async_cycle(alpha, gamma, times), 1e-12)

    return max(range(1, gamma_max + 1), key=lambda g: (rate(g), -g))
