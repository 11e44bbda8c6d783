"""A drafter with fewer vocabulary rows than its verifier (as Qwen2-VL-2B's 151,936 to -7B's 152,064)
and the two-token chi-square expectation for decodes that stop at an id only the verifier has.

Those ids are stop tokens in the decodes here: a decode ends at one (kept in the output), which keeps
the two-token expectation simple. The extra ids still carry the verifier's mass, so the residual over
them is exercised. (A drafter that reads one back embeds it as its last row: ``DecoderStack.known``.)
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from transformers import Qwen2VLForConditionalGeneration


def narrow_copy(model: Qwen2VLForConditionalGeneration, vocab: int) -> Qwen2VLForConditionalGeneration:
    """A copy of ``model`` whose embeddings and LM head keep their first ``vocab`` rows only (or, with
    ``vocab`` above their rows, gain random ones)."""
    config = copy.deepcopy(model.config)
    config.text_config.vocab_size = vocab
    narrow = Qwen2VLForConditionalGeneration(config)
    state = {k: (_rows(v, vocab) if k.endswith(("embed_tokens.weight", "lm_head.weight")) else v)
             for k, v in model.state_dict().items()}
    narrow.load_state_dict(state)
    assert narrow.get_output_embeddings().weight.shape[0] == vocab
    return narrow.eval()


def _rows(weight: torch.Tensor, vocab: int) -> torch.Tensor:
    more = vocab - weight.shape[0]
    if more <= 0:
        return weight[:vocab]
    return torch.cat([weight, torch.randn(more, weight.shape[1], generator=torch.Generator().manual_seed(0))])


def stopped_two_token_distribution(joint: np.ndarray, vocab: int, stops: range) -> np.ndarray:
    """The exact two-token joint (V·V,) of a decode that ends at a first token in ``stops``: its mass
    P(x1) sits in cell (x1, 0) (``as_pair`` maps such a one-token output there)."""
    out = joint.reshape(vocab, vocab).copy()
    for x1 in stops:
        out[x1] = 0.0
        out[x1, 0] = joint.reshape(vocab, vocab)[x1].sum()
    return out.flatten()


def as_pair(tokens: list[int]) -> tuple[int, int]:
    """A decode's output as a cell of ``stopped_two_token_distribution``."""
    return (tokens[0], tokens[1]) if len(tokens) > 1 else (tokens[0], 0)
