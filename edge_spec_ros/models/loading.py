"""Loading one Qwen2-VL checkpoint from a hub id or a local path: the primitive under ``models/pairs.py``,
whose ``load_pair`` is what commands and nodes call (it resolves 'embedded', 'smollm2', a directory
or a hub id into checkpoints and loads the parts asked for)."""

from __future__ import annotations

import torch
from transformers import Qwen2VLForConditionalGeneration

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; choose one of {sorted(DTYPES)}") from None


def load_qwen2vl(name_or_path: str, dtype: str = "float32", device: str = "cpu") -> Qwen2VLForConditionalGeneration:
    """``from_pretrained`` with SDPA attention; a hub id needs the weights in the local HF cache or
    network access, a directory needs ``config.json`` + safetensors."""
    model = Qwen2VLForConditionalGeneration.from_pretrained(
        name_or_path, dtype=torch_dtype(dtype), attn_implementation="sdpa"
    )
    return model.to(device).eval()
