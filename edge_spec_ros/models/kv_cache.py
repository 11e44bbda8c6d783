"""A KV cache that knows which tokens it holds, so it can be rolled back to any accepted prefix.

Speculative decoding appends γ draft tokens to the cache every round and keeps only the accepted
prefix: ``truncate`` drops the rest in O(layers) without recomputing anything. ``fork`` gives a
pre-draft worker its own copy of the committed prefix (FSD paper, Algorithm 1, PREDRAFT).

Each layer's keys and values live in preallocated buffers written in place: appending m positions
copies those m positions only, not the whole cache (``torch.cat`` per layer per forward made a long
prefill in slices O(n²) in copies). A buffer is reallocated, with room to spare, only when full.
"""

from __future__ import annotations

import torch

GROW_MIN = 64  # positions of spare room a (re)allocated buffer gets beyond what it needs now


class KVLayer:
    """One decoder layer's cache: (1, H_kv, capacity, D) key and value buffers whose first ``length``
    positions are valid. ``keys`` / ``values`` are views of those positions (no copy)."""

    __slots__ = ("_k", "_v", "length", "_hint")

    def __init__(self, keys: torch.Tensor | None = None, values: torch.Tensor | None = None,
                 capacity: int = 0) -> None:
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self.length = 0
        self._hint = capacity  # the first allocation's size, at least
        if keys is not None and values is not None:
            self.append(keys, values)

    @property
    def keys(self) -> torch.Tensor | None:
        return None if self._k is None else self._k[..., :self.length, :]

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._v is None else self._v[..., :self.length, :]

    @property
    def capacity(self) -> int:
        return 0 if self._k is None else self._k.shape[-2]

    def _allocate(self, like: torch.Tensor, capacity: int) -> None:
        with torch.inference_mode():
            shape = (*like.shape[:-2], capacity, like.shape[-1])
            k = like.new_empty(shape)
            v = like.new_empty(shape)
            if self._k is not None and self.length:
                k[..., :self.length, :] = self._k[..., :self.length, :]
                v[..., :self.length, :] = self._v[..., :self.length, :]
            self._k, self._v = k, v

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write (1, H_kv, m, D) keys and values after the valid positions; returns views of all of
        them (what the attention of the new positions reads)."""
        end = self.length + keys.shape[-2]
        if end > self.capacity:
            self._allocate(keys, max(end + GROW_MIN, self.capacity + self.capacity // 2, self._hint))
        with torch.inference_mode():
            self._k[..., self.length:end, :] = keys
            self._v[..., self.length:end, :] = values
        self.length = end
        return self.keys, self.values

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)


class KVCache:
    """Per-layer keys and values (``layers``) plus the token ids they cover and the M-RoPE offset.

    It is the ``past_key_values`` the decoder layers see (``update``). tokens: the ids whose
    keys/values are cached, ``len(tokens) == length``; rope_delta: Qwen2-VL's M-RoPE offset for text
    positions after the image (position = index + delta); floor: the shortest length it may be
    truncated to (the prefilled image cannot be re-fed as ids); reserve: positions a layer's first
    buffer holds (a prefill reserves its prompt's length and some room to decode).
    """

    def __init__(self, layers: list[KVLayer] | None = None, tokens: list[int] | None = None,
                 rope_delta: int = 0, floor: int = 0, reserve: int = 0) -> None:
        self.layers: list[KVLayer] = layers if layers is not None else []
        self.tokens: list[int] = list(tokens or [])
        self.rope_delta = rope_delta
        self.floor = floor
        self.reserve = reserve

    @property
    def length(self) -> int:
        return len(self.tokens)

    def layer(self, index: int) -> KVLayer:
        while len(self.layers) <= index:
            self.layers.append(KVLayer(capacity=self.reserve))
        return self.layers[index]

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args, **kwargs):
        """The decoder layer's cache call: append this forward's keys and values (1, H_kv, m, D) to
        layer ``layer_idx`` and return all its keys and values."""
        return self.layer(layer_idx).append(keys, values)

    def past_length(self, layer_idx: int) -> int:
        """Positions cached in layer ``layer_idx`` (0 before its first forward)."""
        return self.layers[layer_idx].length if layer_idx < len(self.layers) else 0

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` cached positions."""
        if length < self.floor:
            raise ValueError(f"cannot roll the cache back to {length} < prefilled prompt length {self.floor}")
        for layer in self.layers:
            # Per layer and by absolute length: a forward pass interrupted part-way leaves the
            # first layers longer than the rest, and this still restores a consistent cache.
            layer.truncate(length)
        del self.tokens[length:]

    def fork(self, length: int | None = None) -> "KVCache":
        """An independent copy of the first ``length`` positions (default: all)."""
        n = self.length if length is None else min(length, self.length)
        if n < self.floor:
            raise ValueError(f"cannot fork the cache at {n} < prefilled prompt length {self.floor}")
        layers = [KVLayer(layer.keys[..., :n, :], layer.values[..., :n, :], n + GROW_MIN) if layer.keys is not None
                  else KVLayer() for layer in self.layers]
        return KVCache(layers, self.tokens[:n], self.rope_delta, self.floor)


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
