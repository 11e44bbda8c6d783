"""Early-exit verification (FSD paper, Section 2 eq. 4 and Section 3 eq. 5).

Legend: l — exit layer (1..L, L = final); z^(l) — logits of exit l; S^(l) = max softmax(z^(l)) — the
exit's confidence (eq. 4); δ^(l) — draft tokens accepted by exit l; x^(l)_{t:t+δ^(l)+1} — its output.

Every exit verifies the same draft with the same random draws as the final exit, so an exit whose
distributions agree with the final one returns the same verdict (a pre-draft cache hit). Only the
final exit decides what is emitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.spec.verify import Verdict, verify


def exit_confidence(logits: torch.Tensor) -> torch.Tensor:
    """S = max softmax(z) over the last axis (eq. 4): (..., V) → (...)."""
    return torch.softmax(logits.float(), dim=-1).amax(-1)


@dataclass(frozen=True)
class ExitVerdict:
    """One exit's verification result, as streamed to the robot."""

    layer: int
    verdict: Verdict
    confidence: float  # S^(l) at the position of the token the exit generated itself
    is_final: bool


def verify_exit(layer: int, logits: torch.Tensor, draft: Sequence[int], q: torch.Tensor | None,
                sampling: SamplingConfig, rng: PositionalRNG, position: int, is_final: bool) -> ExitVerdict:
    """Eq. 5 for one exit: logits (γ+1, V) of exit ``layer`` over the draft block.

    The paper ranks an exit's output by "the confidence score of the generated token": S^(l) at the
    position of the token the exit generated itself, row δ^(l) of its logits.
    """
    verdict = verify(draft, logits, q, sampling, rng, position)
    confidence = float(exit_confidence(logits[verdict.accepted]))
    return ExitVerdict(layer, verdict, confidence, is_final)
