"""A small-vocabulary Qwen2-VL pair and the chi-square machinery of the sampled-exactness tests."""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import chisquare

from edge_spec_ros.decoding.reference import DecodeConfig
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.models.tiny import TinyModelSpec, build_tiny_qwen2vl
from edge_spec_ros.spec.sampling import SamplingConfig

VOCAB = 8
SMALL = TinyModelSpec(hidden_size=32, num_layers=3, num_heads=2, num_kv_heads=1, intermediate_size=64,
                      vision_depth=1, init_std=0.15, vocab_size=VOCAB)
# Samples per chi-square test (seeds 0..N_RUNS-1, so every p-value is a fixed number). 600 keeps the
# negative controls of test/decoding/test_exactness.py far below their 1e-6: a drafter reporting the
# wrong q gives p = 1e-25 (1e-64 with 1500 samples), the same with top-3 drafting 2e-177.
N_RUNS = 600
SAMPLING = SamplingConfig(temperature=1.0)


def two_tokens(seed: int) -> DecodeConfig:
    """A decision of the sampled-exactness tests: two tokens, γ = 2, temperature 1, seed ``seed``."""
    return DecodeConfig(max_new_tokens=2, gamma=2, sampling=SAMPLING, seed=seed)


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
    exp *= obs.sum() / exp.sum()  # the joint sums to 1 only up to rounding; chisquare wants equal totals
    return float(chisquare(obs, exp).pvalue)


def aggregated_two_token_joint(robot, cloud, prompt: list[int], v: int) -> np.ndarray:
    """Exact P(x_1, x_2) of DRAGON's aggregated target p_t = η_l p_l + η_r p_r over two tokens, (V·V,):
    ``robot`` and ``cloud`` map a token prefix to a side's local aggregate (``probs``, ``log_h``)."""
    from edge_spec_ros.dragon.aggregation import side_weights, target_distribution

    out = np.zeros(v * v)
    a_l, a_r = robot(prompt), cloud(prompt)
    p1 = target_distribution(a_l.probs, a_r.probs, side_weights(a_l.log_h, a_r.log_h)[0])
    for x1 in range(v):
        b_l, b_r = robot(prompt + [x1]), cloud(prompt + [x1])
        p2 = target_distribution(b_l.probs, b_r.probs, side_weights(b_l.log_h, b_r.log_h)[0])
        out[x1 * v:(x1 + 1) * v] = (p1[x1] * p2).numpy()
    return out
