"""Small Qwen2-VL models built from configs, for tests and the embedded demo.

The architecture is the real ``Qwen2VLForConditionalGeneration`` (vision tower, patch merger,
M-RoPE, GQA decoder); only the sizes shrink so a model weighs a few MB. Nothing is fetched from a hub.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase, Qwen2VLConfig, Qwen2VLForConditionalGeneration

from edge_spec_ros.models.tokenizer import load_tokenizer


@dataclass(frozen=True)
class TinyModelSpec:
    """Sizes of a small Qwen2-VL. ``init_std`` > HF's 0.02 gives peaked, non-trivial distributions."""

    hidden_size: int = 64
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    vision_depth: int = 1
    vision_embed_dim: int = 32
    vision_heads: int = 2
    init_std: float = 0.3
    vocab_size: int | None = None  # None: the tokenizer's size rounded up to a multiple of 64


# The verifier is deeper and wider than the drafter, as Qwen2-VL-7B is to -2B (28 vs 28 layers there,
# but 3584 vs 1536 wide); here depth differs too so that early exits have room to differ.
VERIFIER_SPEC = TinyModelSpec(hidden_size=64, num_layers=6, num_heads=4, num_kv_heads=2, intermediate_size=128)
DRAFTER_SPEC = TinyModelSpec(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64)


def tiny_config(spec: TinyModelSpec, tokenizer: PreTrainedTokenizerBase) -> Qwen2VLConfig:
    vocab = spec.vocab_size or -(-len(tokenizer) // 64) * 64
    ids = tokenizer.convert_tokens_to_ids
    return Qwen2VLConfig(
        text_config=dict(
            vocab_size=vocab,
            hidden_size=spec.hidden_size,
            intermediate_size=spec.intermediate_size,
            num_hidden_layers=spec.num_layers,
            num_attention_heads=spec.num_heads,
            num_key_value_heads=spec.num_kv_heads,
            max_position_embeddings=4096,
            initializer_range=spec.init_std,
            # M-RoPE sections must sum to head_dim / 2 (Qwen2-VL-7B: [16, 24, 24] of 64).
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=_mrope_sections(spec)),
            bos_token_id=ids("<|endoftext|>"),
            eos_token_id=ids("<|im_end|>"),
            pad_token_id=ids("<|endoftext|>"),
            tie_word_embeddings=False,
        ),
        vision_config=dict(
            depth=spec.vision_depth,
            embed_dim=spec.vision_embed_dim,
            hidden_size=spec.hidden_size,
            num_heads=spec.vision_heads,
            mlp_ratio=2,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            initializer_range=spec.init_std,
        ),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )


def _mrope_sections(spec: TinyModelSpec) -> list[int]:
    half = spec.hidden_size // spec.num_heads // 2
    t = half // 4
    h = (half - t) // 2
    return [t, h, half - t - h]


def build_tiny_qwen2vl(
    spec: TinyModelSpec, tokenizer: PreTrainedTokenizerBase | None = None, seed: int = 0
) -> Qwen2VLForConditionalGeneration:
    """Build a randomly initialised small Qwen2-VL (deterministic for a given ``seed``)."""
    tokenizer = tokenizer or load_tokenizer()
    config = tiny_config(spec, tokenizer)
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config)
    return model.eval()


def truncated_copy(model: Qwen2VLForConditionalGeneration, num_layers: int) -> Qwen2VLForConditionalGeneration:
    """A drafter made of the target's vision tower, embeddings, first ``num_layers`` decoder layers,
    final norm and LM head (a self-speculative draft). With random weights it still agrees with the
    target often enough to exercise every acceptance branch, which an unrelated random drafter does not.
    """
    config = copy.deepcopy(model.config)
    config.text_config.num_hidden_layers = num_layers
    config.text_config.layer_types = config.text_config.layer_types[:num_layers]
    draft = Qwen2VLForConditionalGeneration(config)
    state = {k: v for k, v in model.state_dict().items() if k in draft.state_dict()}
    draft.load_state_dict(state)
    return draft.eval()
