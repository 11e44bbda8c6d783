"""The cloud verifier: Qwen2-VL with early-exit adapters, KV cache with rollback.

One forward pass over the uncached part of prefix + draft yields, layer by layer, the logits of
every exit for the γ+1 verification positions (FSD paper eq. 5); the final exit is the unmodified
model and the only authority on emitted tokens.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

import torch
from transformers import Qwen2VLForConditionalGeneration

from edge_spec_ros.models.adapters import ExitAdapters
from edge_spec_ros.models.kv_cache import KVCache
from edge_spec_ros.models.loading import load_qwen2vl
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.models.stack import DecoderStack, PendingPrefill, Shortlist
from edge_spec_ros.spec.exits import ExitPlanner


@dataclass(frozen=True)
class VerifierConfig:
    """model: hub id or local path; adapters: directory of trained exit adapters (None: untrained,
    i.e. logit-lens exits); exit_layers: 1-based layers with an exit (empty: every layer < L)."""

    model: str = "Qwen/Qwen2-VL-7B-Instruct"
    adapters: str | None = None
    exit_layers: tuple[int, ...] = field(default_factory=tuple)
    dtype: str = "float32"
    device: str = "cpu"


@dataclass(frozen=True)
class ExitLogits:
    """Logits z^(l) (m, V) of exit ``layer`` over the requested positions."""

    layer: int
    logits: torch.Tensor
    is_final: bool
    head_s: float = 0.0  # time of the exit's head (adapter, norm, LM head); 0 for the final exit


@dataclass(frozen=True)
class BlockForward:
    """The forward pass a whole block needs, all a batched forward reads of it (``cloud.batching``):
    ``kv`` made to cover ``sequence``, hidden states from position ``first`` on, and the early exits it
    computes (``exits``: the planner's choice, empty for the final layer only) over the ids
    ``shortlist`` names (None: the whole vocabulary)."""

    kv: KVCache
    sequence: list[int]
    first: int
    exits: frozenset[int] = frozenset()
    shortlist: Shortlist | None = None


class EarlyExitVerifier:
    """Target model M with exits at ``adapters.layers`` and the final layer L."""

    def __init__(self, model: Qwen2VLForConditionalGeneration, adapters: ExitAdapters | None = None,
                 exit_layers: tuple[int, ...] = ()) -> None:
        self.stack = DecoderStack(model)
        L = self.stack.num_layers
        hidden = model.config.text_config.hidden_size
        if adapters is None:
            adapters = ExitAdapters(hidden, list(exit_layers) or list(range(1, L)))
        bad = [l for l in adapters.layers if not 1 <= l < L]
        if bad:
            raise ValueError(f"exit layers {bad} outside 1..{L - 1} (layer {L} is the final exit)")
        self.adapters = adapters.to(self.stack.device, self.stack.dtype).eval().requires_grad_(False)
        self.exit_layers = tuple(l for l in self.adapters.layers if not exit_layers or l in exit_layers)
        # which early exits earn their compute, learned over every session (spec.exits.ExitPlanner);
        # None: every exit in every round (as the FSD paper's verifier does)
        self.exit_planner: ExitPlanner | None = ExitPlanner(self.exit_layers, L) if self.exit_layers else None
        # ... and over the sessions of pipelining robots (PicoSpec modes, Open.pipelined), where an exit
        # earns only after a rejection: the two kinds would teach one planner opposite lessons
        self.pipelined_exit_planner: ExitPlanner | None = ExitPlanner(self.exit_layers, L) if self.exit_layers \
            else None

    def planner_for(self, pipelined: bool) -> ExitPlanner | None:
        """The exit planner of a session whose robot pipelines its blocks (``pipelined``) or not; None
        while ``exit_planner`` is None (every exit in every round)."""
        if self.exit_planner is None:
            return None
        return self.pipelined_exit_planner if pipelined else self.exit_planner

    @classmethod
    def from_config(cls, config: VerifierConfig) -> "EarlyExitVerifier":
        model = load_qwen2vl(config.model, config.dtype, config.device)
        adapters = ExitAdapters.load(config.adapters) if config.adapters else None
        return cls(model, adapters, config.exit_layers)

    @property
    def num_layers(self) -> int:
        return self.stack.num_layers

    def start(self, prompt: EncodedPrompt) -> KVCache:
        """Prefill image + prompt once per decision."""
        return self.stack.prefill(prompt)

    def begin_prefill(self, prompt: EncodedPrompt, chunk_tokens: int = 0, chunk_cells: int = 0) -> PendingPrefill:
        """``start`` in slices of at most ``chunk_tokens`` positions and ``chunk_cells`` attention cells
        (``DecoderStack.begin_prefill``)."""
        return self.stack.begin_prefill(prompt, chunk_tokens, chunk_cells)

    def exit_logits(self, layer: int, hidden: torch.Tensor, shortlist: Shortlist | None = None) -> torch.Tensor:
        """z^(l) = LMHead(Norm(Adapter_l(h^(l)))): (m, d) → (m, V); with a ``shortlist``, over its ids
        only (−inf elsewhere: ``DecoderStack.logits``)."""
        with torch.inference_mode():
            return self.stack.logits(self.adapters[layer](hidden), shortlist)

    def exits(self, kv: KVCache, sequence: list[int], first: int,
              layers: Collection[int] | None = None, shortlist: Shortlist | None = None) -> Iterator[ExitLogits]:
        """Stream the exits' logits for positions ``first ..`` as soon as each layer is done: the early
        exits in ``layers`` (None: every one) and the final exit, always. An exit not asked for costs
        nothing: its head is not run. ``shortlist``: the early exits' heads score only its ids (the
        final exit always scores the whole vocabulary)."""
        L = self.num_layers
        for out in self.stack.run(kv, sequence, first):
            if out.layer == L:
                yield ExitLogits(L, self.stack.logits(out.hidden), True)
            elif out.layer in self.exit_layers and (layers is None or out.layer in layers):
                t = time.perf_counter()
                logits = self.exit_logits(out.layer, out.hidden, shortlist)
                yield ExitLogits(out.layer, logits, False, time.perf_counter() - t)

    def logits(self, kv: KVCache, sequence: list[int], first: int) -> torch.Tensor:
        """Final-exit logits only (m, V): the plain target model."""
        return self.stack.final_logits(kv, sequence, first)
