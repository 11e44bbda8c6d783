"""The robot-side drafter: a small Qwen2-VL, optionally quantized (models/quantize.py), with a rollback KV cache.

Legend: γ — draft length; x_{t+1..t+γ} — draft tokens; q_i — the exact distribution x_{t+i} was drawn
from (sent for verification: the draft must sample from exactly the q it sends).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch
from torch import nn
from transformers import Qwen2VLForConditionalGeneration

from edge_spec_ros.models.kv_cache import KVCache, common_prefix
from edge_spec_ros.models.loading import load_qwen2vl
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.models.quantize import quantize as quantize_model
from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig, Stream, choose
from edge_spec_ros.spec.sparse import DraftDistribution


@dataclass(frozen=True)
class DrafterConfig:
    """model: hub id or local path; quantize: the scheme quantizing every Linear layer (models/quantize.py:
    none, int8-dynamic, int8-weight, int4-weight on CUDA; the FSD paper's Go2 drafter is a quantized
    Qwen2-VL-2B); layers: keep only the first k decoder layers (0: all), a self-speculative drafter;
    adapters: with ``layers``, the directory of the model's exit adapters whose Adapter_k heads the
    drafter (``self_draft_model``)."""

    model: str = "Qwen/Qwen2-VL-2B-Instruct"
    quantize: str = "none"
    dtype: str = "float32"
    device: str = "cpu"
    layers: int = 0
    adapters: str | None = None


ALTERNATIVES = 3  # other tokens a drafted token's ``Alternative`` keeps


@dataclass(frozen=True)
class Alternative:
    """What the drafter thought of one token it drafted: q_i(x_i), and the likeliest other tokens."""

    confidence: float  # q_i(x_i)
    others: tuple[tuple[int, float], ...] = ()  # (token, q_i(token)), most likely first, x_i left out


@dataclass(frozen=True)
class Draft:
    """γ draft tokens starting at absolute position ``position``; q: (γ, V) or None when greedy;
    alternatives: one per token when the drafter model drafted every one of them, else ()."""

    tokens: tuple[int, ...]
    q: torch.Tensor | None
    position: int
    alternatives: tuple[Alternative, ...] = ()

    @property
    def gamma(self) -> int:
        return len(self.tokens)

    def join(self, rest: "Draft") -> "Draft":
        """This draft followed by ``rest``, drafted from the prefix that ends with this one."""
        if rest.position != self.position + self.gamma:
            raise ValueError("the drafts are not contiguous")
        q = None if self.q is None else torch.cat([self.q, rest.q])
        whole = len(self.alternatives) == self.gamma and len(rest.alternatives) == rest.gamma
        return Draft(self.tokens + rest.tokens, q, self.position,
                     self.alternatives + rest.alternatives if whole else ())

    def tail(self, drop: int) -> "Draft":
        """The draft without its first ``drop`` tokens (their positions are already committed)."""
        return Draft(self.tokens[drop:], None if self.q is None else self.q[drop:], self.position + drop,
                     self.alternatives[drop:])


class AdaptedNorm(nn.Module):
    """Norm(Adapter_k(h)): put in place of the final norm of a model cut after layer k, it makes
    LMHead(Norm(·)) the exit-k head z^(k) = LMHead(Norm(Adapter_k(h^(k)))) of the full model."""

    def __init__(self, adapter: nn.Module, norm: nn.Module) -> None:
        super().__init__()
        self.adapter = adapter
        self.norm = norm

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm(self.adapter(h))


def self_draft_model(model: Qwen2VLForConditionalGeneration, layers: int,
                     adapter: nn.Module | None = None) -> Qwen2VLForConditionalGeneration:
    """A drafter made of the verifier's first k = ``layers`` decoder layers, its embeddings, final
    norm and LM head, with the exit-k adapter (trained by ``train-exits``) before the norm: its
    next-token distribution is exactly the verifier's exit-k distribution (self-speculative drafting,
    as Draft & Verify and LayerSkip; the drafter shares the verifier's vocabulary by construction)."""
    from edge_spec_ros.models.tiny import truncated_copy

    total = model.config.text_config.num_hidden_layers
    if not 1 <= layers < total:
        raise ValueError(f"a self-drafter keeps 1..{total - 1} of the {total} layers, got {layers}")
    draft = truncated_copy(model, layers)
    if adapter is not None:
        text = draft.model.language_model
        text.norm = AdaptedNorm(adapter.to(text.embed_tokens.weight.dtype), text.norm)
    return draft.eval().requires_grad_(False)


class DraftCancelled(Exception):
    """A draft abandoned part-way (its prefix became stale)."""


class Drafter:
    """Drafts γ tokens from any committed prefix, reusing and rolling back its KV cache."""

    def __init__(self, model: Qwen2VLForConditionalGeneration, quantize: str = "none") -> None:
        """``quantize``: the scheme (models/quantize.py) applied to ``model`` in place, on its device."""
        self.stack = DecoderStack(quantize_model(model, quantize, next(model.parameters()).device))

    @classmethod
    def from_config(cls, config: DrafterConfig) -> "Drafter":
        model = load_qwen2vl(config.model, config.dtype, config.device)
        if config.layers:
            adapter = None
            if config.adapters:
                from edge_spec_ros.models.adapters import ExitAdapters

                adapters = ExitAdapters.load(config.adapters)
                if config.layers not in adapters.layers:
                    raise ValueError(f"{config.adapters} has no exit at layer {config.layers} (exits: {adapters.layers})")
                adapter = adapters[config.layers]
            model = self_draft_model(model, config.layers, adapter).to(config.device)
        elif config.adapters:
            raise ValueError("drafter adapters need `layers` (the exit the drafter stops at)")
        return cls(model, config.quantize)

    def start(self, prompt: EncodedPrompt) -> KVCache:
        return self.stack.prefill(prompt)

    def catch_up(self, kv: KVCache, seq: list[int]) -> bool:
        """Extend ``kv`` over ``seq`` but its last token (the next draft step feeds that one) where it lags
        further: after tokens the drafter did not draft (AS²'s cloud-only chunks). True when it ran."""
        if len(seq) - 1 - common_prefix(kv.tokens, seq) <= 1:
            return False
        for _ in self.stack.run(kv, seq[:-1], len(seq) - 2):
            pass
        return True

    def draft(self, kv: KVCache, prefix: list[int], gamma: int, sampling: SamplingConfig,
              rng: PositionalRNG, min_step_s: float = 0.0,
              cancelled: Callable[[], bool] | None = None,
              distribution: DraftDistribution | None = None,
              truncate: Callable[[], bool] | None = None, stop: Collection[int] = ()) -> Draft:
        """Draft x_{t+1..t+γ} after ``prefix`` (length t). ``kv`` is rolled back to what it shares with
        ``prefix`` and extended; token x_j uses the draw u(DRAFT, j), so the same prefix always gives
        the same draft (SD, FSD pre-drafting and pipelined drafting agree).

        min_step_s: emulated T_p, each step lasts at least this long (benchmark profiles);
        cancelled: polled between steps, raises DraftCancelled when it returns True;
        distribution: top-K q (TK-SLT); the draft samples from exactly that q;
        truncate: polled after each token; True ends the draft early (PicoSpec's latency-aware
        truncation), at least one token is always drafted;
        stop: stop tokens: a drafted one ends the draft (nothing after it is ever emitted: accepted, it
        ends the decision; rejected at or before it, the tokens after it are dropped), so a decision's
        last block costs no draft steps past its end. Like truncation, it fixes the block's length
        before any of its verification draws is used: each position's acceptance test is the same.
        """
        if gamma < 1:
            raise ValueError(f"γ must be >= 1, got {gamma}")
        seq = list(prefix)
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        alternatives: list[Alternative] = []
        for _ in range(gamma):
            if cancelled is not None and cancelled():
                raise DraftCancelled()
            if tokens and truncate is not None and truncate():
                break
            t0 = time.perf_counter()
            logits = self.stack.final_logits(kv, seq, len(seq) - 1)[-1]  # (V,)
            token, q = choose(logits, sampling, rng, Stream.DRAFT, len(seq),
                              distribution.apply if distribution is not None else None)
            if min_step_s > 0:
                time.sleep(max(0.0, t0 + min_step_s - time.perf_counter()))
            tokens.append(token)
            qs.append(q)
            alternatives.append(alternative(torch.softmax(logits.float(), -1) if sampling.greedy else q, token))
            seq.append(token)
            if token in stop:
                break
        q = None if sampling.greedy else torch.stack(qs)  # (γ, V)
        return Draft(tuple(tokens), q, len(prefix), tuple(alternatives))


def alternative(q: torch.Tensor, token: int) -> Alternative:
    """A distribution (V,) and the token drafted from it: its probability and the likeliest other tokens
    (greedy drafts pass softmax(z), their q being one-hot)."""
    top = q.topk(min(ALTERNATIVES + 1, q.numel()))
    others = [(t, p) for t, p in zip(top.indices.tolist(), top.values.tolist()) if t != token]
    return Alternative(float(q[token]), tuple(others[:ALTERNATIVES]))
