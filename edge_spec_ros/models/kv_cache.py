"""A KV cache that knows which tokens it holds, so it can be rolled back to any accepted prefix.

Speculative decoding appends γ draft tokens to the cache every round and keeps only the accepted
prefix: ``truncate`` drops the rest in O(layers) without recomputing anything. ``fork`` gives a
pre-draft worker its own copy of the committed prefix (FSD paper, Algorithm 1, PREDRAFT).
"""

from __future__ import annotations

from transformers import DynamicCache


class KVCache:
    """``transformers.DynamicCache`` plus the token ids it covers and the M-RoPE offset.

    tokens: the ids whose keys/values are cached, ``len(tokens) == length``;
    rope_delta: Qwen2-VL's M-RoPE offset for text positions after the image (position = index + delta);
    floor: the shortest length it may be truncated to (the prefilled image cannot be re-fed as ids).
    """

    def __init__(self, cache: DynamicCache | None = None, tokens: list[int] | None = None,
                 rope_delta: int = 0, floor: int = 0) -> None:
        self.cache = cache if cache is not None else DynamicCache()
        self.tokens: list[int] = list(tokens or [])
        self.rope_delta = rope_delta
        self.floor = floor

    @property
    def length(self) -> int:
        return len(self.tokens)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` cached positions."""
        if length < self.floor:
            raise ValueError(f"cannot roll the cache back to {length} < prefilled prompt length {self.floor}")
        for layer in self.cache.layers:
            # Per layer and by absolute length: a forward pass interrupted part-way leaves the
            # first layers longer than the rest, and this still restores a consistent cache.
            if getattr(layer, "keys", None) is not None and layer.keys.shape[-2] > length:
                layer.keys = layer.keys[..., :length, :]
                layer.values = layer.values[..., :length, :]
        del self.tokens[length:]

    def fork(self, length: int | None = None) -> "KVCache":
        """An independent copy of the first ``length`` positions (default: all)."""
        n = self.length if length is None else min(length, self.length)
        if n < self.floor:
            raise ValueError(f"cannot fork the cache at {n} < prefilled prompt length {self.floor}")
        data = [(layer.keys[..., :n, :].clone(), layer.values[..., :n, :].clone()) for layer in self.cache.layers]
        return KVCache(DynamicCache(ddp_cache_data=data), self.tokens[:n], self.rope_delta, self.floor)


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
