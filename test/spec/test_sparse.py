"""Sparse distributions: TK-SLT's top-K q is lossless on the wire; DSSD's split verification draws
exactly what whole verification draws; pruning the target is lossy and its TV is 1 − kept mass."""

from __future__ import annotations

import pytest
import torch

from edge_spec_ros.spec.sampling import PositionalRNG, Stream, sample
from edge_spec_ros.spec.sparse import DraftDistribution, densify, prune_topk, to_sparse, total_variation
from edge_spec_ros.spec.verify import split_verify_device, split_verify_server, verify_sampled


def random_probs(rows: int, vocab: int, seed: int, sharp: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, vocab, generator=g) * sharp, -1)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_draft_distribution_is_a_distribution_on_the_top_k(k):
    """apply(): exactly K non-zeros, on the K largest entries, proportional to p there, summing to 1."""
    probs = random_probs(1, 50, 0)[0]
    q = DraftDistribution(k).apply(probs)
    top = torch.topk(probs, k)
    assert set((q > 0).nonzero().flatten().tolist()) == set(top.indices.tolist())
    torch.testing.assert_close(q[top.indices], top.values / top.values.sum())
    assert q.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert DraftDistribution(0).apply(probs) is probs  # no top-K: the full distribution


def test_sparse_round_trip_is_lossless_for_top_k_q():
    """to_sparse → densify gives back bit for bit the q the drafter sampled from."""
    q = torch.stack([DraftDistribution(4).apply(row) for row in random_probs(3, 30, 1)])
    ids, values = to_sparse(q, 4)
    assert ids.dtype == torch.int32 and values.dtype == torch.float32 and ids.shape == (3, 4)
    assert torch.equal(densify(ids, values, 30), q)


def test_densify_rejects_bad_ids_and_shapes():
    """Out-of-vocabulary ids and mismatched shapes are ValueErrors."""
    with pytest.raises(ValueError, match="sparse ids"):
        densify(torch.tensor([[0, 9]], dtype=torch.int32), torch.ones(1, 2), 5)
    with pytest.raises(ValueError, match="same"):
        densify(torch.zeros(1, 2, dtype=torch.int32), torch.ones(1, 3), 5)
    with pytest.raises(ValueError):
        DraftDistribution(-1)


def test_tokens_drawn_from_top_k_stay_in_its_support():
    """Sampling from apply(p) never leaves the top-K support."""
    probs = random_probs(1, 40, 2, sharp=0.5)[0]
    q = DraftDistribution(6).apply(probs)
    rng = PositionalRNG(0)
    drawn = {sample(q, rng.uniform(Stream.DRAFT, i)) for i in range(500)}
    assert drawn <= set(torch.topk(probs, 6).indices.tolist()) and len(drawn) > 1


def test_split_verification_draws_exactly_what_whole_verification_draws():
    """DSSD's server + device halves give the same verdict as verify_sampled, draw for draw."""
    rejections = resamples = 0
    for trial in range(300):
        gamma, vocab = 1 + trial % 4, 6
        p = random_probs(gamma + 1, vocab, 1000 + trial)
        q = random_probs(gamma, vocab, 2000 + trial)
        rng = PositionalRNG(trial)
        draft = [sample(q[i], rng.uniform(Stream.DRAFT, 10 + i)) for i in range(gamma)]
        whole = verify_sampled(draft, p, q, rng, 10)
        q_draft = q[torch.arange(gamma), torch.tensor(draft)]
        server = split_verify_server(draft, p, q_draft, rng, 10)
        assert server.accepted == whole.accepted
        assert split_verify_device(server, q, rng, 10) == whole
        rejections += server.resample_p is not None
        resamples += server.resample_p is not None and whole.next_token != draft[whole.accepted]
    assert rejections > 50 and resamples > 0  # both branches exercised


def test_split_server_checks_shapes():
    """γ draft tokens need γ+1 rows of p and γ draft probabilities."""
    with pytest.raises(ValueError, match="γ=2"):
        split_verify_server([1, 2], torch.ones(2, 4) / 4, torch.ones(2), PositionalRNG(), 0)


def test_pruning_the_target_is_lossy_with_tv_one_minus_mass():
    """prune_topk keeps K entries renormalised; its TV to p equals 1 − kept mass (and is > 0)."""
    p = random_probs(1, 100, 3, sharp=1.0)[0]
    pruned, tv = prune_topk(p, 10)
    assert (pruned > 0).sum() == 10 and pruned.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert tv == pytest.approx(1.0 - torch.topk(p, 10).values.sum().item(), abs=1e-6)
    assert total_variation(p, pruned) == pytest.approx(tv, abs=1e-6) and tv > 0.05
    assert prune_topk(p, 100)[1] == pytest.approx(0.0, abs=1e-6)  # keeping everything loses nothing
