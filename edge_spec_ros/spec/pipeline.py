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
