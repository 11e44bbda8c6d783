"""Verification of a γ-token draft against the target's distributions (speculative sampling).

Legend (Leviathan et al. 2023; DSSD / TK-SLT / PicoSpec notation):
  γ — draft length; x_{t+1..t+γ} — draft tokens; q_i — draft distribution that x_{t+i} was drawn from;
  p_i — target distribution at the same position (p_{γ+1} gives the bonus token);
  δ — number of accepted draft tokens (FSD paper eq. 2); u — a uniform draw.
  NB: the FSD paper names the draft model M_p and the target M_q; this code keeps the more common
  p = target, q = draft of the other four papers.

Rule: accept x_{t+i} with probability min(1, p_i(x)/q_i(x)); at the first rejection resample from
norm(max(0, p_i − q_i)) and stop; if all γ are accepted, draw a bonus token from p_{γ+1}. The output
is distributed exactly as p. Greedy (T = 0): accept while x_{t+i} = argmax p_i, then emit argmax.

A drafter with fewer ids than the target (V_q < V_p, Qwen2-VL-2B/-7B) has q_i = 0 on the ids it lacks:
q is padded with zeros where it meets p (``spec.vocab.draft_in_vocab``), which keeps the rule exact;
V_q > V_p and drafted ids ≥ V_p raise ValueError.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig, Stream, probs_from_logits, sample
from edge_spec_ros.spec.vocab import draft_in_vocab


@dataclass(frozen=True)
class Verdict:
    """The outcome of one verification: δ accepted draft tokens, then one token from the target."""

    accepted: int  # δ
    tokens: tuple[int, ...]  # (x_{t+1}, …, x_{t+δ}, y): length δ + 1

    def __post_init__(self) -> None:
        if len(self.tokens) != self.accepted + 1:
            raise ValueError(f"a verdict with δ={self.accepted} carries δ+1 tokens, got {len(self.tokens)}")

    @property
    def next_token(self) -> int:
        """The token the target produced itself (correction or bonus)."""
        return self.tokens[-1]


def accepted_prefix(p_draft: torch.Tensor, q_draft: torch.Tensor, rng: PositionalRNG, position: int) -> int:
    """δ from the probabilities of the drafted tokens only: p_draft, q_draft are (γ,) = p_i(x_i), q_i(x_i).

    Accept x_{t+i} iff u_i · q_i(x_i) < p_i(x_i), i.e. with probability min(1, p_i/q_i); the product
    form needs no division and accepts a token the draft could not have drawn (q = 0) only if p > 0.
    """
    for i in range(p_draft.shape[0]):
        u = rng.uniform(Stream.ACCEPT, position + i)
        if not u * float(q_draft[i]) < float(p_draft[i]):
            return i
    return int(p_draft.shape[0])


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, p − q) over (V,), unnormalised; falls back to p where p ≤ q everywhere (then p = q
    up to rounding and a rejection had probability ~0)."""
    r = torch.clamp(p.double() - q.double(), min=0.0)
    return r if r.sum() > 0.0 else p.double()


def verify_sampled(draft: Sequence[int], p: torch.Tensor, q: torch.Tensor, rng: PositionalRNG,
                   position: int) -> Verdict:
    """Speculative sampling. draft: γ ids; p: (γ+1, V_p) target; q: (γ, V_q) the exact draft distributions,
    V_q ≤ V_p (zeros beyond V_q); position: absolute index of draft[0] in the sequence (indexes the random
    draws)."""
    gamma = len(draft)
    if p.shape[0] != gamma + 1 or q.shape[0] != gamma:
        raise ValueError(f"γ={gamma} needs p of γ+1 rows and q of γ rows, got {tuple(p.shape)}, {tuple(q.shape)}")
    q = draft_in_vocab(q, p.shape[-1], draft)
    idx = torch.tensor(list(draft), dtype=torch.long)
    rows = torch.arange(gamma)
    delta = accepted_prefix(p[rows, idx], q[rows, idx], rng, position)
    if delta < gamma:
        y = sample(residual(p[delta], q[delta]), rng.uniform(Stream.RESIDUAL, position + delta))
    else:
        y = sample(p[gamma], rng.uniform(Stream.TARGET, position + gamma))
    return Verdict(delta, (*draft[:delta], y))


def verify_greedy(draft: Sequence[int], target_logits: torch.Tensor) -> Verdict:
    """Greedy verification: target_logits (γ+1, V); accept while the draft equals the target's argmax."""
    if target_logits.shape[0] != len(draft) + 1:
        raise ValueError(f"γ={len(draft)} needs γ+1 rows of target logits, got {tuple(target_logits.shape)}")
    best = target_logits.argmax(-1).tolist()  # (γ+1,)
    delta = 0
    while delta < len(draft) and draft[delta] == best[delta]:
        delta += 1
    return Verdict(delta, (*draft[:delta], best[delta]))


def verify(draft: Sequence[int], target_logits: torch.Tensor, q: torch.Tensor | None, sampling: SamplingConfig,
           rng: PositionalRNG, position: int) -> Verdict:
    """Verify a draft against target logits (γ+1, V); q (γ, V) is required when sampling."""
    if sampling.greedy:
        return verify_greedy(draft, target_logits)
    if q is None:
        raise ValueError("sampled verification needs the draft distributions q")
    return verify_sampled(draft, probs_from_logits(target_logits, sampling), q, rng, position)


@dataclass(frozen=True)
class SplitVerdict:
    """DSSD's server half (Algorithm 2, "Verification Process (Edge)"): δ accepted draft tokens and
    either the server's own bonus token (all accepted) or the target row p_δ the device must
    resample from. ``tokens`` holds the accepted draft tokens, plus the bonus when there is one."""

    accepted: int
    tokens: tuple[int, ...]
    resample_p: torch.Tensor | None  # (V,) p_δ when a draft token was rejected


def split_verify_server(draft: Sequence[int], p: torch.Tensor, q_draft: torch.Tensor, rng: PositionalRNG,
                        position: int) -> SplitVerdict:
    """Accept/reject from the draft tokens' probabilities only: p (γ+1, V), q_draft (γ,) = q_i(x_i).

    Departure: DSSD's Algorithm 2 prints the test as r < min{1, q/p}; the acceptance rule it cites
    (Leviathan et al.), and the only one that keeps the output distributed as p, is r < min{1, p/q},
    used here (the public DSSD code also inverts it).
    """
    gamma = len(draft)
    if p.shape[0] != gamma + 1 or q_draft.shape != (gamma,):
        raise ValueError(f"γ={gamma} needs p of γ+1 rows and γ draft probabilities, got {tuple(p.shape)}, "
                         f"{tuple(q_draft.shape)}")
    draft_in_vocab(None, p.shape[-1], draft)
    idx = torch.tensor(list(draft), dtype=torch.long)
    delta = accepted_prefix(p[torch.arange(gamma), idx], q_draft, rng, position)
    if delta == gamma:
        bonus = sample(p[gamma], rng.uniform(Stream.TARGET, position + gamma))
        return SplitVerdict(gamma, (*draft, bonus), None)
    return SplitVerdict(delta, tuple(draft[:delta]), p[delta])


def split_verify_device(verdict: SplitVerdict, q: torch.Tensor, rng: PositionalRNG, position: int) -> Verdict:
    """DSSD's device half ("Verification Process (Device)"): on a rejection resample from
    norm(max(0, p_δ − q_δ)) with the device's own q (γ, V_q) — from the distribution, not from raw
    logits (the public DSSD code's second error). Together with ``split_verify_server`` this draws
    exactly what ``verify_sampled`` draws for the same random draws. p_δ (V_p,) may be wider than q
    (a target with more ids): q_δ is zero there, so the ids only the target has keep all of p_δ."""
    if verdict.resample_p is None:
        return Verdict(verdict.accepted, verdict.tokens)
    d = verdict.accepted
    q_d = draft_in_vocab(q[d], verdict.resample_p.shape[-1])
    y = sample(residual(verdict.resample_p, q_d), rng.uniform(Stream.RESIDUAL, position + d))
    return Verdict(d, (*verdict.tokens, y))
