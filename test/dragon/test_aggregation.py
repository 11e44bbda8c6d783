"""DRAGON's output aggregation and Algorithm 1 (dragon/aggregation.py) on hand-built distributions.

Exactness: Algorithm 1's target token follows p_t = η^l p^l + η^r p^r — checked exactly by
enumeration (App. A.2) and by a chi-square test on sampled tokens, with negative controls (residual
skipped, binary selection between the drafts, robot side only) that must fail the same test.
"""

import math

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from edge_spec_ros.dragon.aggregation import (
    CLOUD,
    ROBOT,
    DragonStream,
    LocalAggregate,
    divergence,
    document_probs,
    draft_token,
    drdg_tw,
    expected_acceptance,
    local_aggregate,
    relevance_weights,
    side_weights,
    speculative_aggregate,
    speculative_sample,
    target_distribution,
)
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig, Stream, sample

from small_vocab import aggregated_two_token_joint

SAMPLED = SamplingConfig(temperature=1.0)
GREEDY = SamplingConfig(0.0)
V = 6
N = 6000
P_L = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04], dtype=torch.float64)
P_R = torch.tensor([0.05, 0.10, 0.15, 0.20, 0.20, 0.30], dtype=torch.float64)
LOG_H_L, LOG_H_R = math.log(3.0), math.log(1.0)  # η^l = 0.75


def _random_pair(seed: int, v: int = V):
    gen = torch.Generator().manual_seed(seed)
    p_l = torch.softmax(torch.randn(v, generator=gen, dtype=torch.float64) * 2, 0)
    p_r = torch.softmax(torch.randn(v, generator=gen, dtype=torch.float64) * 2, 0)
    return p_l, p_r, float(torch.rand(1, generator=gen))


# --------------------------------------------------------------------------- local aggregation (eqs. 2, 4)


def test_two_level_aggregation_equals_the_global_mixture_over_both_sides_documents():
    """η^l p^l + η^r p^r (eq. 4, from per-side aggregates and log h̃) equals Σ_{d∈D^l∪D^r} ω(d) p(x|d)
    with ω = softmax(R) over all documents (eq. 2): the decomposition loses nothing."""
    gen = torch.Generator().manual_seed(0)
    logits_l, logits_r = torch.randn(3, V, generator=gen), torch.randn(2, V, generator=gen)
    scores_l, scores_r = torch.randn(3, generator=gen) * 3, torch.randn(2, generator=gen) * 3
    a_l = local_aggregate(document_probs(logits_l, SAMPLED), scores_l)
    a_r = local_aggregate(document_probs(logits_r, SAMPLED), scores_r)
    eta_l, eta_r = side_weights(a_l.log_h, a_r.log_h)
    p_t = target_distribution(a_l.probs, a_r.probs, eta_l)
    omega = relevance_weights(torch.cat([scores_l, scores_r]))
    direct = omega @ document_probs(torch.cat([logits_l, logits_r]), SAMPLED)
    assert torch.allclose(p_t, direct, atol=1e-12)
    assert math.isclose(eta_l + eta_r, 1.0) and math.isclose(float(p_t.sum()), 1.0)
    assert math.isclose(a_l.log_h, float(torch.logsumexp(scores_l.double(), 0)), rel_tol=1e-12)


def test_side_weights_are_stable_for_large_scores():
    """log-softmax of log h̃ (App. A.1): scores of 1000 do not overflow."""
    eta_l, eta_r = side_weights(1000.0, 1000.0 + math.log(3.0))
    assert math.isclose(eta_l, 0.25) and math.isclose(eta_r, 0.75)
    a = local_aggregate(torch.eye(2, dtype=torch.float64), torch.tensor([1000.0, 1000.0]))
    assert torch.allclose(a.probs, torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_local_aggregate_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        local_aggregate(torch.ones(2, V) / V, torch.zeros(3))
    with pytest.raises(ValueError):
        relevance_weights(torch.zeros(0))


def test_greedy_document_probs_are_the_t1_softmax():
    """A greedy run aggregates softmax(z) per document (module docstring), not one-hots."""
    z = torch.tensor([[2.0, 1.0, 0.0]])
    assert torch.allclose(document_probs(z, GREEDY), torch.softmax(z.double(), -1))
    assert torch.allclose(document_probs(z, SamplingConfig(0.5)), torch.softmax(z.double() / 0.5, -1))


# --------------------------------------------------------------------------- Algorithm 1, exactly


def _sample_exact(x: int, p_a: torch.Tensor, p_b: torch.Tensor, eta: float) -> torch.Tensor:
    """P(x̃ = · | x) of Sample(x, p_a, p_b, η) in closed form: (V,)."""
    out = torch.zeros_like(p_a)
    reject = eta * (1 - p_b[x] / p_a[x]) if p_a[x] > p_b[x] else 0.0
    out[x] += 1 - reject
    if reject > 0:
        res = torch.clamp(p_b - p_a, min=0)
        out += reject * res / res.sum()
    return out


@pytest.mark.parametrize("seed", range(20))
def test_algorithm1_target_is_exactly_the_mixture(seed):
    """Enumerating x^l ~ p^l, x^r ~ p^r, the ζ's and σ: P(x_t) = η^l p^l + η^r p^r (App. A.2), and
    P(S^l) matches eq. 5 with γ^l = γ^r = ½."""
    p_l, p_r, eta_l = _random_pair(seed)
    eta_r = 1 - eta_l
    x_tilde_l = sum(p_l[x] * _sample_exact(x, p_l, p_r, eta_r) for x in range(V))
    x_tilde_r = sum(p_r[x] * _sample_exact(x, p_r, p_l, eta_l) for x in range(V))
    p_t = target_distribution(p_l, p_r, eta_l)
    assert torch.allclose(x_tilde_l, p_t, atol=1e-12) and torch.allclose(x_tilde_r, p_t, atol=1e-12)
    # P(S^l) = Σ_x p^l(x) [½ P(x̃^l = x | x^l = x) + ½ P(x̃^r = x)]
    acc_l = sum(p_l[x] * (0.5 * _sample_exact(x, p_l, p_r, eta_r)[x] + 0.5 * x_tilde_r[x]) for x in range(V))
    acc_r = sum(p_r[x] * (0.5 * _sample_exact(x, p_r, p_l, eta_l)[x] + 0.5 * x_tilde_l[x]) for x in range(V))
    alpha_l, alpha_r = expected_acceptance(p_l, p_r, eta_l)
    assert math.isclose(float(acc_l), alpha_l, abs_tol=1e-12) and math.isclose(float(acc_r), alpha_r, abs_tol=1e-12)


def test_expected_acceptance_extremes():
    """Identical sides (δ = 0) accept as often as two draws from p agree or better; disjoint sides
    (δ = 1) accept a draft only when it is the side's own x̃ kept (eq. 5, §4.3)."""
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    a_l, a_r = expected_acceptance(p, p, 0.5)
    assert divergence(p, p) == pytest.approx(0.0)
    assert a_l == pytest.approx(0.5 + 0.5 * float((p * p).sum()))
    q_l, q_r = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 0.5, 0.5])
    assert divergence(q_l, q_r) == pytest.approx(1.0)
    a_l, a_r = expected_acceptance(q_l, q_r, 0.8)
    assert a_l == pytest.approx(0.5 * 0.8 + 0.5 * 0.8) and a_r == pytest.approx(0.5 * 0.2 + 0.5 * 0.2 * 0.5)


def test_speculative_sample_keeps_a_draft_the_other_side_likes_more():
    """p_a(x) ≤ p_b(x): the draft is kept whatever ζ is."""
    for u in (0.0, 0.5, 0.999):
        assert speculative_sample(5, P_L, P_R, 1.0, u, 0.3).token == 5


def test_speculative_sample_rejects_into_the_residual():
    """p_a(x) > p_b(x) and ζ small: x̃ comes from norm(max(0, p_b − p_a)), never where p_b ≤ p_a."""
    out = {speculative_sample(0, P_L, P_R, 1.0, 0.0, u).token for u in np.linspace(0, 0.999, 50)}
    assert out <= {3, 4, 5} and len(out) == 3
    assert speculative_sample(0, P_L, P_R, 0.0, 0.0, 0.5).token == 0  # η = 0: never rejected


# --------------------------------------------------------------------------- Algorithm 1, sampled


def _aggregated_tokens(seed: int, variant: str = "paper") -> np.ndarray:
    rng = PositionalRNG(seed)
    robot, cloud = LocalAggregate(P_L, LOG_H_L), LocalAggregate(P_R, LOG_H_R)
    eta_l, eta_r = side_weights(LOG_H_L, LOG_H_R)
    out = np.empty(N, dtype=np.int64)
    for t in range(N):
        x_l = draft_token(P_L, ROBOT, rng, t, SAMPLED)
        x_r = draft_token(P_R, CLOUD, rng, t, SAMPLED)
        if variant == "paper":
            out[t] = speculative_aggregate(x_l, robot, x_r, cloud, rng, t, SAMPLED).token
        elif variant == "no_residual":  # a rejected draft resampled from p_b instead of norm(max(0, p_b − p_a))
            u = rng.uniform(DragonStream.ACCEPT_ROBOT, t)
            rejected = P_L[x_l] > P_R[x_l] and u * P_L[x_l] < eta_r * (P_L[x_l] - P_R[x_l])
            out[t] = sample(P_R, rng.uniform(DragonStream.RESIDUAL_ROBOT, t)) if rejected else x_l
        elif variant == "binary":  # pick x^l or x^r without speculative sampling (§4.2's counterexample)
            out[t] = x_l if rng.uniform(DragonStream.SELECT, t) <= 0.5 else x_r
        elif variant == "robot_only":
            out[t] = x_l
        else:
            raise ValueError(variant)
    return out


def _pvalue(tokens: np.ndarray, p: torch.Tensor) -> float:
    counts = np.bincount(tokens, minlength=V)
    return float(chisquare(counts, p.numpy() * len(tokens))[1])


def test_algorithm1_sampled_tokens_follow_the_target_chi_square():
    """x_t over 6000 independent positions fits p_t = 0.75 p^l + 0.25 p^r (p > 1e-3)."""
    p_t = target_distribution(P_L, P_R, 0.75)
    assert _pvalue(_aggregated_tokens(seed=1), p_t) > 1e-3


@pytest.mark.parametrize("variant", ["no_residual", "binary", "robot_only"])
def test_algorithm1_negative_controls_fail_the_same_test(variant):
    """Skipping the residual, selecting between the raw drafts, or using the robot side alone is
    visibly not p_t with the same draws and sample size (p < 1e-6)."""
    p_t = target_distribution(P_L, P_R, 0.75)
    assert _pvalue(_aggregated_tokens(seed=1, variant=variant), p_t) < 1e-6


def test_algorithm1_acceptance_rates_match_eq5():
    """The empirical frequencies of S^l, S^r over 3000 positions are within 4σ of eq. 5."""
    rng = PositionalRNG(2)
    robot, cloud = LocalAggregate(P_L, LOG_H_L), LocalAggregate(P_R, LOG_H_R)
    s_l = s_r = 0
    n = 3000
    for t in range(n):
        res = speculative_aggregate(draft_token(P_L, ROBOT, rng, t, SAMPLED), robot,
                                    draft_token(P_R, CLOUD, rng, t, SAMPLED), cloud, rng, t, SAMPLED)
        s_l += res.accept_robot
        s_r += res.accept_cloud
    alpha_l, alpha_r = expected_acceptance(P_L, P_R, 0.75)
    for rate, alpha in ((s_l / n, alpha_l), (s_r / n, alpha_r)):
        assert abs(rate - alpha) < 4 * math.sqrt(alpha * (1 - alpha) / n)


def test_algorithm1_greedy_is_argmax_of_the_mixture():
    """T = 0: x_t = argmax p_t, S^s = [x^s = x_t]; here neither side's argmax is p_t's argmax."""
    p_l = torch.tensor([0.50, 0.00, 0.45, 0.05], dtype=torch.float64)
    p_r = torch.tensor([0.00, 0.50, 0.45, 0.05], dtype=torch.float64)
    robot, cloud = LocalAggregate(p_l, 0.0), LocalAggregate(p_r, 0.0)
    res = speculative_aggregate(0, robot, 1, cloud, PositionalRNG(0), 0, GREEDY)
    assert res.token == 2 and not res.accept_robot and not res.accept_cloud and res.eta_robot == 0.5
    res = speculative_aggregate(2, robot, 1, cloud, PositionalRNG(0), 0, GREEDY)
    assert res.accept_robot and not res.accept_cloud


def test_dragon_streams_do_not_collide_with_the_project_streams():
    assert not {int(s) for s in DragonStream} & {int(s) for s in Stream}
    rng = PositionalRNG(5)
    draws = {rng.uniform(s, 3) for s in list(Stream) + list(DragonStream)}
    assert len(draws) == len(Stream) + len(DragonStream)


# --------------------------------------------------------------------------- DRDG/TW reference


def _table_side(seed: int, v: int, shift: float = 0.0):
    """A context-dependent hand-built side: logits from a table indexed by (last token, length mod 3),
    two documents whose relevance depends on the context (dynamic weights)."""
    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(v, 3, 2, v, generator=gen, dtype=torch.float64) * 1.5  # (last, len%3, doc, V)
    bias = torch.randn(v, 2, generator=gen, dtype=torch.float64)  # relevance per (last token, doc)

    def side(context):
        last, phase = context[-1], len(context) % 3
        probs = torch.softmax(table[last, phase], -1)  # (2, V)
        return local_aggregate(probs, bias[last] + shift)

    return side


@pytest.mark.parametrize("rule", ["algorithm1", "direct"])
def test_drdg_tw_two_token_sequences_follow_the_aggregated_distribution(rule):
    """(x_1, x_2) over 1500 seeds fits Π_t p_t with context-dependent p^s_t and η_t (chi-square)."""
    v = 4
    robot, cloud = _table_side(10, v), _table_side(11, v, shift=0.7)
    prompt = [1, 2]
    expected = aggregated_two_token_joint(robot, cloud, prompt, v)
    counts = np.zeros(v * v)
    n = 1500
    for seed in range(n):
        tokens = drdg_tw(robot, cloud, prompt, 2, PositionalRNG(seed), SAMPLED, rule=rule).tokens
        counts[tokens[0] * v + tokens[1]] += 1
    assert chisquare(counts, expected * n)[1] > 1e-3


def test_drdg_tw_greedy_is_the_argmax_chain_and_rules_agree():
    """Greedy DRDG/TW emits argmax p_t at every step, under both rules; eos stops it."""
    v = 5
    robot, cloud = _table_side(3, v), _table_side(4, v)
    a = drdg_tw(robot, cloud, [0], 12, PositionalRNG(0), GREEDY, rule="algorithm1")
    b = drdg_tw(robot, cloud, [0], 12, PositionalRNG(99), GREEDY, rule="direct")
    assert a.tokens == b.tokens and len(a.tokens) == 12
    context = [0]
    for token in a.tokens:
        a_l, a_r = robot(context), cloud(context)
        assert token == int(target_distribution(a_l.probs, a_r.probs, side_weights(a_l.log_h, a_r.log_h)[0]).argmax())
        context.append(token)
    eos = a.tokens[3]
    stopped = drdg_tw(robot, cloud, [0], 12, PositionalRNG(0), GREEDY, eos=eos)
    assert stopped.tokens == a.tokens[:a.tokens.index(eos) + 1]
    with pytest.raises(ValueError):
        drdg_tw(robot, cloud, [0], 2, PositionalRNG(0), GREEDY, rule="nope")  # type: ignore[arg-type]


@pytest.mark.slow
def test_algorithm1_chi_square_on_many_random_tables():
    """Slow: 8 random (p^l, p^r, η) on V = 8, 20 000 positions each: x_t fits p_t every time."""
    for seed in range(8):
        p_l, p_r, eta_l = _random_pair(100 + seed, v=8)
        robot = LocalAggregate(p_l, math.log(eta_l))
        cloud = LocalAggregate(p_r, math.log(1 - eta_l))
        rng = PositionalRNG(seed)
        n = 20_000
        tokens = np.array([speculative_aggregate(draft_token(p_l, ROBOT, rng, t, SAMPLED), robot,
                                                 draft_token(p_r, CLOUD, rng, t, SAMPLED), cloud, rng, t,
                                                 SAMPLED).token for t in range(n)])
        expected = target_distribution(p_l, p_r, eta_l).numpy() * n
        assert chisquare(np.bincount(tokens, minlength=8), expected)[1] > 1e-4
