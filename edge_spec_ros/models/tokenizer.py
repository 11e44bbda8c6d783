"""The project's own Qwen2-VL-compatible tokenizer, trained offline with ``tokenizers``.

Real deployments use the checkpoint's tokenizer (``Qwen/Qwen2-VL-2B-Instruct`` shares its vocabulary
with the 7B verifier). Tests and the embedded demo use this small byte-level BPE, which carries the
same special tokens and chat template as Qwen2-VL, so the same processor code serves both.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from edge_spec_ros.models.corpus import corpus

TOKENIZER_DIR = Path(__file__).resolve().parent.parent / "assets" / "tokenizer"

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Qwen2-VL's chat template, reduced to what the robot sends: text and at most one image per turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def train_tokenizer(vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on the project's corpus; deterministic for a given ``vocab_size``."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    return _wrap(tok)


def _wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def load_tokenizer(path: str | Path = TOKENIZER_DIR) -> PreTrainedTokenizerFast:
    """Load the shipped tokenizer (``assets/tokenizer/tokenizer.json``)."""
    file = Path(path) / "tokenizer.json"
    if not file.is_file():
        raise FileNotFoundError(f"no tokenizer at {file}; build it with `edge-spec-ros build-tokenizer`")
    return _wrap(Tokenizer.from_file(str(file)))


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, path: str | Path = TOKENIZER_DIR) -> Path:
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
    return out / "tokenizer.json"
