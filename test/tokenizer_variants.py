"""Variants of the shipped tokenizer (assets/tokenizer/tokenizer.json) with the same vocabulary size:
two token strings swapped, or one token string renamed. Written to a folder and loaded with
models/tokenizer.load_tokenizer, as a deployment would load a tokenizer of its own."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from edge_spec_ros.models.tokenizer import TOKENIZER_DIR, load_tokenizer

SWAPPED = ("!", '"')  # base tokens no merge uses: swapping their ids keeps the BPE loadable
RENAMED = ("$", "$$$")  # a base token no merge uses, renamed to a string the vocabulary lacks


def variant(folder: Path, edit: Callable[[dict], None]):
    """The shipped tokenizer after ``edit(tokenizer_json)``, saved under ``folder`` and loaded back."""
    data = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text())
    edit(data)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    return load_tokenizer(folder)


def swap_two_tokens(data: dict) -> None:
    vocab = data["model"]["vocab"]
    a, b = SWAPPED
    assert not any(a in pair or b in pair for pair in data["model"]["merges"])
    vocab[a], vocab[b] = vocab[b], vocab[a]


def rename_a_token(data: dict) -> None:
    old, new = RENAMED
    vocab = data["model"]["vocab"]
    assert new not in vocab and not any(old in pair for pair in data["model"]["merges"])
    vocab[new] = vocab.pop(old)


def swapped_tokenizer(folder: Path):
    """The shipped tokenizer with the ids of two token strings exchanged (same size, other meanings)."""
    return variant(folder, swap_two_tokens)
