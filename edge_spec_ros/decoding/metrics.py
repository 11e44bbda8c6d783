"""Decoding statistics shared by every decoder (FSD paper, Table 3 notation).

τ — tokens emitted per draft–verify round; α — fraction of drafted tokens accepted; γ — draft length.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class DecodeStats:
    """Counters and timings of one decode; derived figures are properties."""

    mode: str
    tokens: int = 0  # n: tokens emitted
    rounds: int = 0  # draft–verify rounds (AR: target forward passes)
    drafted: int = 0  # draft tokens sent for verification
    accepted: int = 0  # draft tokens accepted (Σ δ)
    wall_s: float = 0.0
    ttft_s: float = 0.0  # time to first emitted token
    prefill_s: float = 0.0
    draft_s: float = 0.0  # Σ drafting time (γ·T_p per round)
    verify_s: float = 0.0  # Σ verification time (T_q per round)

    @property
    def tau(self) -> float:
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def alpha(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def per_token_s(self) -> float:
        return self.wall_s / self.tokens if self.tokens else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "tau": self.tau, "alpha": self.alpha, "per_token_s": self.per_token_s}
