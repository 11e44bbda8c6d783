"""The project's own Qwen2-VL-compatible tokenizer, trained offline with ``tokenizers``.

Real deployments use the checkpoint's tokenizer (``Qwen/Qwen2-VL-2B-Instruct`` shares its vocabulary
with the 7B verifier). Tests and the embedded demo use this small byte-level BPE, which carries the
same special tokens and chat template as Qwen2-VL, so the same processor code serves both.

``tokenizer_fingerprint`` (any tokenizer) names the id space a model's distributions are over; DRAGON
(dragon/wire.py) refuses to aggregate two sides whose fingerprints differ.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


FINGERPRINT_BYTES = 16  # the sha256 digest's first 16 bytes: 32 lowercase hex digits
FINGERPRINT_DOMAIN = b"edge_spec_ros tokenizer fingerprint 1\n"  # changes if the hashed layout ever changes
_U64 = struct.Struct("!Q")


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short, stable digest of what a token id means: 32 lowercase hex digits.

    Covered: the id → token-string mapping over the whole vocabulary, added and special tokens
    included (``tokenizer.get_vocab()``: a ``transformers`` tokenizer, or a ``tokenizers.Tokenizer``),
    every (id, token) pair in order of id, and the vocabulary size (``len(tokenizer)``, or
    ``get_vocab_size(with_added_tokens=True)``). Two tokenizers with equal fingerprints give the same
    id the same string, so a distribution over ids means the same thing on both sides.

    Not covered: how text becomes tokens — the normaliser, pre-tokeniser, BPE merges, post-processor
    and decoder, the chat template, which token plays eos or pad, and the model's output size V (it
    may exceed the tokenizer's; DRAGON compares it on its own, DragonOpened.vocab_size). Hashing the serialised state
    (``tokenizer.json``) would cover them, but its layout changes between ``tokenizers`` releases, so
    two sides with one vocabulary and different library versions would disagree. Two tokenizers that
    share the vocabulary but split text differently pass: each side still reads its own prompt with
    its own tokenizer, and the generated ids mean the same strings to both.

    Layout hashed (sha256, first ``FINGERPRINT_BYTES`` bytes as hex): ``FINGERPRINT_DOMAIN``, then
    the size and the number of pairs as big-endian u64, then for each pair sorted by (id, token) the
    id and the UTF-8 length as big-endian u64 and the UTF-8 bytes. Deterministic across processes
    and runs: no dependence on dict order or Python's hash seed. ValueError for an empty vocabulary,
    an id that is not a non-negative integer or a token that is not a string."""
    vocab: Mapping[str, int] = tokenizer.get_vocab()
    if not vocab:
        raise ValueError("the tokenizer has an empty vocabulary")
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else tokenizer.get_vocab_size(with_added_tokens=True)
    pairs = []
    for token, index in vocab.items():
        if not isinstance(token, str):
            raise ValueError(f"token {token!r} is not a string")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"token {token!r} has id {index!r}: ids are non-negative integers")
        pairs.append((index, token))
    pairs.sort()
    digest = hashlib.sha256(FINGERPRINT_DOMAIN)
    digest.update(_U64.pack(int(size)) + _U64.pack(len(pairs)))
    for index, token in pairs:
        raw = token.encode("utf-8", "surrogatepass")
        digest.update(_U64.pack(index) + _U64.pack(len(raw)) + raw)
    return digest.digest()[:FINGERPRINT_BYTES].hex()
