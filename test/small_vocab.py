"""A small-vocabulary Qwen2-VL pair and the chi-square machinery of the sampled-exactness tests."""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import chisquare

from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.models.tiny import TinyModelSpec, build_tiny_qwen2vl
from edge_spec_ros.spec.sampling import SamplingConfig

VOCAB = 8
SMALL = TinyModelSpec(hidden_size=32, num_layers=3, num_heads=2, num_kv_heads=1, intermediate_size=64,
                      vision_depth=1, init_std=0.15, vocab_size=VOCAB)
N_RUNS = 1500
SAMPLING = SamplingConfig(temperature=1.0)


def small_target(tokenizer):
    """(target model, text-only prompt) with a vocabulary of ``VOCAB``."""
    target = build_tiny_qwen2vl(SMALL, tokenizer, seed=3)
    prompt = EncodedPrompt(input_ids=torch.tensor([1, 3, 4, 5]), mm_token_type_ids=torch.zeros(4, dtype=torch.int32))
    return target, prompt


def exact_two_token_distribution(target, prompt) -> np.ndarray:
    """P(x1, x2) = p(x1 | prompt) p(x2 | prompt, x1) by enumeration: (V·V,)."""
    with torch.inference_mode():
        ids = prompt.input_ids[None]
        p1 = torch.softmax(target(input_ids=ids).logits[0, -1].double(), -1)
        both = torch.cat([ids.repeat(VOCAB, 1), torch.arange(VOCAB)[:, None]], dim=1)  # (V, n+1)
        p2 = torch.softmax(target(input_ids=both).logits[:, -1].double(), -1)  # (V, V)
    return (p1[:, None] * p2).flatten().numpy()


def chi_square_pvalue(samples: list[tuple[int, int]], expected_p: np.ndarray) -> float:
    counts = np.zeros(VOCAB * VOCAB)
    for a, b in samples:
        counts[a * VOCAB + b] += 1
    expected = expected_p * len(samples)
    keep = expected >= 5  # merge the sparse cells into one bin so the chi-square approximation holds
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs, exp).pvalue)
