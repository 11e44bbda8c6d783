"""In-process Speculative Aggregation (test/dragon/reference.py) against DRDG/TW.

Exactness: greedy and sampled output equal the token-wise synchronised reference token for token
on many seeds, tables and random interleavings of drafting and aggregation; sampled two-token
sequences fit Π_t (η^l_t p^l_t + η^r_t p^r_t) (chi-square), and a decoder whose rejected side rolls
back to its own rejected draft instead of the target token fails the same test.
"""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from edge_spec_ros.dragon.aggregation import (
    CLOUD,
    ROBOT,
    drdg_tw,
    local_aggregate,
)
from edge_spec_ros.dragon.document_lm import DocumentMixture
from edge_spec_ros.dragon.relevance import static_relevance
from edge_spec_ros.dragon.side import DraftingSide
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig

from reference import random_events, speculative_aggregation
from small_vocab import aggregated_two_token_joint

SAMPLED = SamplingConfig(temperature=1.0)
GREEDY = SamplingConfig(0.0)


def table_side(seed: int, v: int, agree_with=None, noise: float = 1.0, docs: int = 2):
    """A context-dependent hand-built side with ``docs`` documents and dynamic relevance: logits from
    a table indexed by (last two tokens), relevance from (last token). With agree_with, the table is
    the other side's plus noise (sides that mostly agree, as in §6's argument)."""
    gen = torch.Generator().manual_seed(seed)
    if agree_with is None:
        table = torch.randn(v, v, docs, v, generator=gen, dtype=torch.float64) * 2.0
    else:
        table = agree_with + noise * torch.randn(agree_with.shape, generator=gen, dtype=torch.float64)
    bias = torch.randn(v, docs, generator=gen, dtype=torch.float64)

    def side(context):
        return local_aggregate(torch.softmax(table[context[-2], context[-1]], -1), bias[context[-1]])

    side.table = table  # type: ignore[attr-defined]
    return side


class KVSide:
    """Wraps a side function with a fake KV cache: every call must find its cache a prefix of the
    context it is asked about (so a missing or wrong rollback is caught), then caches the context."""

    def __init__(self, fn):
        self.fn, self.cached, self.rollbacks = fn, None, []

    def __call__(self, context):
        if self.cached is not None:
            assert list(context[:len(self.cached)]) == self.cached, "stale cache: rollback missing"
            assert len(context) == len(self.cached) + 1, "a draft step feeds exactly one new token"
        self.cached = list(context)
        return self.fn(context)

    def rollback(self, n):
        self.rollbacks.append(n)
        del self.cached[n:]


def _pair(seed, v, noise):
    robot = table_side(seed, v)
    cloud = table_side(seed + 1000, v, agree_with=robot.table, noise=noise)
    return robot, cloud


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_equals_drdg_tw_token_for_token(sampling):
    """60 (table, seed, interleaving) cases per mode, V = 5, 24 tokens: identical tokens and S^l, S^r;
    every rejection rolled back the side's (fake) KV cache to the committed prefix."""
    v, n_tokens = 5, 24
    rejections = 0
    for case in range(60):
        robot, cloud = _pair(case, v, noise=(0.3, 1.0, 3.0)[case % 3])
        prompt = [case % v, (case * 7) % v]
        rng = PositionalRNG(case)
        ref = drdg_tw(robot, cloud, prompt, n_tokens, rng, sampling)
        kv_l, kv_r = KVSide(robot), KVSide(cloud)
        out = speculative_aggregation(kv_l, kv_r, prompt, n_tokens, rng, sampling,
                                      rollback_robot=kv_l.rollback, rollback_cloud=kv_r.rollback,
                                      max_queue=1 + case % 5, events=random_events(case))
        assert out.tokens == ref.tokens
        assert out.accept_robot == ref.accept_robot and out.accept_cloud == ref.accept_cloud
        assert out.eta_robot == pytest.approx(ref.eta_robot)
        assert out.rollbacks[ROBOT] == sum(not a for a in out.accept_robot)
        assert out.rollbacks[CLOUD] == sum(not a for a in out.accept_cloud)
        for kv, flags in ((kv_l, out.accept_robot), (kv_r, out.accept_cloud)):
            assert kv.rollbacks == [len(prompt) + t for t, ok in enumerate(flags) if not ok]
        rejections += out.rollbacks[ROBOT] + out.rollbacks[CLOUD]
    assert rejections > 100  # the cases exercise rejection and rollback, not only agreement


def test_output_does_not_depend_on_interleaving_queue_depth_or_placement():
    """The same seed gives the same tokens for round-robin and random event orders, queue depths
    1..8 and any aggregator placement; placement is only recorded."""
    v = 6
    robot, cloud = _pair(7, v, noise=1.0)
    rng = PositionalRNG(3)
    base = speculative_aggregation(robot, cloud, [0, 1], 30, rng, SAMPLED)
    assert base.aggregator == (ROBOT,) * 30
    for depth in (1, 2, 8):
        for events in (None, random_events(depth)):
            flip = lambda t, res: CLOUD if t % 2 == 0 else ROBOT  # noqa: E731
            out = speculative_aggregation(robot, cloud, [0, 1], 30, rng, SAMPLED, max_queue=depth,
                                          events=events, placement=flip)
            assert out.tokens == base.tokens
            assert out.aggregator == tuple([ROBOT] + [CLOUD if t % 2 == 0 else ROBOT for t in range(29)])


def test_identical_sides_never_reject():
    """p^l = p^r: every draft is accepted (Algorithm 1 never rejects, S^l = S^r = 1 in greedy and the
    selected side's draft is the target), and nothing is rolled back in greedy mode."""
    v = 5
    side = table_side(1, v)
    out = speculative_aggregation(side, side, [1, 2], 20, PositionalRNG(0), GREEDY, max_queue=3)
    assert all(out.accept_robot) and all(out.accept_cloud)
    assert out.rollbacks == {ROBOT: 0, CLOUD: 0} and out.discarded == {ROBOT: 0, CLOUD: 0}


def test_eos_stops_both_sides():
    v = 5
    robot, cloud = _pair(2, v, noise=1.0)
    full = drdg_tw(robot, cloud, [0, 0], 20, PositionalRNG(1), GREEDY)
    eos = full.tokens[5]
    out = speculative_aggregation(robot, cloud, [0, 0], 20, PositionalRNG(1), GREEDY, eos=eos)
    assert out.tokens == full.tokens[:full.tokens.index(eos) + 1]


class StaleRollbackSide(DraftingSide):
    """Negative control: a rejected side clears its queue and rolls back, but to just after its own
    rejected draft x^s_t instead of replacing it with the target token x_t."""

    def settle(self, target, accepted):
        self.queue.popleft()
        if not accepted:
            self.queue.clear()
            del self.context[self.committed + 1:]  # keeps x^s_t where x_t belongs
        self.committed += 1


def _two_token_counts(v, robot, cloud, prompt, n):
    counts = np.zeros(v * v)
    for seed in range(n):
        out = speculative_aggregation(robot, cloud, prompt, 2, PositionalRNG(seed), SAMPLED, max_queue=2,
                                      events=random_events(seed))
        counts[out.tokens[0] * v + out.tokens[1]] += 1
    return counts


def test_sampled_sequences_follow_the_aggregated_distribution_and_a_stale_rollback_fails(monkeypatch):
    """(x_1, x_2) over 600 seeds, V = 4, sides that disagree: the decoder fits Π_t p_t (p > 1e-3; 0.96);
    the same decoder whose rejected side continues from its own draft does not (p < 1e-6; 1.3e-36, and
    7.6e-94 over 1500 seeds)."""
    import reference as sa

    v, n = 4, 600
    robot, cloud = table_side(20, v), table_side(21, v)
    prompt = [1, 2]
    expected = aggregated_two_token_joint(robot, cloud, prompt, v) * n
    counts = _two_token_counts(v, robot, cloud, prompt, n)
    p_ok = chisquare(counts, expected)[1]
    monkeypatch.setattr(sa, "DraftingSide", StaleRollbackSide)
    bad = _two_token_counts(v, robot, cloud, prompt, n)
    p_bad = chisquare(bad, expected)[1]
    assert p_ok > 1e-3, p_ok
    assert p_bad < 1e-6, p_bad


def test_document_mixture_side_with_static_relevance():
    """DocumentMixture: per-document logits and relevance → p^s = softmax(R)ᵀ softmax(z), log h̃."""
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    side = DocumentMixture(lambda ctx: logits, static_relevance([1.0, 0.0]), SAMPLED)
    agg = side([0])
    w = torch.softmax(torch.tensor([1.0, 0.0], dtype=torch.float64), 0)
    assert torch.allclose(agg.probs, w @ torch.softmax(logits.double(), -1))
    assert agg.log_h == pytest.approx(float(torch.logsumexp(torch.tensor([1.0, 0.0]), 0)))


def test_max_queue_must_be_positive():
    side = table_side(0, 3)
    with pytest.raises(ValueError):
        speculative_aggregation(side, side, [0, 0], 3, PositionalRNG(0), GREEDY, max_queue=0)
