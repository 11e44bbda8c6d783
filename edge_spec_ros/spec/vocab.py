"""A drafter whose vocabulary is smaller than the target's (Qwen2-VL-2B: V_q = 151,936 rows; -7B:
V_p = 152,064; one tokenizer of 151,657 ids, the rest padding rows).

Legend (Leviathan et al. 2023): p — target distribution over V_p ids; q — draft distribution over
V_q ids; γ — draft length; x_{t+i} — the draft tokens, drawn from q_i.

Padding q with zeros up to V_p keeps speculative sampling exact: the drafter can never draw an id
≥ V_q, so q_i(x) = 0 there is its true probability. Acceptance reads min(1, p_i(x_{t+i}) / q_i(x_{t+i}))
at drafted ids only (all < V_q), and the residual norm(max(0, p_i − q_i)) over all V_p ids gives the
extra ids their whole target mass p_i(x): together the output is distributed as p. The other way
round (V_q > V_p) the drafter could draw an id the target cannot score, and a drafted id ≥ V_p has no
p at all: both are refused.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def draft_in_vocab(q: torch.Tensor | None, vocab_size: int, draft: Sequence[int] = ()) -> torch.Tensor | None:
    """q (..., V_q) over the target's V_p = ``vocab_size`` ids: q itself when V_q = V_p (no copy),
    padded with zeros on the last axis when V_q < V_p (None stays None: only ``draft`` is checked).
    ValueError when V_q > V_p or a drafted id of ``draft`` lies outside [0, V_p)."""
    width = vocab_size if q is None else q.shape[-1]
    if width > vocab_size:
        raise ValueError(f"the drafter's vocabulary ({width} ids) is larger than the target's ({vocab_size}): "
                         "it could draft ids the target cannot score")
    if any(not 0 <= int(x) < vocab_size for x in draft):
        raise ValueError(f"a drafted id is outside the target's vocabulary [0, {vocab_size}): "
                         f"{[int(x) for x in draft if not 0 <= int(x) < vocab_size][:4]}")
    return q if width == vocab_size else torch.nn.functional.pad(q, (0, vocab_size - width))
