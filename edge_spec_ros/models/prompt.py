"""Image + instruction → model inputs, with transformers' own Qwen2-VL image processor (PIL backend).

``qwen-vl-utils`` and the torchvision image processor are not used: with the CPU torch build the
PyPI torchvision fails to import, and the PIL backend resizes the same way (``smart_resize``).
``Qwen2VLProcessor`` itself is not used either: its constructor insists on a video processor, which
needs torchvision. What it adds is one step, done here: each ``<|image_pad|>`` placeholder becomes
``grid_t·grid_h·grid_w / merge²`` copies, one per merged patch.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image
from transformers import PreTrainedTokenizerBase
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

# Short on purpose: it is part of every prompt the robot sends, and 21 tokens of the project's
# tokenizer (the shipped pair was trained with it; a real checkpoint may be given its own).
DEFAULT_SYSTEM_PROMPT = "A robot reads the camera image and decides what to do next. Reasoning, then one Action."


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
        # A text-only tokenizer (e.g. SmolLM2's, see models/smollm2.py) has no image placeholder:
        # convert_tokens_to_ids would return its unknown-token id, which would then count as an image.
        self.image_token_id: int | None = (tokenizer.convert_tokens_to_ids(self.image_token)
                                           if self.image_token in tokenizer.get_vocab() else None)

    @property
    def supports_images(self) -> bool:
        return self.image_token_id is not None

    def encode(self, instruction: str, image: np.ndarray | Image.Image | None = None) -> EncodedPrompt:
        """Encode one instruction with an optional RGB image (H, W, 3) uint8.

        Without an image the user turn is plain text, which every ChatML template renders (the
        Qwen2-VL template gives the same text for it as for a list with one text part).
        """
        if image is not None and not self.supports_images:
            raise ValueError(f"this tokenizer has no {self.image_token} token: text-only prompts only")
        content: str | list[dict] = instruction
        if image is not None:
            content = [{"type": "image"}, {"type": "text", "text": instruction}]
        messages = [
            {"role": "system", "content": self.config.system_prompt},
            {"role": "user", "content": content},
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        vision = self._vision(image)
        if vision is not None:
            text = text.replace(self.image_token, self.image_token * self._image_tokens(vision[1]), 1)
        ids = self.tokenizer(text, return_tensors="pt")["input_ids"][0]
        return self._prompt(ids, vision)

    def from_ids(self, input_ids: np.ndarray | list[int], image: np.ndarray | Image.Image | None) -> EncodedPrompt:
        """Rebuild a prompt from token ids encoded elsewhere (the robot) and the image it sent.

        Raises ValueError when the ids' image placeholders do not match the image's size.
        """
        ids = torch.as_tensor(np.asarray(input_ids, dtype=np.int64))
        if ids.ndim != 1 or ids.numel() < 2:
            raise ValueError(f"a prompt needs at least 2 token ids in one dimension, got shape {tuple(ids.shape)}")
        if image is not None and not self.supports_images:
            raise ValueError(f"this tokenizer has no {self.image_token} token: text-only prompts only")
        vision = self._vision(image)
        placeholders = int((ids == self.image_token_id).sum()) if self.supports_images else 0
        expected = self._image_tokens(vision[1]) if vision is not None else 0
        if placeholders != expected:
            raise ValueError(f"prompt has {placeholders} image placeholders, the image needs {expected}")
        return self._prompt(ids, vision)

    def _vision(self, image: np.ndarray | Image.Image | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(pixel_values (patches, C·T·P·P), image_grid_thw (1, 3)) or None."""
        if image is None:
            return None
        if isinstance(image, np.ndarray):
            if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
                raise ValueError(f"expected an RGB uint8 image (H, W, 3), got {image.dtype} {image.shape}")
            image = Image.fromarray(image)
        out = self.image_processor(images=[image.convert("RGB")], return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    def _image_tokens(self, grid: torch.Tensor) -> int:
        return int(grid[0].prod()) // self.image_processor.merge_size**2

    def _prompt(self, ids: torch.Tensor, vision: tuple[torch.Tensor, torch.Tensor] | None) -> EncodedPrompt:
        return EncodedPrompt(
            input_ids=ids,
            mm_token_type_ids=(ids == self.image_token_id).to(torch.int32) if self.supports_images
            else torch.zeros_like(ids, dtype=torch.int32),
            pixel_values=None if vision is None else vision[0],
            image_grid_thw=None if vision is None else vision[1],
        )

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)


def encode_image(image: np.ndarray, codec: str = "jpeg", quality: int = 90) -> bytes:
    """RGB uint8 (H, W, 3) → JPEG or PNG file bytes (the image travels once per decision)."""
    if codec not in ("jpeg", "png"):
        raise ValueError(f"image codec must be jpeg or png, got {codec!r}")
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format=codec.upper(), **({"quality": quality} if codec == "jpeg" else {}))
    return buf.getvalue()


def decode_image(data: bytes) -> np.ndarray:
    """JPEG/PNG bytes → RGB uint8 (H, W, 3); ValueError for anything else."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            return np.asarray(img.convert("RGB"))
    except (OSError, Image.DecompressionBombError) as exc:
        raise ValueError(f"undecodable image ({len(data)} bytes): {exc}") from None
