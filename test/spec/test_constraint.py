"""spec.constraint: masks along a drafted block from one automaton state, and the rejection sampler over
masked p and q drawing exactly norm(p · m) (chi-square over hand-built distributions), with the two
negative controls: a mask on one side only, and a mask applied after sampling."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from edge_spec_ros.spec.constraint import ConstraintState, ForbiddenToken, mask_logits, masked_probs
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig, Stream, probs_from_logits, sample
from edge_spec_ros.spec.verify import verify_greedy, verify_sampled

V = 6
STOP = 5


class TableAutomaton:
    """A DFA over token ids: ``table[state]`` maps each allowed token to the next state; state -1 is
    terminated (a stop token was accepted)."""

    def __init__(self, table: dict[int, dict[int, int]], state: int = 0) -> None:
        self.table, self.state = table, state

    def allowed(self) -> torch.Tensor:
        out = torch.zeros(V, dtype=torch.bool)
        out[list(self.table[self.state])] = True
        return out

    def accept(self, token: int) -> bool:
        if token not in self.table[self.state]:
            return False
        self.state = self.table[self.state][token]
        return True

    def fork(self) -> "TableAutomaton":
        return TableAutomaton(self.table, self.state)

    @property
    def terminated(self) -> bool:
        return self.state == -1


# 0 --{0,1,2}--> 1 --{1,3}--> 2 --{STOP}--> end; 2 --{4}--> 0
TABLE = {0: {0: 1, 1: 1, 2: 1}, 1: {1: 2, 3: 2}, 2: {STOP: -1, 4: 0}}


def state() -> ConstraintState:
    return ConstraintState(TableAutomaton(TABLE), torch.ones(V, dtype=torch.bool), (STOP,))


def test_masks_along_a_block_come_from_the_state_after_the_tokens_before_each_row():
    s = state()
    masks = s.masks_along([2, 3, 4])
    assert masks.int().tolist() == [[1, 1, 1, 0, 0, 0], [0, 1, 0, 1, 0, 0], [0, 0, 0, 0, 1, 1], [1, 1, 1, 0, 0, 0]]
    assert s.mask().int().tolist() == [1, 1, 1, 0, 0, 0]  # the block's masks leave the state where it was


def test_a_forbidden_draft_token_is_named_with_its_offset_and_changes_nothing():
    s = state()
    with pytest.raises(ForbiddenToken) as caught:
        s.masks_along([0, 2])
    assert (caught.value.token, caught.value.index) == (2, 1)
    with pytest.raises(ForbiddenToken):
        s.masks_along([V + 3])
    with pytest.raises(ForbiddenToken):
        s.advance(4)
    s.extend([0, 1])
    assert s.mask().int().tolist() == [0, 0, 0, 0, 1, 1]


def test_after_the_stop_token_only_stop_tokens_are_allowed():
    s = state()
    s.extend([0, 1, STOP])
    assert s.mask().nonzero().flatten().tolist() == [STOP]
    s.advance(STOP)  # a block drafted past the end stays well defined
    with pytest.raises(ForbiddenToken):
        s.advance(0)


def test_the_extra_mask_removes_tokens_the_automaton_allows():
    s = ConstraintState(TableAutomaton(TABLE), torch.tensor([True, False, True, True, True, True]), (STOP,))
    assert s.mask().int().tolist() == [1, 0, 1, 0, 0, 0]
    with pytest.raises(ForbiddenToken):
        s.advance(1)


def test_masked_logits_give_the_renormalised_distribution_and_the_best_allowed_token():
    logits = torch.tensor([[3.0, 0.5, -1.0, 2.0, 0.0, 1.0]])
    mask = torch.tensor([[False, True, True, False, True, False]])
    for t in (0.5, 1.0, 2.0):
        p = probs_from_logits(logits, SamplingConfig(t)).double()
        got = probs_from_logits(mask_logits(logits, mask), SamplingConfig(t)).double()
        assert torch.allclose(got, masked_probs(p, mask), atol=1e-6)
    assert verify_greedy([4], mask_logits(logits.repeat(2, 1), mask.repeat(2, 1))).tokens == (1,)


P = torch.tensor([[0.05, 0.30, 0.10, 0.25, 0.20, 0.10], [0.3, 0.1, 0.2, 0.1, 0.2, 0.1]])  # target rows 1, 2
Q = torch.tensor([0.40, 0.05, 0.25, 0.10, 0.10, 0.10])  # the drafter's first row
M = torch.tensor([True, True, True, False, False, False])  # m(s_1): tokens 0, 1, 2


def first_token(seed: int, mask_p: bool = True, mask_q: bool = True, after: bool = False) -> int:
    """One round of γ = 1 from state s_1, the emitted first token. ``after``: the negative control that
    samples from unmasked p, q and then replaces a forbidden emitted token by the likeliest allowed one."""
    rng = PositionalRNG(seed)
    q = masked_probs(Q, M).float() if mask_q else Q
    x = sample(q, rng.uniform(Stream.DRAFT, 0))
    p = torch.stack([masked_probs(P[0], M).float() if mask_p else P[0], P[1]])
    y = verify_sampled([x], p, q[None], rng, 0).tokens[0]
    if after and not M[y]:
        y = int(torch.where(M, P[0], torch.zeros_like(P[0])).argmax())
    return y


def pvalue(tokens: list[int]) -> float:
    counts = np.bincount(tokens, minlength=V)[:3]
    if len(set(tokens) - {0, 1, 2}):
        return 0.0  # a forbidden token came out
    expected = masked_probs(P[0], M).numpy()[:3] * len(tokens)
    return float(chisquare(counts, expected).pvalue)


N = 4000


def test_the_rejection_sampler_over_masked_p_and_q_draws_norm_p_m():
    assert pvalue([first_token(seed) for seed in range(N)]) > 1e-3


def test_negative_control_q_masked_p_not():
    assert pvalue([first_token(seed, mask_p=False) for seed in range(N)]) < 1e-6


def test_negative_control_mask_applied_after_sampling():
    assert pvalue([first_token(seed, mask_p=False, mask_q=False, after=True) for seed in range(N)]) < 1e-6
