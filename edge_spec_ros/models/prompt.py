"""Image + instruction → model inputs, with transformers' own Qwen2-VL image processor (PIL backend).

``qwen-vl-utils`` and the torchvision image processor are not used: with the CPU torch build the
PyPI torchvision fails to import, and the PIL backend resizes the same way (``smart_resize``).
``Qwen2VLProcessor`` itself is not used either: its constructor insists on a video processor, which
needs torchvision. What it adds is one step, done here: each ``<|image_pad|>`` placeholder becomes
``grid_t·grid_h·grid_w / merge²`` copies, one per merged patch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image
from transformers import PreTrainedTokenizerBase
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

DEFAULT_SYSTEM_PROMPT = (
    "You control a legged robot. Look at the camera image and the instruction. "
    "Answer with one line of reasoning, then 'Action:' and one action."
)


@dataclass(frozen=True)
class PromptConfig:
    """How images are resized: the pixel budget bounds the number of image tokens.

    Qwen2-VL merges 2x2 patches of 14 px, so one image token covers 28x28 px.
    """

    min_pixels: int = 56 * 56
    max_pixels: int = 112 * 112
    system_prompt: str = DEFAULT_SYSTEM_PROMPT


@dataclass(frozen=True)
class EncodedPrompt:
    """Model inputs for one decision (batch of one).

    input_ids: (n,) token ids, image placeholders expanded; pixel_values: (patches, C·T·P·P) or None;
    image_grid_thw: (1, 3) or None; mm_token_type_ids: (n,) 0 = text, 1 = image.
    """

    input_ids: torch.Tensor
    mm_token_type_ids: torch.Tensor
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


class PromptEncoder:
    """Formats chat turns with the tokenizer's chat template and runs the Qwen2-VL processor."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, config: PromptConfig | None = None) -> None:
        self.config = config or PromptConfig()
        self.image_processor = Qwen2VLImageProcessorPil(
            min_pixels=self.config.min_pixels, max_pixels=self.config.max_pixels
        )
        self.tokenizer = tokenizer
        self.image_token = "<|image_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)

    def encode(self, instruction: str, image: np.ndarray | Image.Image | None = None) -> EncodedPrompt:
        """Encode one instruction with an optional RGB image (H, W, 3) uint8."""
        content: list[dict] = [{"type": "image"}] if image is not None else []
        content.append({"type": "text", "text": instruction})
        messages = [
            {"role": "system", "content": self.config.system_prompt},
            {"role": "user", "content": content},
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        pixel_values = grid = None
        if image is not None:
            if isinstance(image, np.ndarray):
                if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
                    raise ValueError(f"expected an RGB uint8 image (H, W, 3), got {image.dtype} {image.shape}")
                image = Image.fromarray(image)
            vision = self.image_processor(images=[image.convert("RGB")], return_tensors="pt")
            pixel_values, grid = vision["pixel_values"], vision["image_grid_thw"]
            n_tokens = int(grid[0].prod()) // self.image_processor.merge_size**2
            text = text.replace(self.image_token, self.image_token * n_tokens, 1)
        ids = self.tokenizer(text, return_tensors="pt")["input_ids"][0]
        return EncodedPrompt(
            input_ids=ids,
            mm_token_type_ids=(ids == self.image_token_id).to(torch.int32),
            pixel_values=pixel_values,
            image_grid_thw=grid,
        )

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)
