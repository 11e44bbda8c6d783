"""Sparse draft and target distributions (TK-SLT, DSSD, PicoSpec).

Legend: q — draft distribution; p — target distribution; K — entries kept; V — vocabulary size;
TV(a, b) = ½ Σ |a − b| — total variation distance.

TK-SLT (Solution 1): the drafter applies softmax to its K largest logits only and samples from that
renormalised distribution, so transmitting K ids and K values loses nothing: the q the verifier
reconstructs is exactly the q the token was drawn from. Quantising the K values (float16) keeps
this exactness as long as the drafter also samples from the quantised, renormalised values, which
``DraftDistribution.apply`` guarantees. Pruning the *target* distribution (PicoSpec's top-K
downlink) is different: the device then resamples from a distribution that is not p, so that
option is lossy and its TV error is measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

Q_DTYPES = {"float32": torch.float32, "float16": torch.float16}


@dataclass(frozen=True)
class DraftDistribution:
    """How the drafter turns softmax(z/T) into the q it samples from and sends.

    top_k: keep the K largest probabilities and renormalise (0: the full distribution);
    dtype: precision of the sent values; the drafter samples from exactly the rounded values.
    """

    top_k: int = 0
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.top_k < 0 or self.dtype not in Q_DTYPES:
            raise ValueError(f"top_k must be >= 0 and dtype one of {sorted(Q_DTYPES)}, got {self}")

    @property
    def sparse(self) -> bool:
        return self.top_k > 0

    def apply(self, probs: torch.Tensor) -> torch.Tensor:
        """probs (V,) → the exact q (V,) float32 to sample from: top-K, rounded to ``dtype``, renormalised."""
        if not self.sparse and self.dtype == "float32":
            return probs
        q = probs.float()
        if self.sparse and self.top_k < q.shape[0]:
            values, ids = torch.topk(q, self.top_k)
            q = torch.zeros_like(q).scatter_(0, ids, values)
        q = q.to(Q_DTYPES[self.dtype]).float()
        return q / q.sum()


def to_sparse(q: torch.Tensor, k: int, dtype: str = "float32") -> tuple[torch.Tensor, torch.Tensor]:
    """(γ, V) distributions with at most K non-zeros each → ids (γ, K) int32, values (γ, K) ``dtype``.

    Lossless for a q made by ``DraftDistribution(k, dtype).apply``; rows with fewer non-zeros are
    padded with zero-valued entries.
    """
    values, ids = torch.topk(q.float(), min(k, q.shape[-1]), dim=-1)
    return ids.to(torch.int32), values.to(Q_DTYPES[dtype])


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
