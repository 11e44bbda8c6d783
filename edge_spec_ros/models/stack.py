"""Layer-by-layer execution of a Qwen2-VL decoder over a rollback-able KV cache.

HF's forward runs all layers at once; early-exit verification (FSD paper, Fig. 3, eq. 5) needs the
hidden state after every layer as soon as it exists, so this module drives the decoder layers itself
with the model's own embedding, vision tower, M-RoPE, causal mask, norm and LM head. With no exit
adapter the result equals ``model(...).logits`` (checked in ``test/models/test_stack.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import math
import time

import torch
from transformers import AttentionInterface, Qwen2VLForConditionalGeneration
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from edge_spec_ros.models.kv_cache import GROW_MIN, KVCache, KVLayer, common_prefix
from edge_spec_ros.models.prompt import EncodedPrompt


@dataclass(frozen=True)
class Shortlist:
    """The token ids a head scores and the LM head's rows for them (``DecoderStack.shortlist``)."""

    ids: torch.Tensor  # (k,) int64
    weight: torch.Tensor  # (k, d)
    bias: torch.Tensor | None  # (k,)


@dataclass(frozen=True)
class LayerOutput:
    """Hidden state after decoder layer ``layer`` (1-based; ``layer == num_layers`` is the last).

    hidden: (m, d) for the m requested positions.
    """

    layer: int
    hidden: torch.Tensor


SDPA_GQA = "edge_spec_ros_sdpa"


def sdpa_gqa_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                               attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                               **kwargs) -> tuple[torch.Tensor, None]:
    """HF's SDPA attention, but on CPU with a mask and grouped-query heads SDPA reads the H_kv key and
    value heads itself (``enable_gqa``) instead of HF copying them H/H_kv times per layer (the copy of
    the whole cache per layer cost a third of a prefill slice's time at 16k cached positions). The
    result is the same to the bit (checked in ``test/models/test_stack.py``)."""
    groups = getattr(module, "num_key_value_groups", 1)
    if attention_mask is None or groups == 1 or query.shape[2] == 1 or query.device.type != "cpu" \
            or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if attention_mask.dtype == torch.bool:
        attention_mask = torch.zeros(attention_mask.shape, dtype=query.dtype).masked_fill_(~attention_mask,
                                                                                        float("-inf"))
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(SDPA_GQA, sdpa_gqa_attention_forward)
AttentionMaskInterface.register(SDPA_GQA, sdpa_mask)  # HF's own forward builds the masks it builds for SDPA


class DecoderStack:
    """Runs a ``Qwen2VLForConditionalGeneration`` one decoder layer at a time."""

    def __init__(self, model: Qwen2VLForConditionalGeneration) -> None:
        self.model = model.eval()
        self.text = model.model.language_model
        if self.text.config._attn_implementation == "sdpa":  # the same arithmetic, without copying the cache
            self.text.config._attn_implementation = SDPA_GQA
        self.num_layers = len(self.text.layers)
        self.vocab_size = model.config.text_config.vocab_size

    @property
    def dtype(self) -> torch.dtype:
        return self.text.embed_tokens.weight.dtype  # never quantized, unlike Linear layers

    @property
    def device(self) -> torch.device:
        """Where the model's weights are: the inputs it is given (ids, positions, masks, the image) are
        moved there; the logits it returns come back to the CPU (``logits``)."""
        return self.text.embed_tokens.weight.device

    def prefill(self, prompt: EncodedPrompt) -> KVCache:
        """Encode the image and cache every prompt position but the last.

        The last prompt token is fed by the first ``run`` so that its logits (which predict the
        first generated token) come out of the same code path as every later position.
        """
        pending = self.begin_prefill(prompt)
        while not pending.step():
            pass
        return pending.kv

    @torch.inference_mode()
    def begin_prefill(self, prompt: EncodedPrompt, chunk_tokens: int = 0, chunk_cells: int = 0) -> "PendingPrefill":
        """``prefill`` cut into slices of at most ``chunk_tokens`` positions (0: no bound), so that a
        server can run other sessions' work between them (chunked prefill), and, with ``chunk_cells``
        > 0, of at most that many attention cells: a slice of s positions after c cached ones has
        s·(c + s) query-key pairs, so the slices shorten as the cache grows and one layer of one slice
        costs about the same at any depth (at least one position a slice). The slicing depends on the
        prompt's length only. The image is encoded here, at once (its size is bounded by the server's
        pixel limit); each ``step`` runs one layer over the current slice with the slices before it in
        the cache, which is the same causal computation."""
        device = self.device
        ids = prompt.input_ids[None, :].to(device)  # (1, n)
        grid = prompt.image_grid_thw.to(device) if prompt.image_grid_thw is not None else None
        if prompt.pixel_values is not None:
            positions, delta = self.model.model.get_rope_index(
                ids, prompt.mm_token_type_ids[None, :].to(device), image_grid_thw=grid
            )  # positions: (3, 1, n)
            rope_delta = int(delta.item())
        else:
            positions, rope_delta = None, 0
        n = ids.shape[1] - 1
        embeds = self.text.embed_tokens(ids[:, :n])  # (1, n, d)
        if prompt.pixel_values is not None:
            image = self.model.model.get_image_features(
                prompt.pixel_values.to(device, self.dtype), grid, return_dict=True
            ).pooler_output
            image = torch.cat(image, dim=0).to(embeds.dtype)  # (image tokens, d)
            mask = (ids[:, :n] == self.model.config.image_token_id)[..., None].expand_as(embeds)
            embeds = embeds.masked_scatter(mask, image)
            positions = positions[:, :, :n]
        else:
            positions = torch.arange(n, device=device)[None, None, :].expand(3, 1, n)
        kv = KVCache(None, ids[0, :n].tolist(), rope_delta, floor=n, reserve=n + GROW_MIN)
        return PendingPrefill(self, kv, embeds, positions, chunk_tokens if chunk_tokens > 0 else max(n, 1),
                              chunk_cells)

    def run(self, kv: KVCache, sequence: list[int], first: int) -> Iterator[LayerOutput]:
        """Make ``kv`` cover ``sequence`` and yield, after each layer, hidden states of positions
        ``first .. len(sequence)-1``.

        The cache is rolled back to the longest prefix it shares with ``sequence`` (never past
        ``first``) and only the remaining positions are computed: rollback, not recompute.
        """
        if first < kv.floor or first >= len(sequence):
            raise ValueError(f"position {first} outside [{kv.floor}, {len(sequence)})")
        start = min(common_prefix(kv.tokens, sequence), first)
        kv.truncate(start)
        new = sequence[start:]
        device = self.device
        ids = torch.tensor([self.known(new)], dtype=torch.long, device=device)  # (1, m')
        positions = torch.arange(start, len(sequence), device=device) + kv.rope_delta
        positions = positions[None, None, :].expand(3, 1, len(new))  # (3, 1, m'): M-RoPE's three axes alike
        with torch.inference_mode():
            embeds = self.text.embed_tokens(ids)
            kv.tokens.extend(new)
            done = False
            try:
                for out in self._layers(kv, embeds, positions):
                    yield LayerOutput(out.layer, out.hidden[first - start :])
                done = True
            finally:
                if not done:  # interrupted: drop the partial positions from every layer
                    kv.truncate(start)

    def run_batch(self, items: list[tuple[KVCache, list[int], int]]) -> Iterator[list[LayerOutput]]:
        """``run`` for several caches at once, in one forward per layer (batched verification across
        sessions, ``cloud/batching.py``): each ``(kv, sequence, first)`` is rolled back and extended as
        ``run`` would, and after each layer the list holds, per item, the hidden states (m_i, d) of its
        positions ``first_i ..``.

        The items' uncached parts (different lengths) are right-padded into one (B, M) batch; each row
        attends to its own cache (right-padded to the longest, P) and causally to its own new positions,
        through a (B, 1, M, P + M) mask; M-RoPE positions are each item's own (index + its rope_delta).
        Each item's new keys and values go back into its own cache after every layer. The arithmetic is
        the solo one's up to the float rounding of batched kernels (padding is masked, never mixed in):
        see ``test/cloud/test_batching.py`` for how close."""
        plans = []
        for kv, sequence, first in items:
            if first < kv.floor or first >= len(sequence):
                raise ValueError(f"position {first} outside [{kv.floor}, {len(sequence)})")
            start = min(common_prefix(kv.tokens, sequence), first)
            kv.truncate(start)
            plans.append((start, sequence[start:], first))
        B = len(items)
        M = max(len(new) for _, new, _ in plans)
        P = max(start for start, _, _ in plans)
        ids = torch.zeros((B, M), dtype=torch.long)  # built on the CPU, moved once
        positions = torch.zeros((3, B, M), dtype=torch.long)
        mask = torch.zeros((B, 1, M, P + M), dtype=torch.bool)
        causal = torch.ones((M, M), dtype=torch.bool).tril()
        for b, ((kv, _, _), (start, new, _)) in enumerate(zip(items, plans)):
            ids[b, : len(new)] = torch.tensor(self.known(new), dtype=torch.long)
            positions[:, b, : len(new)] = torch.arange(start, start + len(new)) + kv.rope_delta
            mask[b, 0, :, :start] = True
            mask[b, 0, :, P:] = causal  # padded query rows see only positions of this row: finite, unused
        ids, positions, mask = ids.to(self.device), positions.to(self.device), mask.to(self.device)
        caches = [kv for kv, _, _ in items]
        batch_cache = _BatchCache(caches, [start for start, _, _ in plans], [len(new) for _, new, _ in plans], P)
        with torch.inference_mode():
            embeds = self.text.embed_tokens(ids)
            for (kv, _, _), (_, new, _) in zip(items, plans):
                kv.tokens.extend(new)
            done = False
            try:
                rotary = self.text.rotary_emb(embeds, positions)
                h = embeds  # (B, M, d)
                for i, layer in enumerate(self.text.layers):
                    h = layer(h, attention_mask=mask, position_embeddings=rotary, past_key_values=batch_cache,
                              use_cache=True)
                    yield [LayerOutput(i + 1, h[b, first - start: len(new)])
                           for b, (start, new, first) in enumerate(plans)]
                done = True
            finally:
                if not done:  # interrupted: drop the partial positions from every layer of every cache
                    for kv, (start, _, _) in zip(caches, plans):
                        kv.truncate(start)

    def _layers(self, kv: KVCache, embeds: torch.Tensor, positions: torch.Tensor) -> Iterator[LayerOutput]:
        text = self.text
        mask = causal_mask(kv.past_length(0), embeds.shape[1], embeds.dtype, embeds.device)
        rotary = text.rotary_emb(embeds, positions)
        h = embeds  # (1, m, d)
        for i, layer in enumerate(text.layers):
            h = layer(h, attention_mask=mask, position_embeddings=rotary, past_key_values=kv, use_cache=True)
            yield LayerOutput(i + 1, h[0])

    def logits(self, hidden: torch.Tensor, shortlist: Shortlist | None = None) -> torch.Tensor:
        """LM head over the final norm: (m, d) → (m, V) float32 on the CPU, where verification and sampling
        (``spec``) read them, whatever the model's device (on a GPU: (γ+1) x V x 4 bytes a head, 3 MB at
        Qwen2-VL's V and γ = 4); with a ``shortlist``, only its ids are scored (the LM head's rows for
        them) and every other id gets −inf."""
        with torch.inference_mode():
            if shortlist is None:
                return self.model.lm_head(self.text.norm(hidden)).float().cpu()
            scored = torch.nn.functional.linear(self.text.norm(hidden), shortlist.weight, shortlist.bias)  # (m, k)
            out = torch.full((hidden.shape[0], self.vocab_size), -math.inf, dtype=torch.float32, device="cpu")  # (m, V)
            out[:, shortlist.ids] = scored.float().cpu()
            return out

    def shortlist(self, ids: torch.Tensor) -> Shortlist:
        """The LM head restricted to ``ids`` (k,), for ``logits``."""
        ids = ids.to(torch.long)
        head = self.model.lm_head
        on = ids.to(head.weight.device)
        with torch.inference_mode():
            return Shortlist(ids, head.weight[on], None if head.bias is None else head.bias[on])

    def known(self, tokens: list[int]) -> list[int]:
        """``tokens`` with each id past this model's rows, one only a larger vocabulary has (a drafter's
        context holds the verifier's tokens: Qwen2-VL-7B has 152,064 rows against the 2B's 151,936, both
        past the tokenizer's 151,657 ids), replaced by the last row, a padding row: it shapes only this
        model's own context, never the committed sequence (the cache keeps the real ids). Checked on the
        list, before any tensor exists: no device round trip per forward."""
        rows = self.text.embed_tokens.num_embeddings
        return tokens if not tokens or max(tokens) < rows else [min(t, rows - 1) for t in tokens]

    def final_logits(self, kv: KVCache, sequence: list[int], first: int) -> torch.Tensor:
        """Logits (m, V) of the last layer for positions ``first ..`` of ``sequence``."""
        *_, last = self.run(kv, sequence, first)
        return self.logits(last.hidden)


def causal_mask(past: int, m: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """The attention mask of m new positions after ``past`` cached ones, as HF's ``create_causal_mask``
    gives it for SDPA without padding: None where SDPA's own rule is exact (one query: it sees every
    key; no cache: SDPA's causal flag), else (1, 1, m, past + m) with 0 where query i may see key j
    (j ≤ past + i) and -inf elsewhere. Built once per forward as an additive float mask: SDPA turns a
    boolean mask into exactly this in every layer, which cost a pass over the mask per layer."""
    if m == 1 or past == 0:
        return None
    visible = torch.arange(past + m, device=device)[None, :] <= torch.arange(past, past + m, device=device)[:, None]
    return torch.zeros((1, 1, m, past + m), dtype=dtype, device=device).masked_fill_(~visible, float("-inf"))


def slice_length(done: int, remaining: int, chunk_tokens: int, chunk_cells: int) -> int:
    """Positions in the next prefill slice after ``done`` cached: at most ``chunk_tokens`` and, with
    ``chunk_cells`` > 0, the most s with s·(done + s) ≤ chunk_cells (at least 1)."""
    s = min(chunk_tokens, remaining)
    if chunk_cells > 0 and s * (done + s) > chunk_cells:
        s = max(1, int((math.sqrt(done * done + 4 * chunk_cells) - done) / 2))
        while s > 1 and s * (done + s) > chunk_cells:  # float rounding
            s -= 1
    return s


class PendingPrefill:
    """A prefill in progress, advanced one decoder layer of one slice per ``step``: ``kv`` ends up
    covering the prompt but its last position.

    embeds: (1, n, d) prompt embeddings with the image's features in place; positions: (3, 1, n)."""

    def __init__(self, stack: DecoderStack, kv: KVCache, embeds: torch.Tensor, positions: torch.Tensor,
                 chunk_tokens: int, chunk_cells: int = 0) -> None:
        self.stack, self.kv = stack, kv
        self._embeds, self._positions = embeds, positions
        self._chunk = chunk_tokens
        self._cells = chunk_cells
        self._done = 0  # positions cached in every layer
        self._layers: Iterator[LayerOutput] | None = None  # the slice in progress
        self._end = 0

    @property
    def total(self) -> int:
        return self._embeds.shape[1]

    @property
    def done(self) -> int:
        """Prompt positions cached (in every layer) so far."""
        return self._done

    def step(self, budget_s: float = 0.0) -> bool:
        """Run one decoder layer over the current slice (starting the next slice if none is in
        progress), and further layers and slices while less than ``budget_s`` seconds have passed
        (0: one layer); True once the whole prompt is cached. Where a step stops changes nothing in
        the arithmetic: the slices are fixed by the prompt's length."""
        t0 = time.perf_counter()
        with torch.inference_mode():  # per step: other sessions' work may run between steps
            while True:
                if self._layers is None and self._done < self.total:
                    self._end = self._done + slice_length(self._done, self.total - self._done, self._chunk,
                                                          self._cells)
                    self._layers = self.stack._layers(self.kv, self._embeds[:, self._done:self._end],
                                                      self._positions[:, :, self._done:self._end])
                if self._layers is not None and next(self._layers).layer == self.stack.num_layers:
                    self._layers, self._done = None, self._end
                if self._done >= self.total or time.perf_counter() - t0 >= budget_s:
                    break
        return self._done >= self.total


class _BatchCache:
    """The cache a batched forward's attention layers see: per layer, every item's cached keys and
    values right-padded to P positions, then the batch's new ones; each item's new positions are
    written back to its own ``KVCache`` at once (the padding never reaches a session's cache)."""

    def __init__(self, caches: list[KVCache], starts: list[int], lengths: list[int], past: int) -> None:
        self.caches, self.starts, self.lengths, self.past = caches, starts, lengths, past

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args, **kwargs):
        B, H, M, D = keys.shape  # (B, heads, M, head dim)
        past_k = keys.new_zeros((B, H, self.past, D))
        past_v = values.new_zeros((B, H, self.past, D))
        for b, (kv, start, m) in enumerate(zip(self.caches, self.starts, self.lengths)):
            layer: KVLayer = kv.layer(layer_idx)
            if start:
                past_k[b, :, :start] = layer.keys[0, :, :start]
                past_v[b, :, :start] = layer.values[0, :, :start]
            layer.truncate(start)
            layer.append(keys[b: b + 1, :, :m], values[b: b + 1, :, :m])
        return torch.cat([past_k, keys], dim=-2), torch.cat([past_v, values], dim=-2)
