#!/usr/bin/env python3
"""Compare the constrained-decoding libraries on the action grammar: compile time, per-token mask time
and memory, at the shipped pair's vocabulary (V = 640, the project's tokenizer) and at Qwen2's size
(V = 151,657).

    .venv/bin/python scripts/grammar_libs.py            # every installed library, both vocabularies
    .venv/bin/python scripts/grammar_libs.py --libs llguidance --vocabs qwen2

Each (library, vocabulary) runs in a child process of its own, so that its memory (the rise of the
process's resident set over the tokenizer's and the compiled grammar's construction) is its own. The
grammar is ``nav.action_grammar.action_regex()``, given to each library as a regular expression (the
reply format is regular; llguidance gets it as a one-terminal Lark grammar). Per token: the time to
fill the next token's bitmask, then to advance by the token, along a fixed reply of ~50 tokens.

No hub access: the Qwen2-sized vocabulary is built here, byte-level: the 256 single bytes, the project
tokenizer's tokens, then synthetic byte strings (pseudo-words of 2-12 lowercase letters, half of them
with a leading space, drawn from a fixed seed) until 151,657 ids, the first of them special tokens as in
Qwen2 (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``). Its masks cost what a real vocabulary of
that size and shape costs; its token boundaries are not Qwen2's.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time

LIBS = ("llguidance", "xgrammar", "outlines_core")
VOCABS = {"shipped": 640, "qwen2": 151_657}
REPLY = ("Reasoning: the silver bottle is ahead on the left, about two metres away, and the path to it is "
         "clear. Action: turn left 30 degrees.")
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS = 2


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def vocabulary(name: str) -> list[bytes]:
    """The byte strings of ids 0..V-1 (specials first); ids past the project tokenizer's size are padding
    in the shipped pair (V = 640, 633 tokens): given as unmatchable strings here."""
    from edge_spec_ros.models.tokenizer import load_tokenizer

    tok = load_tokenizer()
    shipped = [s.encode() if i < 8 else tok.convert_tokens_to_string([s]).encode("utf-8", "surrogateescape")
               for i, s in enumerate(tok.convert_ids_to_tokens(list(range(len(tok)))))]
    if name == "shipped":
        return shipped + [f"<|pad{i}|>".encode() for i in range(VOCABS["shipped"] - len(shipped))]
    out = [s.encode() for s in SPECIAL]
    seen = set(out)
    for b in [bytes([i]) for i in range(256)] + shipped[8:]:
        if b not in seen:
            seen.add(b)
            out.append(b)
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    while len(out) < VOCABS["qwen2"]:
        word = ("" if rng.random() < 0.5 else " ") + "".join(rng.choice(letters) for _ in range(rng.randint(2, 12)))
        b = word.encode()
        if b not in seen:
            seen.add(b)
            out.append(b)
    return out


def greedy_ids(tokens: list[bytes], text: str) -> list[int]:
    """Longest-match tokenisation of ``text`` over ``tokens`` (every library walks the same ids)."""
    index = {t: i for i, t in enumerate(tokens) if t and not t.startswith(b"<|")}
    data, out, i = text.encode(), [], 0
    longest = max(len(t) for t in index)
    while i < len(data):
        for n in range(min(longest, len(data) - i), 0, -1):
            if data[i:i + n] in index:
                out.append(index[data[i:i + n]])
                i += n
                break
        else:
            raise ValueError(f"no token for byte {data[i]!r}")
    return out + [EOS]


class _GreedyTokenizer:
    """What llguidance's TokenizerWrapper asks of a tokenizer: tokens, EOS/BOS and an encoder."""

    def __init__(self, tokens: list[bytes]) -> None:
        self.tokens, self.eos_token_id, self.bos_token_id = tokens, EOS, None
        self.special_token_ids = [i for i, t in enumerate(tokens) if t.startswith(b"<|")]

    def __call__(self, data: bytes) -> list[int]:
        return greedy_ids(self.tokens, data.decode())[:-1]


def run_llguidance(tokens: list[bytes], regex: str):
    import llguidance
    import llguidance.torch as lgt

    t0 = time.perf_counter()
    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_GreedyTokenizer(tokens)), n_vocab=len(tokens))
    t1 = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_regex(regex)
    matcher = llguidance.LLMatcher(tok, grammar, log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    mask = lgt.allocate_token_bitmask(1, len(tokens))
    return t1 - t0, time.perf_counter() - t1, (lambda: lgt.fill_next_token_bitmask(matcher, mask, 0)), \
        matcher.consume_token, (lambda i: bool((mask[0, i // 32] >> (i % 32)) & 1))


def run_xgrammar(tokens: list[bytes], regex: str):
    import xgrammar as xg

    t0 = time.perf_counter()
    info = xg.TokenizerInfo(tokens, xg.VocabType.RAW, vocab_size=len(tokens), stop_token_ids=[EOS])
    t1 = time.perf_counter()
    compiled = xg.GrammarCompiler(info, max_threads=1).compile_regex(regex)
    matcher = xg.GrammarMatcher(compiled)
    mask = xg.allocate_token_bitmask(1, len(tokens))
    return t1 - t0, time.perf_counter() - t1, (lambda: matcher.fill_next_token_bitmask(mask)), matcher.accept_token, \
        (lambda i: bool((mask[0, i // 32] >> (i % 32)) & 1))


def run_outlines_core(tokens: list[bytes], regex: str):
    import outlines_core as oc
    import torch

    t0 = time.perf_counter()
    table: dict[bytes, list[int]] = {}
    for i, t in enumerate(tokens):
        if i != EOS:
            table.setdefault(t, []).append(i)
    vocab = oc.Vocabulary(EOS, table)
    t1 = time.perf_counter()
    guide = oc.Guide(oc.Index(regex, vocab))
    mask = torch.zeros((len(tokens) + 31) // 32, dtype=torch.int32)
    return t1 - t0, time.perf_counter() - t1, \
        (lambda: guide.write_mask_into(mask.data_ptr(), mask.numel(), mask.element_size())), guide.advance, \
        (lambda i: bool((mask[i // 32] >> (i % 32)) & 1))


def measure(lib: str, vocab: str) -> dict:
    from edge_spec_ros.nav.action_grammar import action_regex

    tokens = vocabulary(vocab)
    ids = greedy_ids(tokens, REPLY) if vocab == "qwen2" else _shipped_ids()
    import importlib

    import torch  # noqa: F401  (imports are not the grammar's memory)
    importlib.import_module("llguidance.torch" if lib == "llguidance" else lib)
    before = rss_mib()
    tokenizer_s, compile_s, fill, advance, allowed = globals()[f"run_{lib}"](tokens, action_regex())
    after = rss_mib()
    mask_s, advance_s = [], []
    for n, i in enumerate(ids):
        t = time.perf_counter()
        fill()
        mask_s.append(time.perf_counter() - t)
        if not allowed(i):
            raise AssertionError(f"{lib}: token {i} ({tokens[i]!r}) of the reply is masked out")
        if n == len(ids) - 1:
            break  # the end of turn: allowed, and nothing follows
        t = time.perf_counter()
        advance(i)
        advance_s.append(time.perf_counter() - t)
    return {"lib": lib, "vocab": vocab, "V": len(tokens), "tokenizer_s": tokenizer_s, "compile_s": compile_s,
            "mask_us_mean": 1e6 * statistics.mean(mask_s), "mask_us_max": 1e6 * max(mask_s),
            "advance_us_mean": 1e6 * statistics.mean(advance_s), "rss_mib": after - before, "tokens": len(ids)}


def _shipped_ids() -> list[int]:
    from edge_spec_ros.models.tokenizer import load_tokenizer

    return load_tokenizer()(REPLY).input_ids + [EOS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--libs", nargs="+", default=list(LIBS), choices=LIBS)
    parser.add_argument("--vocabs", nargs="+", default=list(VOCABS), choices=list(VOCABS))
    parser.add_argument("--one", nargs=2, metavar=("LIB", "VOCAB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*args.one)))
        return
    print("| library | V | tokenizer (s) | compile (s) | mask per token, mean / max (µs) | advance (µs) | RSS (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for vocab in args.vocabs:
        for lib in args.libs:
            run = subprocess.run([sys.executable, __file__, "--one", lib, vocab], capture_output=True, text=True)
            if run.returncode != 0:
                print(f"| {lib} | {VOCABS[vocab]:,} | failed: {run.stderr.strip().splitlines()[-1][:80]} |||||")
                continue
            r = json.loads(run.stdout.strip().splitlines()[-1])
            print(f"| {lib} | {r['V']:,} | {r['tokenizer_s']:.3f} | {r['compile_s']:.3f} | "
                  f"{r['mask_us_mean']:.0f} / {r['mask_us_max']:.0f} | {r['advance_us_mean']:.0f} | "
                  f"{r['rss_mib']:.0f} |")


if __name__ == "__main__":
    main()
