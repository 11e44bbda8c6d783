"""Sparse draft and target distributions (TK-SLT, DSSD, PicoSpec).

Legend: q — draft distribution; p — target distribution; K — entries kept; V — vocabulary size;
TV(a, b) = ½ Σ |a − b| — total variation distance.

TK-SLT (Solution 1): the drafter applies softmax to its K largest logits only and samples from that
renormalised distribution, so transmitting K ids and K float32 values loses nothing: the q the
verifier reconstructs is exactly the q the token was drawn from. (Sending the values at lower
precision would not be exact: the rounded values no longer sum to one, and renormalising them on
both sides reproduces q only if both sides round and sum identically; float32 keeps it simple.)
Pruning the *target* distribution (PicoSpec's top-K downlink) is different: the device then
resamples from a distribution that is not p, so that option is lossy and its TV error is measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DraftDistribution:
    """How the drafter turns softmax(z/T) into the q it samples from and sends.

    top_k: keep the K largest probabilities and renormalise (0: the full distribution).
    """

    top_k: int = 0

    def __post_init__(self) -> None:
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")

    @property
    def sparse(self) -> bool:
        return self.top_k > 0

    def apply(self, probs: torch.Tensor) -> torch.Tensor:
        """probs (V,) → the exact q (V,) float32 to sample from: its top K, renormalised."""
        if not self.sparse or self.top_k >= probs.shape[0]:
            return probs
        values, ids = torch.topk(probs.float(), self.top_k)
        return torch.zeros_like(probs, dtype=torch.float32).scatter_(0, ids, values / values.sum())


def to_sparse(q: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(γ, V) distributions with at most K non-zeros each → ids (γ, K) int32, values (γ, K) float32.

    Lossless for a q made by ``DraftDistribution(k).apply``; rows with fewer non-zeros are padded
    with zero-valued entries.
    """
    values, ids = torch.topk(q.float(), min(k, q.shape[-1]), dim=-1)
    return ids.to(torch.int32), values


def densify(ids: torch.Tensor, values: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """ids, values (γ, K) → (γ, V) float32 with zeros elsewhere. Raises ValueError on bad ids."""
    if ids.shape != values.shape or ids.ndim != 2:
        raise ValueError(f"ids {tuple(ids.shape)} and values {tuple(values.shape)} must be the same (γ, K)")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"sparse ids must be in [0, {vocab_size})")
    out = torch.zeros(ids.shape[0], vocab_size, dtype=torch.float32)
    return out.scatter_(1, ids.long(), values.float())


def prune_topk(p: torch.Tensor, k: int) -> tuple[torch.Tensor, float]:
    """LOSSY: keep p's K largest entries, renormalised: (V,) → ((V,), TV(p, pruned)).

    With kept mass m the distance is TV = 1 − m.
    """
    values, ids = torch.topk(p.double(), min(k, p.shape[0]))
    mass = float(values.sum())
    pruned = torch.zeros_like(p, dtype=torch.float64).scatter_(0, ids, values / mass)
    return pruned.to(p.dtype), 1.0 - mass


def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
    """½ Σ |a/Σa − b/Σb| over the last axis (normalising both)."""
    a, b = a.double(), b.double()
    return 0.5 * float((a / a.sum() - b / b.sum()).abs().sum())
