"""The embedded default model pair: small Qwen2-VL models built on the spot, no download.

Verifier: ``VERIFIER_SPEC`` (6 layers, d = 64) with untrained (logit-lens) exits at layers 1..5.
Drafter: the verifier's first ``DRAFT_LAYERS`` layers with its vision tower, norm and LM head — a
self-speculative drafter, because two unrelated random models would almost never agree and the
demo would show τ = 1. Real deployments load Qwen2-VL-2B / -7B instead (``--drafter/--verifier``).
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.tiny import VERIFIER_SPEC, build_tiny_qwen2vl, truncated_copy
from edge_spec_ros.models.tokenizer import load_tokenizer
from edge_spec_ros.models.verifier import EarlyExitVerifier

DRAFT_LAYERS = 4
VERIFIER_SEED = 0


@dataclass
class ModelPair:
    drafter: Drafter
    verifier: EarlyExitVerifier
    tokenizer: PreTrainedTokenizerBase


def embedded_pair(quantize_drafter: bool = False) -> ModelPair:
    tokenizer = load_tokenizer()
    target = build_tiny_qwen2vl(VERIFIER_SPEC, tokenizer, seed=VERIFIER_SEED)
    drafter = Drafter(truncated_copy(target, DRAFT_LAYERS), quantize=quantize_drafter)
    return ModelPair(drafter, EarlyExitVerifier(target), tokenizer)
