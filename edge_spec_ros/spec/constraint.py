"""Grammar-constrained speculative decoding: masks from a token-level automaton, and why the rejection
sampler stays exact.

Legend (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"; Chen et al.
2023): γ — draft length; x_{t+1..t+γ} — draft tokens; p_i, q_i — target and draft distributions at
position t+i; s_i — the automaton's state after the committed prefix and x_{t+1..t+i-1};
m(s) ∈ {0,1}^V — the tokens allowed in state s; norm(v) = v / Σv; δ — accepted draft tokens.

The constrained verifier is the distribution p̃_i = norm(p_i · m(s_i)): the target's, restricted to what
the grammar allows and renormalised (at T = 0: argmax over the allowed tokens). Both sides mask with
the same state at every position of a block: the drafter draws x_{t+i} ~ q̃_i = norm(q_i · m(s_i)) and
sends that q̃; the verifier advances its automaton along the drafted tokens, so row i of its logits is
masked by the same s_i, and verifies with p̃_i against q̃_i. Speculative sampling (Leviathan et al.,
Theorem 1 and its Appendix A.1) is exact for ANY pair of distributions (p, q) over one vocabulary
where q is the distribution the draft was drawn from: accepting x with probability min(1, p̃(x)/q̃(x))
and resampling from norm(max(0, p̃ − q̃)) draws exactly from p̃. Masking changes which (p, q) pair the
theorem is applied to, nothing in its proof; so each emitted token follows p̃_i, which is the
constrained verifier's next-token distribution given the same prefix, and by induction over positions
the sequence follows the constrained verifier. The bonus token after γ accepted drafts is drawn from
p̃_{γ+1} (state s_{γ+1}). Where q̃_i(x) > 0 the token is allowed (m(s_i)(x) = 1), so the automaton can
always advance along a draft; a token it forbids never comes from an honest drafter, and the verifier
refuses it rather than verify a block whose later rows have no defined state.

What must NOT be done (the negative controls of test/edge/test_constrained_distributions.py):
masking one side only — the verifier's p̃ against an unmasked q (the theorem still holds, so the output
is the constrained verifier's, but tokens the grammar forbids are drafted and refused) or the drafter's
q̃ against an unmasked p: the output then follows p, not p̃; and masking after sampling (drawing from
p, then replacing a forbidden token): that is not norm(p · m) but a distribution that moves the
forbidden mass onto particular tokens.

After the automaton accepts a stop token (the end of the reply) it is terminated: its mask is then the
stop tokens alone, on both sides, so a block drafted past the end stays well defined; the decision
stops at the first stop token anyway.

Pure: torch only. The automaton behind a ``ConstraintState`` is a library's (``models.grammar``:
xgrammar's matcher) or any object with ``allowed``, ``accept``, ``fork`` and ``terminated``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch


class Automaton(Protocol):
    """A token-level automaton at one state (a constrained-decoding library's matcher)."""

    def allowed(self) -> torch.Tensor:
        """(V,) bool: the tokens the state allows."""

    def accept(self, token: int) -> bool:
        """Advance by ``token``; False (and no change) when the state does not allow it."""

    def fork(self) -> "Automaton":
        """An independent copy at the same state."""

    @property
    def terminated(self) -> bool:
        """A stop token has been accepted: the reply is over."""


class ForbiddenToken(ValueError):
    """A token the automaton's state does not allow; ``index``: its place in the tokens given."""

    def __init__(self, token: int, index: int) -> None:
        super().__init__(f"token {token} at offset {index} is not allowed by the grammar there")
        self.token, self.index = token, index


class ConstraintState:
    """The automaton's state along one decision, with the masking rules both sides share.

    ``extra``: (V,) bool the state's mask is further restricted to (the tokenizer's text tokens and stop
    tokens: no special token is ever drafted); ``stop_tokens``: the mask once the automaton terminated."""

    def __init__(self, automaton: Automaton, extra: torch.Tensor, stop_tokens: Sequence[int]) -> None:
        self._automaton = automaton
        self._extra = extra
        self._stop = tuple(int(t) for t in stop_tokens)

    @property
    def vocab_size(self) -> int:
        return int(self._extra.shape[0])

    def mask(self) -> torch.Tensor:
        """m(s): (V,) bool."""
        return torch.from_numpy(self._mask())

    def _mask(self) -> np.ndarray:
        # numpy for the (V,) bool work: at V = 151,657 a torch op costs 1-20 ms on a loaded 2-core CPU
        if self._automaton.terminated:
            out = np.zeros(self.vocab_size, dtype=bool)
            out[list(self._stop)] = True
            return out
        return self._automaton.allowed().numpy() & self._extra.numpy()

    def advance(self, token: int, index: int = 0) -> None:
        """s ← s·token; ``ForbiddenToken`` (and no change) when m(s) does not allow it."""
        token = int(token)
        if self._automaton.terminated:
            if token not in self._stop:
                raise ForbiddenToken(token, index)
            return
        if not (0 <= token < self.vocab_size and bool(self._extra[token])) or not self._automaton.accept(token):
            raise ForbiddenToken(token, index)

    def extend(self, tokens: Sequence[int]) -> None:
        """Advance along ``tokens`` (committed ones: a verdict's, a resampled token, cloud-only tokens)."""
        for i, token in enumerate(tokens):
            self.advance(token, i)

    def fork(self) -> "ConstraintState":
        return ConstraintState(self._automaton.fork(), self._extra, self._stop)

    def masks_along(self, tokens: Sequence[int]) -> torch.Tensor:
        """(γ+1, V) bool for a block of γ drafted ``tokens``: row i is m(s_i), the state after the
        tokens before it (row γ: the bonus token's). This state is left unchanged (a fork advances);
        ``ForbiddenToken`` names the first drafted token its row does not allow."""
        state = self.fork()
        rows = []
        for i, token in enumerate(int(t) for t in tokens):
            row = state._mask()
            if not (0 <= token < self.vocab_size and row[token]):
                raise ForbiddenToken(token, i)
            rows.append(row)
            state.advance(token, i)
        rows.append(state._mask())
        return torch.from_numpy(np.stack(rows))


def mask_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Logits (..., V) with −inf outside ``mask`` (..., V) bool: softmax then gives norm(p · m) at any
    temperature, and argmax the best allowed token."""
    return logits.float().masked_fill(~mask, -math.inf)


def masked_probs(p: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """norm(p · m) over the last axis: (..., V) probabilities → (..., V) float64."""
    kept = p.double() * mask
    return kept / kept.sum(-1, keepdim=True)
