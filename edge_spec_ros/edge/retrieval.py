"""Retrieval draft source: continuations from a datastore of the verifier's own earlier answers.

REST (He et al., 2023, "REST: Retrieval-Based Speculative Decoding") drafts without a model: the
context's longest suffix that occurs in a datastore of text is looked up, and the continuations that
followed it there are the draft. Here the datastore is the verifier's answers to the text task set's
training prompts (``distill-drafter`` writes them, greedy and sampled, into ``distill_data.json``),
so its formulaic phrasings ("Here's a Python function that ...", "The answer is ...") come back.

Departures from REST, each because one draft chain is verified per round here (the wire protocol
carries one block, not a token tree): REST builds a trie of every continuation and verifies the tree
with tree attention; this source sends one path, the most frequent next token at each step among the
continuations that agree with the path so far, stopping when the best token occurs fewer than
``min_count`` times or in less than ``min_share`` of them (a split vote is a likely miss, and the
drafter model drafts the rest of the block better). REST's datastore is a suffix array over a large
corpus; here a bigram index over a few hundred thousand tokens, with each occurrence extended
backwards to the longest match of at most ``max_ngram`` tokens.

A source only proposes: the verdict is the verifier's, so the output is unchanged
(``test/edge/test_retrieval.py``). Pure Python; no model, no I/O outside ``load``.

Legend: γ — draft length; n — length of the context suffix matched in the datastore.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

# Chosen on SmolLM2-135M's answers to the text task set's bench prompts (docs/smollm2_drafter.md: 81
# settings replayed; the best few were within 0.03 of τ of each other)
MIN_NGRAM = 2  # shortest context suffix looked up (one token matches too much to say anything)
MAX_NGRAM = 4  # longest suffix an occurrence is extended to
MIN_COUNT = 1  # a drafted token must have followed the matched suffix at least this often ...
MIN_SHARE = 0.5  # ... and in at least this share of the continuations still on the path


class Retrieval:
    """A datastore of token sequences and its bigram index; ``propose(context, γ)`` is pure."""

    def __init__(self, sequences: list[list[int]], min_ngram: int = MIN_NGRAM, max_ngram: int = MAX_NGRAM,
                 min_count: int = MIN_COUNT, min_share: float = MIN_SHARE) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        if min_count < 1 or not 0.0 < min_share <= 1.0:
            raise ValueError(f"need min_count >= 1 and min_share in (0, 1], got {min_count}, {min_share}")
        self.min_ngram, self.max_ngram, self.min_count, self.min_share = min_ngram, max_ngram, min_count, min_share
        self.sequences = [[int(t) for t in seq] for seq in sequences]
        # the first min_ngram tokens of every occurrence → (sequence, index after them), with a continuation
        self._index: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for s, seq in enumerate(self.sequences):
            for end in range(min_ngram, len(seq)):
                self._index.setdefault(tuple(seq[end - min_ngram:end]), []).append((s, end))

    def propose(self, context: list[int] | tuple[int, ...], gamma: int) -> tuple[int, ...]:
        """At most γ tokens after ``context``: () when its last ``min_ngram`` tokens never occur, or no
        next token wins the vote."""
        if gamma < 1:
            raise ValueError(f"γ must be >= 1, got {gamma}")
        n = self.min_ngram
        if len(context) < n:
            return ()
        occurrences = self._index.get(tuple(context[-n:]))
        if not occurrences:
            return ()
        longest, continuations = 0, []
        for s, end in occurrences:  # extend each match backwards: the longest suffix match wins
            seq, m = self.sequences[s], n
            while m < self.max_ngram and m < len(context) and end - m - 1 >= 0 and seq[end - m - 1] == context[-m - 1]:
                m += 1
            if m > longest:
                longest, continuations = m, [seq[end:end + gamma]]
            elif m == longest:
                continuations.append(seq[end:end + gamma])
        path: list[int] = []
        for k in range(gamma):
            votes = Counter(c[k] for c in continuations if len(c) > k and c[:k] == path)
            if not votes:
                break
            token, count = votes.most_common(1)[0]
            if count < self.min_count or count < self.min_share * sum(votes.values()):
                break
            path.append(token)
        return tuple(path)

    @classmethod
    def load(cls, path: str | Path, **options) -> "Retrieval":
        """A datastore from JSON: a list of token lists, or ``distill-drafter``'s ``distill_data.json``
        (its samples' answers: each sample's ids from ``answer_start``)."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"datastore {path}: cannot read it ({type(exc).__name__}: {exc})") from None
        if not isinstance(data, list):
            raise ValueError(f"datastore {path}: expected a JSON list, got {type(data).__name__}")
        try:
            sequences = [d["ids"][d["answer_start"]:] if isinstance(d, dict) else list(d) for d in data]
            return cls([[int(t) for t in seq] for seq in sequences], **options)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"datastore {path}: not a list of token lists or distill samples "
                             f"({type(exc).__name__}: {exc})") from None
