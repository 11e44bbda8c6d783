"""Explicit, position-indexed randomness and inverse-CDF sampling.

Legend: p — the target (verifier) distribution, q — the draft distribution, T — temperature,
u — a uniform draw in [0, 1).

Every random draw is indexed by (seed, stream, absolute token position) instead of being taken from
a running generator. The draft token at position j therefore comes out the same whether it is
drafted after the final verdict (SD), pre-drafted from an early exit in another thread (FSD),
or drafted ahead in a pipeline: modes that decode the same sequence in the same blocks consume the
same randomness, so the same seed gives the same output in every mode. The blocks matter: where a
block ends, the bonus token is drawn from p (stream TARGET), where a longer block would have drafted
and verified a token there (DRAFT, ACCEPT, RESIDUAL); PicoSpec's blocks cut short at their verdict
move those ends with timing (``DecodeStats.block_gammas`` records them). Draws are independent across
positions and streams, which is all the acceptance proofs need.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import torch


class Stream(IntEnum):
    """Independent random streams, one per kind of decision."""

    DRAFT = 0  # the drafter samples x_j ~ q_j
    ACCEPT = 1  # accept x_j iff u < p_j(x_j) / q_j(x_j)
    RESIDUAL = 2  # on rejection, resample from norm(max(0, p_j - q_j))
    TARGET = 3  # bonus token, or autoregressive decoding, from p_j


@dataclass(frozen=True)
class SamplingConfig:
    """T = 0 is greedy decoding; T > 0 samples from softmax(z / T)."""

    temperature: float = 0.0

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0 and np.isfinite(self.temperature)):
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class PositionalRNG:
    """Counter-based uniforms u(seed, stream, position) ∈ [0, 1)."""

    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.seed < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {self.seed}")

    def uniform(self, stream: Stream, position: int) -> float:
        if not 0 <= position < 2**32:
            raise ValueError(f"position must be in [0, 2**32), got {position}")
        # Fixed-width words: numpy splits large integers into several words, which could make two
        # different (seed, stream, position) triples collide.
        words = [self.seed & 0xFFFFFFFF, self.seed >> 32, int(stream), position]
        return float(np.random.default_rng(words).random())


def probs_from_logits(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """softmax(z / T) in float32 over the last axis: (..., V) → (..., V). Greedy gives one-hot argmax."""
    logits = logits.float()
    if sampling.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return torch.softmax(logits / sampling.temperature, dim=-1)


def sample(probs: torch.Tensor, u: float) -> int:
    """Inverse-CDF sample from an unnormalised distribution probs: (V,) with uniform u.

    Deterministic in (probs, u): the same q and u give the same token on every machine thread.
    """
    cdf = torch.cumsum(probs.double(), dim=0)  # (V,)
    total = cdf[-1].item()
    if not total > 0.0:
        raise ValueError("cannot sample from a distribution with no mass")
    index = int(torch.searchsorted(cdf, torch.tensor([u * total], dtype=torch.float64), right=True).item())
    # Guard the u·total == cdf[-1] edge and skip zero-probability tokens at the top end.
    index = min(index, probs.shape[0] - 1)
    while probs[index] <= 0.0:
        index -= 1
    return index


def choose(logits: torch.Tensor, sampling: SamplingConfig, rng: PositionalRNG, stream: Stream,
           position: int, transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[int, torch.Tensor]:
    """Pick the token at ``position`` from logits (V,): argmax when greedy, else x ~ softmax(z/T),
    reshaped first by ``transform`` when given (e.g. a drafter's top-K, see spec/sparse.py).

    Returns the token and the exact distribution it was drawn from (V,), float32.
    """
    probs = probs_from_logits(logits, sampling)
    if sampling.greedy:
        return int(logits.argmax().item()), probs
    if transform is not None:
        probs = transform(probs)
    return sample(probs, rng.uniform(stream, position)), probs
