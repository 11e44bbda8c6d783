"""Grammars compiled over a tokenizer's vocabulary (xgrammar), for grammar-constrained decoding.

A ``GrammarBook`` holds the grammars one id space's decisions may name, each compiled once (cached):
a grammar id it knows (``action``: the navigation reply, ``nav.action_grammar``; ``action-brief``: the
same with at most 120 characters of reasoning) or a grammar's text in
xgrammar's EBNF (GBNF-like: ``root ::= ...``) of at most ``MAX_GRAMMAR_BYTES``. ``Constraint.start()``
gives the automaton's state at the start of a reply (``spec.constraint.ConstraintState``), which both
the drafter and the verifier advance along the decision. The robot and the verifier each build their
book from their own tokenizer; the two tokenizers must be the same (``models.tokenizer
.tokenizer_fingerprint``), as for every distribution that crosses the link.

Why xgrammar (docs/grammar.md, scripts/grammar_libs.py): its token masks are precomputed at compile
time for the tokens whose fate does not depend on the parser's stack, so a mask costs microseconds at
Qwen2's V = 151,657 where llguidance's took milliseconds on this grammar, and outlines-core (regular
expressions only) took seconds to compile.

Legend: V — the model's vocabulary size (it may exceed the tokenizer's: ids past it are never allowed).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from edge_spec_ros.nav.action_grammar import BRIEF_GRAMMAR_ID, BRIEF_REASONING_CHARS, GRAMMAR_ID, action_regex
from edge_spec_ros.spec.constraint import ConstraintState

MAX_GRAMMAR_BYTES = 16 * 1024  # a grammar's text on the wire (Open.grammar), UTF-8
CACHED_GRAMMARS = 32  # compiled grammars a book keeps (least recently used dropped first)
NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")  # what is a grammar id rather than a grammar's text

# grammar id -> (kind, text): "regex" or "ebnf" (xgrammar's)
KNOWN: dict[str, Callable[[], tuple[str, str]]] = {
    GRAMMAR_ID: lambda: ("regex", action_regex()),
    BRIEF_GRAMMAR_ID: lambda: ("regex", action_regex(max_reasoning_chars=BRIEF_REASONING_CHARS)),
}


class GrammarError(ValueError):
    """A grammar that cannot be used: unknown id, too large, or text that does not compile."""


def _xgrammar():
    import xgrammar

    return xgrammar


class XGrammarAutomaton:
    """``spec.constraint.Automaton`` over an xgrammar matcher."""

    def __init__(self, matcher, vocab_size: int) -> None:
        self._matcher = matcher
        self._vocab = vocab_size
        self._bits = _xgrammar().allocate_token_bitmask(1, vocab_size)  # (1, ⌈V/32⌉) int32

    def allowed(self) -> torch.Tensor:
        self._matcher.fill_next_token_bitmask(self._bits)
        return unpack_bitmask(self._bits[0], self._vocab)

    def accept(self, token: int) -> bool:
        return bool(self._matcher.accept_token(int(token)))

    def fork(self) -> "XGrammarAutomaton":
        return XGrammarAutomaton(self._matcher.fork(), self._vocab)

    @property
    def terminated(self) -> bool:
        return bool(self._matcher.is_terminated())


def unpack_bitmask(bits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """An int32 bitmask (⌈V/32⌉,), bit i of word w for token 32w + i → (V,) bool. numpy's unpackbits
    over the words' little-endian bytes: 0.4 ms at V = 151,657 where torch's shifts took 70 ms."""
    data = bits.numpy().astype("<i4", copy=False).view(np.uint8)
    return torch.from_numpy(np.unpackbits(data, bitorder="little")[:vocab_size].astype(bool))


@dataclass(frozen=True)
class Constraint:
    """One compiled grammar over one vocabulary: ``start()`` is the automaton at a reply's start."""

    compiled: object = field(repr=False)  # xgrammar.CompiledGrammar
    extra: torch.Tensor = field(repr=False)  # (V,) bool: text and stop tokens (no other special token)
    stop_tokens: tuple[int, ...]

    @property
    def vocab_size(self) -> int:
        return int(self.extra.shape[0])

    def start(self) -> ConstraintState:
        matcher = _xgrammar().GrammarMatcher(self.compiled)
        return ConstraintState(XGrammarAutomaton(matcher, self.vocab_size), self.extra, self.stop_tokens)


class GrammarBook:
    """The grammars of one id space, compiled once each (thread-safe). Build it with ``for_tokenizer``
    (a Hugging Face tokenizer, as the models use) or ``for_vocabulary`` (byte strings per id)."""

    def __init__(self, info, extra: torch.Tensor, stop_tokens: Sequence[int]) -> None:
        self._compiler = _xgrammar().GrammarCompiler(info, max_threads=1)
        self._extra = extra
        self._stop = tuple(int(t) for t in stop_tokens)
        self._cache: OrderedDict[str, Constraint] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def for_tokenizer(cls, tokenizer, vocab_size: int, stop_tokens: Sequence[int] | None = None) -> "GrammarBook":
        """Over ``tokenizer`` (fast, Hugging Face) with a model of ``vocab_size`` ids; stop tokens: the
        tokenizer's end of turn (eos) unless given. Special tokens other than the stop tokens and ids
        past the tokenizer's are never allowed."""
        stop = list(stop_tokens) if stop_tokens is not None else [tokenizer.eos_token_id]
        info = _xgrammar().TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop)
        extra = torch.zeros(vocab_size, dtype=torch.bool)
        extra[:min(len(tokenizer), vocab_size)] = True
        extra[[i for i in tokenizer.all_special_ids if i < vocab_size]] = False
        extra[stop] = True
        return cls(info, extra, stop)

    @classmethod
    def for_vocabulary(cls, tokens: Sequence[bytes], stop_tokens: Sequence[int]) -> "GrammarBook":
        """Over raw byte strings, one per id (a small test vocabulary); the stop tokens match no text."""
        xg = _xgrammar()
        info = xg.TokenizerInfo(list(tokens), xg.VocabType.RAW, vocab_size=len(tokens),
                                stop_token_ids=list(stop_tokens))
        return cls(info, torch.ones(len(tokens), dtype=torch.bool), stop_tokens)

    def get(self, grammar: str) -> Constraint:
        """The compiled grammar for ``grammar`` (an id of ``KNOWN`` or EBNF text); ``GrammarError``
        saying why it cannot be had."""
        with self._lock:
            if grammar in self._cache:
                self._cache.move_to_end(grammar)
                return self._cache[grammar]
        kind, text = source(grammar)
        try:
            compiled = self._compiler.compile_regex(text) if kind == "regex" else self._compiler.compile_grammar(text)
        except Exception as exc:  # xgrammar's parser errors (RuntimeError), text it cannot take (UnicodeError)
            raise GrammarError(f"the grammar does not compile: {first_line(str(exc))}") from None
        constraint = Constraint(compiled, self._extra, self._stop)
        with self._lock:
            self._cache[grammar] = constraint
            while len(self._cache) > CACHED_GRAMMARS:
                self._cache.popitem(last=False)
        return constraint


def source(grammar: str) -> tuple[str, str]:
    """(kind, text) of a grammar id or a grammar's text; ``GrammarError`` for an unknown id or a text
    over ``MAX_GRAMMAR_BYTES``."""
    if NAME.fullmatch(grammar):
        if grammar not in KNOWN:
            raise GrammarError(f"unknown grammar {grammar!r}; known: {', '.join(sorted(KNOWN))}, or EBNF text")
        return KNOWN[grammar]()
    size = len(grammar.encode("utf-8", "surrogatepass"))
    if size > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"a grammar's text is at most {MAX_GRAMMAR_BYTES} bytes, got {size}")
    return "ebnf", grammar


def first_line(message: str) -> str:
    """xgrammar's message without its source location prefix, on one line, at most 200 characters."""
    text = " ".join(message.split())
    return re.sub(r"^\[[^\]]*\] \S+: ", "", text)[:200]


_BOOKS: dict[tuple[str, int, tuple[int, ...]], GrammarBook] = {}
_BOOKS_LOCK = threading.Lock()


def book_for(tokenizer, vocab_size: int, stop_tokens: Sequence[int] | None = None) -> GrammarBook:
    """The process's one book for ``tokenizer`` at ``vocab_size`` (every session of a verifier shares it)."""
    from edge_spec_ros.models.tokenizer import tokenizer_fingerprint

    key = (tokenizer_fingerprint(tokenizer), vocab_size, tuple(stop_tokens or ()))
    with _BOOKS_LOCK:
        if key not in _BOOKS:
            _BOOKS[key] = GrammarBook.for_tokenizer(tokenizer, vocab_size, stop_tokens)
        return _BOOKS[key]
