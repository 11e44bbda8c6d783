"""DRAGON output aggregation and Speculative Aggregation (Liu et al. 2025, arXiv:2504.11197).

Legend (the paper's notation; l, r are the two sides):
  D^s — documents retrieved on side s; R(d, x_<t) — relevance score of d for the prefix x_<t;
  ω_t(d) = exp R(d, x_<t) / Σ_{d'} exp R(d', x_<t) — interpolation weight (eq. 2);
  p^s_t = (ω̃^s_t)ᵀ P^s_t — side s's locally aggregated next-token distribution over its own D^s (§3);
  h^s_t = Σ_{d∈D^s} exp R(d, x_<t), carried as log h̃^s_t = logsumexp R (App. A.1);
  η^s_t = h^s_t / (h^l_t + h^r_t) — side weight; p_t = η^l_t p^l_t + η^r_t p^r_t — target (eq. 4);
  x^s_t — side s's draft token; x̃^s_t — its speculative-sampling outcome; x_t — target token;
  S^l, S^r — acceptance status (Algorithm 1); δ — D_LK(p^l, p^r) = 1 − Σ min(p^l, p^r);
  α^s_t — expected acceptance rate (eq. 5); γ^l, γ^r — selection weights (Algorithm 1: ½, ½);
  T — temperature; u — a uniform draw indexed by (seed, stream, position).

Everything here is pure maths on tensors (no I/O, no clocks). Shapes are in comments.

Conventions that depart from the paper, each for a stated reason:
  * Sides are named by what they are, l ≡ robot (device) and r ≡ cloud, whichever side aggregates.
    The paper relabels l/r as the aggregator moves; fixing the labels makes every draw a function of
    (seed, position) alone, so the output does not depend on the scheduler's placement decisions
    (and the selection x_t ∈ {x̃^l, x̃^r} is uniform, so the distribution is the same either way).
  * Randomness is the project's position-indexed PositionalRNG (spec/sampling.py), one stream per
    decision and side (DragonStream), instead of a running generator: the speculative decoder and
    the token-wise reference (DRDG/TW) make exactly the same draws, so they agree token for token
    in sampled mode too, not only in distribution.
  * Greedy (T = 0): the paper only defines sampling. Per-document distributions of a greedy run are
    softmax(z) (T = 1), the target token is argmax p_t, each side drafts argmax p^s_t, and a draft is
    accepted iff it equals the target token. (Taking the one-hot argmax per document would make p_t a
    mixture of one-hots and Algorithm 1 would still be random, so it would not be a greedy decoder.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

import torch

from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig, sample

ROBOT: Literal["robot"] = "robot"  # side l in the maths below
CLOUD: Literal["cloud"] = "cloud"  # side r in the maths below
SideName = Literal["robot", "cloud"]
SIDES: tuple[SideName, SideName] = (ROBOT, CLOUD)


class DragonStream(IntEnum):
    """Random streams of DRAGON, disjoint from spec/sampling.Stream (0-3) so no draw is shared with
    the other modes' decisions at the same position. PositionalRNG only uses int(stream)."""

    DRAFT_ROBOT = 16  # x^l_t ~ p^l_t
    DRAFT_CLOUD = 17  # x^r_t ~ p^r_t
    ACCEPT_ROBOT = 18  # ζ^l in Sample(x^l, p^l, p^r, η^r)
    ACCEPT_CLOUD = 19  # ζ^r in Sample(x^r, p^r, p^l, η^l)
    RESIDUAL_ROBOT = 20  # x̃^l ~ norm(max(0, p^r − p^l)) after a rejection
    RESIDUAL_CLOUD = 21  # x̃^r ~ norm(max(0, p^l − p^r)) after a rejection
    SELECT = 22  # σ: x_t = x̃^l if σ ≤ ½ else x̃^r
    TARGET = 23  # x_t ~ p_t directly (DRDG/TW with rule="direct")


def _u(rng: PositionalRNG, stream: DragonStream, position: int) -> float:
    return rng.uniform(stream, position)  # type: ignore[arg-type]  # any IntEnum: only int(stream) is used


_DRAFT = {ROBOT: DragonStream.DRAFT_ROBOT, CLOUD: DragonStream.DRAFT_CLOUD}
_ACCEPT = {ROBOT: DragonStream.ACCEPT_ROBOT, CLOUD: DragonStream.ACCEPT_CLOUD}
_RESIDUAL = {ROBOT: DragonStream.RESIDUAL_ROBOT, CLOUD: DragonStream.RESIDUAL_CLOUD}


# --------------------------------------------------------------------------- local aggregation (§2.2, §3, §4.1)


@dataclass(frozen=True)
class LocalAggregate:
    """One side's contribution at one position: p^s_t (V,), float64, sums to 1, and log h̃^s_t."""

    probs: torch.Tensor  # (V,)
    log_h: float  # log Σ_{d∈D^s} exp R(d, x_<t)


def relevance_weights(scores: torch.Tensor) -> torch.Tensor:
    """ω(d) = exp R(d) / Σ_{d'} exp R(d') over one side's documents: scores (n,) → (n,), float64 (eq. 2)."""
    if scores.ndim != 1 or scores.numel() == 0:
        raise ValueError(f"scores must be a non-empty vector, got shape {tuple(scores.shape)}")
    return torch.softmax(scores.double(), dim=0)


def document_probs(doc_logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """p(x | d, x_<t) per document: logits (n, V) → (n, V), float64; softmax(z / T), and T = 1 when
    greedy (see the module docstring: a greedy run takes argmax of the mixture, not of each document)."""
    temperature = 1.0 if sampling.greedy else sampling.temperature
    return torch.softmax(doc_logits.double() / temperature, dim=-1)


def local_aggregate(doc_probs: torch.Tensor, scores: torch.Tensor) -> LocalAggregate:
    """p^s_t = Σ_{d∈D^s} ω̃(d) p(x | d, x_<t) and log h̃^s_t = logsumexp_d R(d, x_<t) (§3, App. A.1).

    doc_probs: (n, V) rows p(x | d, x_<t); scores: (n,) relevance R(d, x_<t) of the same documents.
    An empty document set (n = 0: nothing retrieved on this side) is not allowed: pass the model's
    distribution without documents as one row with score 0 instead (the caller decides).
    """
    if doc_probs.ndim != 2 or doc_probs.shape[0] != scores.shape[0]:
        raise ValueError(f"doc_probs (n, V) and scores (n,) disagree: {tuple(doc_probs.shape)} vs {tuple(scores.shape)}")
    omega = relevance_weights(scores)  # (n,)
    probs = omega @ doc_probs.double()  # (V,)
    return LocalAggregate(probs=probs / probs.sum(), log_h=float(torch.logsumexp(scores.double(), dim=0)))


def side_weights(log_h_l: float, log_h_r: float) -> tuple[float, float]:
    """(η^l_t, η^r_t) = softmax([log h̃^l_t, log h̃^r_t]) (§4.1, App. A.1, log-softmax for stability)."""
    m = max(log_h_l, log_h_r)
    el, er = math.exp(log_h_l - m), math.exp(log_h_r - m)
    return el / (el + er), er / (el + er)


def target_distribution(p_l: torch.Tensor, p_r: torch.Tensor, eta_l: float) -> torch.Tensor:
    """p_t = η^l_t p^l_t + η^r_t p^r_t with η^r = 1 − η^l (eq. 4): (V,), (V,) → (V,), float64."""
    return eta_l * p_l.double() + (1.0 - eta_l) * p_r.double()


def divergence(p_l: torch.Tensor, p_r: torch.Tensor) -> float:
    """δ = D_LK(p^l, p^r) = 1 − Σ_x min(p^l(x), p^r(x)) (§4.3)."""
    return float(1.0 - torch.minimum(p_l.double(), p_r.double()).sum())


def expected_acceptance(p_l: torch.Tensor, p_r: torch.Tensor, eta_l: float,
                        gamma_l: float = 0.5) -> tuple[float, float]:
    """(α^l_t, α^r_t), eq. 5: α^l = γ^l (1 − η^r δ) + γ^r Σ_x p^l(x) p_t(x), and symmetrically for r."""
    eta_r, gamma_r = 1.0 - eta_l, 1.0 - gamma_l
    delta = divergence(p_l, p_r)
    p_t = target_distribution(p_l, p_r, eta_l)
    alpha_l = gamma_l * (1.0 - eta_r * delta) + gamma_r * float((p_l.double() * p_t).sum())
    alpha_r = gamma_r * (1.0 - eta_l * delta) + gamma_l * float((p_r.double() * p_t).sum())
    return alpha_l, alpha_r


# --------------------------------------------------------------------------- drafting


def draft_token(p_s: torch.Tensor, side: SideName, rng: PositionalRNG, position: int,
                sampling: SamplingConfig) -> int:
    """x^s_t: argmax p^s_t when greedy, else x^s_t ~ p^s_t with u(seed, DRAFT_s, t). p_s: (V,)."""
    if sampling.greedy:
        return int(p_s.argmax())
    return sample(p_s, _u(rng, _DRAFT[side], position))


# --------------------------------------------------------------------------- Algorithm 1


@dataclass(frozen=True)
class SideSample:
    """Sample(x, p_a, p_b, η) of Algorithm 1: x̃ and whether the draft x was rejected and resampled."""

    token: int  # x̃
    resampled: bool


def speculative_sample(x: int, p_a: torch.Tensor, p_b: torch.Tensor, eta: float, u_accept: float,
                       u_residual: float) -> SideSample:
    """Function Sample(x, p_a, p_b, η) of Algorithm 1; p_a, p_b: (V,).

    Keep x unless p_a(x) > p_b(x) and ζ < η (1 − p_b(x)/p_a(x)); then x̃ ~ norm(max(0, p_b − p_a)).
    The comparison is written as ζ · p_a(x) < η (p_a(x) − p_b(x)) (no division; same event).
    """
    pa, pb = float(p_a[x]), float(p_b[x])
    if pa > pb and u_accept * pa < eta * (pa - pb):
        residual = torch.clamp(p_b.double() - p_a.double(), min=0.0)  # (V,), unnormalised
        if float(residual.sum()) > 0.0:
            return SideSample(token=sample(residual, u_residual), resampled=True)
        # p_a(x) > p_b(x) forces Σ max(0, p_b − p_a) = Σ max(0, p_a − p_b) > 0; only rounding gets here.
    return SideSample(token=x, resampled=False)


@dataclass(frozen=True)
class AggregationResult:
    """The Aggregator's output at position t: x_t, S^l, S^r, and what produced them."""

    token: int  # x_t
    accept_robot: bool  # S^l: x^l_t = x_t
    accept_cloud: bool  # S^r: x^r_t = x_t
    eta_robot: float  # η^l_t (η^r_t = 1 − η^l_t)
    robot_sample: SideSample | None = None  # x̃^l_t (None when greedy)
    cloud_sample: SideSample | None = None  # x̃^r_t (None when greedy)
    selected: SideName | None = None  # whose x̃ became x_t (None when greedy)


def speculative_aggregate(x_l: int, robot: LocalAggregate, x_r: int, cloud: LocalAggregate,
                          rng: PositionalRNG, position: int, sampling: SamplingConfig,
                          gamma_l: float = 0.5) -> AggregationResult:
    """Algorithm 1 (SpeculativeAggregation) at position t = ``position``.

    Inputs: the draft tokens x^l_t, x^r_t, their locally aggregated distributions p^s_t (V,) and
    weights log h̃^s_t. η^l = h^l / (h^l + h^r); x̃^l = Sample(x^l, p^l, p^r, η^r),
    x̃^r = Sample(x^r, p^r, p^l, η^l); σ ~ U(0,1), x_t = x̃^l if σ ≤ γ^l else x̃^r; S^s = [x^s_t = x_t].
    γ^l = ½ is the paper's choice (§4.3); any γ^l ∈ [0, 1] keeps x_t ~ p_t (App. A.2).
    Greedy: x_t = argmax p_t, see the module docstring.
    """
    eta_l, eta_r = side_weights(robot.log_h, cloud.log_h)
    if sampling.greedy:
        token = int(target_distribution(robot.probs, cloud.probs, eta_l).argmax())
        return AggregationResult(token, x_l == token, x_r == token, eta_l)
    tl = speculative_sample(x_l, robot.probs, cloud.probs, eta_r, _u(rng, DragonStream.ACCEPT_ROBOT, position),
                            _u(rng, DragonStream.RESIDUAL_ROBOT, position))
    tr = speculative_sample(x_r, cloud.probs, robot.probs, eta_l, _u(rng, DragonStream.ACCEPT_CLOUD, position),
                            _u(rng, DragonStream.RESIDUAL_CLOUD, position))
    selected: SideName = ROBOT if _u(rng, DragonStream.SELECT, position) <= gamma_l else CLOUD
    token = tl.token if selected == ROBOT else tr.token
    return AggregationResult(token, x_l == token, x_r == token, eta_l, tl, tr, selected)


# --------------------------------------------------------------------------- DRDG/TW reference

# A side's next-token function: the committed context (prompt + target tokens so far) → its
# locally aggregated distribution and weight at the next position. Pure: same context, same result.
SideFunction = Callable[[Sequence[int]], LocalAggregate]


@dataclass(frozen=True)
class DecodeTrace:
    """Tokens of a decode and, per position, S^l, S^r and η^l (for acceptance statistics)."""

    tokens: tuple[int, ...]
    accept_robot: tuple[bool, ...]
    accept_cloud: tuple[bool, ...]
    eta_robot: tuple[float, ...]


def drdg_tw(robot: SideFunction, cloud: SideFunction, prompt: Sequence[int], max_new_tokens: int,
            rng: PositionalRNG, sampling: SamplingConfig, rule: Literal["algorithm1", "direct"] = "algorithm1",
            eos: int | None = None) -> DecodeTrace:
    """DRDG/TW, the token-wise synchronised reference (§2.2 "vanilla distributed RAG", §7.2).

    At every position t both sides compute p^s_t over the same committed prefix and x_t is drawn:
      rule="algorithm1": each side drafts x^s_t with its position-indexed draw and Algorithm 1 picks
        x_t — exactly the draws Speculative Aggregation makes, so the two agree token for token;
      rule="direct": x_t ~ p_t = η^l p^l + η^r p^r with one draw u(TARGET, t) (the paper's baseline;
        equal in distribution to "algorithm1", App. A.2, but not draw for draw).
    Positions are counted from 0 at the first generated token.
    """
    context = list(prompt)
    tokens: list[int] = []
    acc_l: list[bool] = []
    acc_r: list[bool] = []
    etas: list[float] = []
    for t in range(max_new_tokens):
        a_l, a_r = robot(context), cloud(context)
        x_l = draft_token(a_l.probs, ROBOT, rng, t, sampling)
        x_r = draft_token(a_r.probs, CLOUD, rng, t, sampling)
        if rule == "algorithm1":
            res = speculative_aggregate(x_l, a_l, x_r, a_r, rng, t, sampling)
            token, eta_l = res.token, res.eta_robot
        elif rule == "direct":
            eta_l, _ = side_weights(a_l.log_h, a_r.log_h)
            p_t = target_distribution(a_l.probs, a_r.probs, eta_l)
            token = int(p_t.argmax()) if sampling.greedy else sample(p_t, _u(rng, DragonStream.TARGET, t))
        else:
            raise ValueError(f"unknown rule {rule!r}")
        tokens.append(token)
        acc_l.append(x_l == token)
        acc_r.append(x_r == token)
        etas.append(eta_l)
        context.append(token)
        if eos is not None and token == eos:
            break
    return DecodeTrace(tuple(tokens), tuple(acc_l), tuple(acc_r), tuple(etas))
