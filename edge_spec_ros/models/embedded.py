"""The embedded default model pair: small Qwen2-VL models shipped with the package, no download.

``embedded_pair()`` is ``load_pair("embedded")`` (``models/pairs.py``): the pair ``edge-spec-ros
train-sim-pair`` trained on the simulated room (``assets/sim_pair``: a 6-layer, 128-wide verifier
with trained exit adapters at layers 1..5 and a 3-layer, 64-wide drafter distilled from it, float16
safetensors, a few MB). It reads a camera frame of that room and an instruction and answers with one
line of reasoning and one action.

``random_pair()`` is the untrained pair the protocol tests use: a 6-layer, 64-wide random verifier
(logit-lens exits) and its first ``DRAFT_LAYERS`` layers as a self-speculative drafter, because two
unrelated random models would almost never agree. Real deployments load Qwen2-VL-2B / -7B instead
(``--drafter/--verifier``, the same ``load_pair``).
"""

from __future__ import annotations

from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.pairs import (
    EMBEDDED,
    PROMPT_FILE,
    SIM_PAIR_DIR,
    ModelPair,
    load_pair,
    pair_max_pixels,
    resolve,
)
from edge_spec_ros.models.tiny import VERIFIER_SPEC, build_tiny_qwen2vl, truncated_copy
from edge_spec_ros.models.tokenizer import load_tokenizer
from edge_spec_ros.models.verifier import EarlyExitVerifier

__all__ = ["DRAFT_LAYERS", "PROMPT_FILE", "SIM_PAIR_DIR", "VERIFIER_SEED", "embedded_max_pixels", "embedded_pair",
           "random_pair"]

DRAFT_LAYERS = 4
VERIFIER_SEED = 0


def embedded_max_pixels() -> int:
    """The image pixel budget the shipped pair was trained at."""
    return pair_max_pixels(resolve(EMBEDDED))


def embedded_pair(quantize_drafter: str = "none") -> ModelPair:
    """The shipped pair trained on the simulated room: ``load_pair("embedded")``."""
    return load_pair(EMBEDDED, quantize_drafter=quantize_drafter)


def random_pair(quantize_drafter: str = "none") -> ModelPair:
    """The untrained pair: random verifier, its first layers as drafter (deterministic)."""
    tokenizer = load_tokenizer()
    target = build_tiny_qwen2vl(VERIFIER_SPEC, tokenizer, seed=VERIFIER_SEED)
    drafter = Drafter(truncated_copy(target, DRAFT_LAYERS), quantize=quantize_drafter)
    return ModelPair(drafter, EarlyExitVerifier(target), tokenizer, source="random")
