"""The robot's half of grammar-constrained decoding: the drafter's q masked by the decision's grammar.

The verifier masks p (``cloud.session``); the robot masks q with the same automaton at the same state:
the state after the decision's prompt and every token drafted or committed since (``spec.constraint``).
``DecisionMasks`` gives m(s) for any sequence that extends the prompt, caching the states it reached,
from any thread (FSD's pre-draft workers, PicoSpec's branch blocks draft concurrently); ``MaskedStack``
masks a drafter's final logits row by row with it, so ``Drafter.draft`` draws x ~ norm(q · m) (greedy:
the best allowed token) and sends that q, in every mode and from every draft source: a fresh draft,
a pre-draft, a pipelined block, a branch block. Prompt lookup's proposals (``LookupDrafter``) are cut
at the first token the grammar forbids (``AllowedProposal``).

``GrammarDrafter`` is one decoder's masked view of its drafter, kept across decisions (the pre-draft
workers keep their drafter), set to each constrained decision's masks.

Legend: m(s) — the tokens the automaton's state s allows; q — the drafter's distribution; n — prompt length.
"""

from __future__ import annotations

import copy
import threading

import torch

from edge_spec_ros.edge.draft_sources import LookupDrafter
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.spec.constraint import ConstraintState, ForbiddenToken, mask_logits

MAX_CACHED_STATES = 4096  # reached states kept per decision (a decision's drafts and pre-drafts)


class DecisionMasks:
    """m(s) after any ``seq`` that starts with the decision's prompt (``start``: its n tokens)."""

    def __init__(self, state: ConstraintState, start: int) -> None:
        self.start = start
        self._root = state
        self._states: dict[tuple[int, ...], ConstraintState] = {(): state}
        self._lock = threading.Lock()

    def state_after(self, seq: list[int]) -> ConstraintState:
        """The automaton after ``seq[n:]`` (a fork: the caller may not change the cached one)."""
        key = tuple(int(t) for t in seq[self.start:])
        with self._lock:
            cut = len(key)
            while key[:cut] not in self._states:
                cut -= 1
            state = self._states[key[:cut]].fork()
        for i in range(cut, len(key)):
            state.advance(key[i], i)  # ForbiddenToken: a sequence the grammar does not allow
            with self._lock:
                if len(self._states) >= MAX_CACHED_STATES:
                    self._states = {(): self._root}
                self._states.setdefault(key[:i + 1], state.fork())
        return state

    def mask_after(self, seq: list[int]) -> torch.Tensor:
        return self.state_after(seq).mask()

    def mask_rows(self, logits: torch.Tensor, seq: list[int], first: int) -> torch.Tensor:
        """Logits (m, V) of positions first .. first+m−1 of ``seq``, each row predicting the next token:
        rows after the prompt masked by the state after the tokens up to and including their position."""
        rows = []
        for r in range(logits.shape[0]):
            end = first + r + 1
            rows.append(logits[r] if end < self.start else mask_logits(logits[r], self.mask_after(seq[:end])))
        return torch.stack(rows)


class MaskedStack:
    """A drafter's decoder stack whose final logits are masked by ``masks`` (None: passed through)."""

    def __init__(self, stack) -> None:
        self._stack = stack
        self.masks: DecisionMasks | None = None

    def final_logits(self, kv, seq: list[int], first: int) -> torch.Tensor:
        logits = self._stack.final_logits(kv, seq, first)
        return logits if self.masks is None else self.masks.mask_rows(logits, seq, first)

    def __getattr__(self, name: str):
        return getattr(self._stack, name)


class AllowedProposal:
    """A model-free proposer (prompt lookup, retrieval) cut at the first token the grammar forbids."""

    def __init__(self, proposer, stack: MaskedStack) -> None:
        self.proposer, self.stack = proposer, stack

    def propose(self, context, gamma: int) -> tuple[int, ...]:
        found = self.proposer.propose(context, gamma)
        if self.stack.masks is None or not found:
            return found
        state = self.stack.masks.state_after(list(context))
        for i, token in enumerate(found):
            try:
                state.advance(token)
            except ForbiddenToken:
                return tuple(found[:i])
        return tuple(found)


class GrammarDrafter:
    """One decoder's drafter, masked: ``drafter`` is a copy of the decoder's whose stack masks its logits
    by the decision set with ``use`` (``LookupDrafter``: its model's, and its proposals cut)."""

    def __init__(self, drafter: Drafter) -> None:
        self.source = drafter
        self.stack = MaskedStack(drafter.stack)
        self.drafter = copy.copy(drafter)
        if isinstance(drafter, LookupDrafter):
            if drafter.model is not None:
                self.drafter.model = copy.copy(drafter.model)
                self.drafter.model.stack = self.stack
            self.drafter.stack = self.stack
            self.drafter.lookup = AllowedProposal(drafter.lookup, self.stack)
        else:
            self.drafter.stack = self.stack

    def use(self, masks: DecisionMasks | None) -> None:
        self.stack.masks = masks
