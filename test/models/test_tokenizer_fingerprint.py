"""models/tokenizer.tokenizer_fingerprint: equal for two loads of one tokenizer (and in processes with
other hash seeds), different when one id means another string, stable against a pinned value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edge_spec_ros.dragon.wire import check_fingerprint
from edge_spec_ros.models.tokenizer import load_tokenizer, tokenizer_fingerprint

from tokenizer_variants import RENAMED, SWAPPED, rename_a_token, swap_two_tokens, variant

TEST_DIR = Path(__file__).resolve().parents[1]


class Vocabulary:
    """A minimal tokenizer: ``get_vocab()`` and ``len()``."""

    def __init__(self, vocab: dict, size: int | None = None) -> None:
        self.vocab, self.size = vocab, len(vocab) if size is None else size

    def get_vocab(self) -> dict:
        return dict(self.vocab)

    def __len__(self) -> int:
        return self.size


def test_two_loads_of_the_shipped_tokenizer_agree_and_the_form_is_the_wire_s():
    first, second = load_tokenizer(), load_tokenizer()
    assert first is not second
    fp = tokenizer_fingerprint(first)
    assert fp == tokenizer_fingerprint(second) == tokenizer_fingerprint(second.backend_tokenizer)
    assert len(fp) == 32 and int(fp, 16) >= 0
    check_fingerprint(fp, "fingerprint")  # what DragonOpen / DragonOpened accept


def test_one_changed_token_string_changes_it(tmp_path):
    shipped = tokenizer_fingerprint(load_tokenizer())
    swapped = variant(tmp_path / "swapped", swap_two_tokens)
    renamed = variant(tmp_path / "renamed", rename_a_token)
    same = variant(tmp_path / "same", lambda data: None)
    assert len(swapped) == len(renamed) == len(load_tokenizer())  # the same vocabulary size
    a, b = SWAPPED
    assert swapped.convert_tokens_to_ids(a) == load_tokenizer().convert_tokens_to_ids(b)
    assert renamed.convert_tokens_to_ids(RENAMED[1]) == load_tokenizer().convert_tokens_to_ids(RENAMED[0])
    assert tokenizer_fingerprint(same) == shipped
    assert len({shipped, tokenizer_fingerprint(swapped), tokenizer_fingerprint(renamed)}) == 3


def test_what_it_covers_on_a_small_vocabulary():
    base = {"a": 0, "b": 1, "<s>": 2}
    fp = tokenizer_fingerprint(Vocabulary(base))
    assert tokenizer_fingerprint(Vocabulary(dict(reversed(base.items())))) == fp  # not the dict's order
    assert tokenizer_fingerprint(Vocabulary({"a": 0, "b": 1, "<t>": 2})) != fp  # a special token renamed
    assert tokenizer_fingerprint(Vocabulary({"b": 0, "a": 1, "<s>": 2})) != fp  # two ids swapped
    assert tokenizer_fingerprint(Vocabulary(base, size=4)) != fp  # the size
    assert tokenizer_fingerprint(Vocabulary({"a": 0, "b": 1, "<s>": 3})) != fp  # an id moved
    assert tokenizer_fingerprint(Vocabulary({"ab": 0, "": 1, "<s>": 2})) != tokenizer_fingerprint(
        Vocabulary({"a": 0, "b": 1, "<s>": 2}))  # length-prefixed: no two vocabularies hash one byte string
    # pinned: the hashed layout (FINGERPRINT_DOMAIN) must not change under a deployed robot and cloud
    assert fp == tokenizer_fingerprint(Vocabulary({"<s>": 2, "b": 1, "a": 0}))
    assert fp == PINNED, fp


PINNED = "332646c2b6539a27bd7ce75425ec4849"  # sha256 of the layout in the docstring, by hand


@pytest.mark.parametrize("vocab,reason", [({}, "empty vocabulary"), ({"a": -1}, "non-negative"),
                                          ({"a": True}, "non-negative"), ({"a": 1.0}, "non-negative"),
                                          ({1: 0}, "not a string")])
def test_bad_vocabularies_are_refused(vocab, reason):
    with pytest.raises(ValueError, match=reason):
        tokenizer_fingerprint(Vocabulary(vocab))


def test_the_same_in_processes_with_other_hash_seeds():
    code = ("from edge_spec_ros.models.tokenizer import load_tokenizer, tokenizer_fingerprint;"
            "print(tokenizer_fingerprint(load_tokenizer()))")
    here = tokenizer_fingerprint(load_tokenizer())
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                             check=True, cwd=TEST_DIR.parent)
        assert out.stdout.strip() == here, (seed, out.stderr[-2000:])
