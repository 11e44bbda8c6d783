"""A drafter with fewer ids than the target (V_q < V_p): q padded with zeros where it meets p keeps
speculative sampling exact (draw for draw, and in distribution over the ids only the target has);
V_q > V_p and drafted ids ≥ V_p are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from edge_spec_ros.spec.sampling import PositionalRNG
from edge_spec_ros.spec.sparse import DraftDistribution, densify, to_sparse
from edge_spec_ros.spec.verify import split_verify_device, split_verify_server, verify_sampled
from edge_spec_ros.spec.vocab import draft_in_vocab

V_P, V_Q, GAMMA = 8, 6, 2
N = 2000  # verifications per chi-square test


def distributions(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """p (γ+1, V_p) with a third of its mass on the ids the drafter lacks; q (γ, V_q) unlike p."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(GAMMA + 1, V_P, generator=g, dtype=torch.float64)
    p[:, V_Q:] *= 2.0
    q = torch.rand(GAMMA, V_Q, generator=g, dtype=torch.float64) ** 3
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def drafted(q: torch.Tensor, rng: PositionalRNG) -> list[int]:
    """x_{t+i} ~ q_i (one draw per row, from ``rng``'s own stream so the verification draws are untouched)."""
    return [int(torch.multinomial(row, 1, generator=torch.Generator().manual_seed(rng.seed * 7 + i)))
            for i, row in enumerate(q)]


def test_equal_sizes_pass_q_through_without_a_copy():
    q = torch.rand(GAMMA, V_P)
    assert draft_in_vocab(q, V_P, [0, V_P - 1]) is q
    assert draft_in_vocab(None, V_P, [1]) is None


def test_a_smaller_draft_vocabulary_is_padded_with_zeros():
    q = torch.rand(GAMMA, V_Q)
    padded = draft_in_vocab(q, V_P)
    assert padded.shape == (GAMMA, V_P) and torch.equal(padded[:, :V_Q], q) and not padded[:, V_Q:].any()
    assert torch.equal(draft_in_vocab(q[0], V_P), padded[0])


def test_a_larger_draft_vocabulary_and_ids_past_the_target_are_refused():
    with pytest.raises(ValueError, match=r"drafter's vocabulary \(9 ids\) is larger than the target's \(8\)"):
        draft_in_vocab(torch.rand(GAMMA, V_P + 1), V_P)
    with pytest.raises(ValueError, match=r"outside the target's vocabulary \[0, 8\): \[8\]"):
        draft_in_vocab(torch.rand(GAMMA, V_Q), V_P, [1, V_P])
    p, q = distributions()
    with pytest.raises(ValueError, match="larger than the target's"):
        verify_sampled([0, 1], p, torch.rand(GAMMA, V_P + 2), PositionalRNG(0), 4)
    with pytest.raises(ValueError, match="outside the target's vocabulary"):
        verify_sampled([0, V_P], p, q, PositionalRNG(0), 4)
    with pytest.raises(ValueError, match="outside the target's vocabulary"):
        split_verify_server([V_P + 3, 1], p, torch.ones(GAMMA), PositionalRNG(0), 4)
    verdict = split_verify_server([0, 1], p, torch.full((GAMMA,), 1e9), PositionalRNG(0), 4)  # rejects x_{t+1}
    with pytest.raises(ValueError, match="larger than the target's"):
        split_verify_device(verdict, torch.rand(GAMMA, V_P + 1), PositionalRNG(0), 4)


def test_narrow_q_verifies_draw_for_draw_as_its_zero_padded_form():
    """Dense (SD), sparse (TK-SLT, rebuilt over V_p) and split (DSSD: p_δ of V_p meets the robot's q of V_q)
    all draw what verification with q padded by hand draws."""
    p, q = distributions(1)
    top3 = DraftDistribution(3)
    sparse_q = torch.stack([top3.apply(row.float()) for row in q])
    resampled = 0
    for seed in range(200):
        for narrow in (q, sparse_q):
            tokens = drafted(narrow, PositionalRNG(seed))
            padded = torch.cat([narrow, torch.zeros(GAMMA, V_P - V_Q, dtype=narrow.dtype)], -1)
            expected = verify_sampled(tokens, p, padded, PositionalRNG(seed), 4)
            assert verify_sampled(tokens, p, narrow, PositionalRNG(seed), 4) == expected
            if narrow is sparse_q:  # TK-SLT's K ids and values, rebuilt over the target's V_p ids
                ids, values = to_sparse(narrow, 3)
                assert verify_sampled(tokens, p, densify(ids, values, V_P), PositionalRNG(seed), 4) == expected
            rng = PositionalRNG(seed)
            half = split_verify_server(tokens, p, narrow[torch.arange(GAMMA), tokens], rng, 4)
            assert split_verify_device(half, narrow, rng, 4) == expected
            resampled += expected.accepted < GAMMA and expected.next_token >= V_Q
    assert resampled > 20  # residuals landed on the ids only the target has


def first_token_pvalue(verify, p: torch.Tensor, q: torch.Tensor) -> float:
    counts = np.zeros(V_P)
    for seed in range(N):
        counts[verify(drafted(q, PositionalRNG(seed)), PositionalRNG(seed)).tokens[0]] += 1
    return float(chisquare(counts, p[0].numpy() * N).pvalue)


def test_the_first_token_follows_p_over_every_target_id():
    """x_{t+1} (accepted draft or residual draw) ~ p_1 over all V_p ids; negative control: verifying
    against p cut to the drafter's V_q ids (renormalised) never emits the target's extra ids and fails."""
    p, q = distributions(2)
    assert first_token_pvalue(lambda t, rng: verify_sampled(t, p, q, rng, 4), p, q) > 1e-3

    def split(tokens, rng):
        half = split_verify_server(tokens, p, q[torch.arange(GAMMA), tokens], rng, 4)
        return split_verify_device(half, q, rng, 4)

    assert first_token_pvalue(split, p, q) > 1e-3
    cut = p[:, :V_Q] / p[:, :V_Q].sum(-1, keepdim=True)
    assert first_token_pvalue(lambda t, rng: verify_sampled(t, cut, q, rng, 4), p, q) < 1e-6
