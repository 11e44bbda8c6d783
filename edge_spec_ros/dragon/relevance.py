"""Dynamic relevance R(d, x_<t) for DRAGON's weights (Liu et al. 2025, §4.1 "Dynamic weights").

Legend: D^s — the documents side s retrieved once for the query x_<M; R(d, x_<t) — their relevance to
the query plus the text generated so far; ω_t(d) ∝ exp R(d, x_<t) (eq. 2); t — generated position.

The paper retrieves D^s once (so the documents' KV caches stay valid) and re-scores the same documents
during decoding with a cross-encoder. Departure: here the re-scorer is the side's own BM25 index
(dragon/stores.py) applied to query + decoded continuation, scaled by ``scale`` before exp (BM25 scores
are unbounded, a cross-encoder's logits are not comparable either; the scale is a knob, not the
paper's). The scores are a pure function of the context, so the speculative decoder and DRDG/TW see
the same weights at the same position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch


class ScoredStore(Protocol):
    def scores(self, query: str, doc_ids: Sequence[str]) -> np.ndarray: ...


@dataclass
class DynamicRelevance:
    """context → R(d, x_<t) (n,) for the fixed documents ``doc_ids`` of one side.

    decode: generated token ids → text (the side's tokenizer); every: re-estimate every this many
    generated tokens (1 = every step), holding the last estimate in between.
    """

    store: ScoredStore
    doc_ids: tuple[str, ...]
    query: str
    prompt_length: int
    decode: Callable[[Sequence[int]], str]
    scale: float = 1.0
    every: int = 1

    def __call__(self, context: Sequence[int]) -> torch.Tensor:
        generated = list(context[self.prompt_length:])
        keep = (len(generated) // self.every) * self.every
        text = self.query + " " + self.decode(generated[:keep]) if keep else self.query
        return torch.as_tensor(self.scale * self.store.scores(text, self.doc_ids), dtype=torch.float64)


def static_relevance(scores: Sequence[float], scale: float = 1.0) -> Callable[[Sequence[int]], torch.Tensor]:
    """Static weights (REPLUG-style, the paper's baseline choice): the retrieval scores, every step."""
    fixed = torch.as_tensor([scale * s for s in scores], dtype=torch.float64)
    return lambda context: fixed
