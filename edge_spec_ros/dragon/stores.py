"""Document stores for DRAGON's two sides (Liu et al. 2025, §2.2): the robot's private memory D^device
and the cloud's document folder D^cloud, both searched with BM25 (the ``bm25s`` library).

Legend: D^s — side s's corpus; R(d, q) — relevance of document d for the query q (here the BM25
score); top-k — the k documents with the highest R, returned with their scores.

Departure from the paper: the paper retrieves with dense retrievers (Contriever/DPR over Faiss) and
re-ranks with a cross-encoder; here both retrieval and the dynamic re-estimation of R (§4.1, see
dragon/relevance.py) use BM25 — a real lexical retriever that runs offline on the robot's CPU with no
model weights. Its scores are unbounded, so consumers may scale them before exp(R) (relevance.py).

Nothing in this module crosses the link: documents, their text and their score vectors stay on the
side that owns them; only tokens and distributions travel (DESIGN.md, "DRAGON on a robot").
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time as _time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

import bm25s
import numpy as np

MemoryKind = Literal["observation", "instruction", "note"]
MEMORY_KINDS: tuple[MemoryKind, ...] = ("observation", "instruction", "note")
MEMORY_FILE = "memory.jsonl"

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retrieved:
    """One retrieval hit: the document's id in its store, the text given to the LM, and R(d, q)."""

    doc_id: str
    text: str
    score: float


def _tokenize(texts: Sequence[str]) -> list[list[str]]:
    # English stop words removed, lower-cased, words of two or more characters (bm25s defaults).
    return bm25s.tokenize(list(texts), stopwords="en", show_progress=False, return_ids=False)


class BM25Index:
    """A BM25 index over (doc_id, indexed text) pairs; rebuilt lazily after additions."""

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._texts: list[str] = []
        self._position: dict[str, int] = {}
        self._model: bm25s.BM25 | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, doc_id: str, text: str) -> None:
        with self._lock:
            if doc_id in self._position:
                raise ValueError(f"duplicate document id {doc_id!r}")
            self._position[doc_id] = len(self._ids)
            self._ids.append(doc_id)
            self._texts.append(text)
            self._model = None

    def _built(self) -> bm25s.BM25 | None:
        with self._lock:
            if self._model is None and self._ids:
                model = bm25s.BM25()
                model.index(_tokenize(self._texts), show_progress=False)
                self._model = model
            return self._model

    def scores(self, query: str) -> np.ndarray:
        """R(d, q) for every document in insertion order: (N,), float64; zeros for an empty query."""
        model = self._built()
        if model is None:
            return np.zeros(0)
        words = _tokenize([query])[0]
        if not words:
            return np.zeros(len(self._ids))
        return np.asarray(model.get_scores(words), dtype=np.float64)

    def scores_of(self, query: str, doc_ids: Sequence[str]) -> np.ndarray:
        """R(d, q) for the given documents, in the given order: (len(doc_ids),)."""
        all_scores = self.scores(query)
        return np.array([all_scores[self._position[d]] for d in doc_ids], dtype=np.float64)

    def top_k(self, query: str, k: int) -> list[tuple[str, float]]:
        """The k best (doc_id, score) by descending score, ties by insertion order; documents with
        score 0 (no query word in common) are left out: they carry no evidence."""
        if k <= 0:
            return []
        s = self.scores(query)
        order = np.lexsort((np.arange(len(s)), -s))[:k]
        return [(self._ids[i], float(s[i])) for i in order if s[i] > 0.0]


# --------------------------------------------------------------------------- robot memory


@dataclass(frozen=True)
class Renumbered:
    """A memory line whose entry id an earlier line already had: kept under a fresh id."""

    line: int  # 1-based line of memory.jsonl
    entry_id: int  # the id written on that line
    new_id: int  # the id it is kept under (this load only)
    first_line: int  # the earlier line that keeps entry_id


@dataclass(frozen=True)
class MemoryEntry:
    """One memory record: what (kind, text), where (pose x, y in m, θ in rad, map frame), when (s)."""

    entry_id: int
    kind: MemoryKind
    text: str
    x: float
    y: float
    theta: float
    time: float

    @property
    def doc_id(self) -> str:
        return f"mem-{self.entry_id}"

    def render(self) -> str:
        """The text handed to the LM: the pose and time are part of the evidence ("where did you see…")."""
        return (f"[{self.kind} at t={self.time:.1f}s, pose x={self.x:.2f} m y={self.y:.2f} m "
                f"theta={self.theta:.2f} rad] {self.text}")


class RobotMemory:
    """The robot's private documents, written by the nodes as they run and kept across restarts.

    Stored as JSON lines in ``directory/memory.jsonl`` (one entry per line, appended and flushed on
    every write, so a crash loses at most the line being written; a torn last line is skipped on
    load). Retrieval indexes the entry text (not the pose numbers) with BM25.

    Repeated entry ids (a file edited or merged by hand): every entry is kept. The first line with
    an id keeps it; each later line with the same id gets a fresh id above every id in the file (in
    file order), is logged as a warning naming the file, the line and both ids, and is listed in
    ``renumbered``. Refusing the file would leave the robot without any memory (the memory node
    would record nothing, every answer would fail) until someone repairs it; keeping only the first
    would drop what the later line says. The file itself is not rewritten, so a renumbered id is
    valid for this load only (ids never leave the robot; new entries get ids above all of them).
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, fsync: bool = False) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.fsync = fsync
        self._entries: list[MemoryEntry] = []
        self._by_id: dict[str, MemoryEntry] = {}
        self._index = BM25Index()
        self._lock = threading.Lock()
        self.skipped_lines = 0  # malformed lines found on load
        self.renumbered: tuple[Renumbered, ...] = ()  # repeated ids found on load, and their new ids
        self._next_id = 0
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._load()

    @property
    def path(self) -> Path | None:
        return self.directory / MEMORY_FILE if self.directory is not None else None

    def _load(self) -> None:
        path = self.path
        assert path is not None
        if not path.exists():
            return
        read: list[tuple[int, MemoryEntry]] = []  # (line number, entry)
        with path.open("r", encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    entry = MemoryEntry(**json.loads(line))
                    _check(entry)
                except (ValueError, TypeError) as exc:
                    self.skipped_lines += 1
                    _log.warning("%s line %d: not a memory entry, skipped (%s)", path, number, exc)
                    continue
                read.append((number, entry))
        fresh = max((e.entry_id for _, e in read), default=-1) + 1
        first_line: dict[int, int] = {}
        renumbered = []
        for number, entry in read:
            if entry.entry_id in first_line:
                renumbered.append(Renumbered(number, entry.entry_id, fresh, first_line[entry.entry_id]))
                _log.warning("%s line %d: entry id %d repeats line %d's; kept as entry %d", path, number,
                             entry.entry_id, first_line[entry.entry_id], fresh)
                entry = replace(entry, entry_id=fresh)
                fresh += 1
            first_line[entry.entry_id] = number
            self._insert(entry)
        self.renumbered = tuple(renumbered)

    def _insert(self, entry: MemoryEntry) -> None:
        self._next_id = max(self._next_id, entry.entry_id + 1)
        self._entries.append(entry)
        self._by_id[entry.doc_id] = entry
        self._index.add(entry.doc_id, entry.text)

    def add(self, kind: MemoryKind, text: str, pose: tuple[float, float, float] = (0.0, 0.0, 0.0),
            time: float | None = None) -> MemoryEntry:
        """Record an observation, instruction or note at pose (x, y, θ) and time (default: wall clock)."""
        with self._lock:
            entry = MemoryEntry(self._next_id, kind, text, float(pose[0]), float(pose[1]), float(pose[2]),
                                float(_time.time() if time is None else time))
            _check(entry)
            path = self.path
            if path is not None:
                with path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(asdict(entry), ensure_ascii=False) + "\n")
                    f.flush()
                    if self.fsync:
                        os.fsync(f.fileno())
            self._insert(entry)
            return entry

    @property
    def entries(self) -> tuple[MemoryEntry, ...]:
        return tuple(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, doc_id: str) -> MemoryEntry:
        return self._by_id[doc_id]

    def top_k(self, query: str, k: int) -> list[Retrieved]:
        return [Retrieved(d, self._by_id[d].render(), s) for d, s in self._index.top_k(query, k)]

    def scores(self, query: str, doc_ids: Sequence[str]) -> np.ndarray:
        """R(d, q) of the given entries for a new query (dynamic re-estimation, §4.1)."""
        return self._index.scores_of(query, doc_ids)


def _check(entry: MemoryEntry) -> None:
    if not isinstance(entry.entry_id, int) or isinstance(entry.entry_id, bool) or entry.entry_id < 0:
        raise ValueError(f"memory entry_id must be a non-negative integer, got {entry.entry_id!r}")
    if entry.kind not in MEMORY_KINDS:
        raise ValueError(f"memory kind must be one of {MEMORY_KINDS}, got {entry.kind!r}")
    if not isinstance(entry.text, str) or not entry.text.strip():
        raise ValueError("memory text must be a non-empty string")
    if not all(math.isfinite(v) for v in (entry.x, entry.y, entry.theta, entry.time)):
        raise ValueError("pose and time must be finite")


# --------------------------------------------------------------------------- cloud documents


class DocumentStore:
    """The cloud's general-knowledge documents: every ``*.txt`` and ``*.md`` file under a folder.

    chunking="paragraph" (default) makes one document per blank-line-separated paragraph, with id
    ``relative/path#n``; "file" makes one document per file with id ``relative/path``. Ids are paths
    relative to the folder, so they are unique by construction: two files of the same name in
    different sub-folders are two documents (``a/notes.txt#0``, ``b/notes.txt#0``); symlinked
    sub-folders are not followed (a folder linked into itself would repeat its files). The paper chunks
    its corpus into fixed 64-token passages; paragraphs keep a hand-written folder readable.
    """

    SUFFIXES = (".txt", ".md")

    def __init__(self, folder: str | os.PathLike[str], chunking: Literal["paragraph", "file"] = "paragraph") -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise FileNotFoundError(f"document folder {self.folder} does not exist")
        self._texts: dict[str, str] = {}
        self._index = BM25Index()
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file() and p.suffix in self.SUFFIXES):
            rel = path.relative_to(self.folder).as_posix()
            text = path.read_text(encoding="utf-8", errors="replace")
            for doc_id, chunk in _chunks(rel, text, chunking):
                self._texts[doc_id] = chunk
                self._index.add(doc_id, chunk)

    def __len__(self) -> int:
        return len(self._texts)

    @property
    def doc_ids(self) -> tuple[str, ...]:
        return tuple(self._texts)

    def text(self, doc_id: str) -> str:
        return self._texts[doc_id]

    def top_k(self, query: str, k: int) -> list[Retrieved]:
        return [Retrieved(d, self._texts[d], s) for d, s in self._index.top_k(query, k)]

    def scores(self, query: str, doc_ids: Sequence[str]) -> np.ndarray:
        """R(d, q) of the given documents for a new query (dynamic re-estimation, §4.1)."""
        return self._index.scores_of(query, doc_ids)


def _chunks(rel: str, text: str, chunking: str) -> Iterable[tuple[str, str]]:
    if chunking == "file":
        if text.strip():
            yield rel, text.strip()
        return
    if chunking != "paragraph":
        raise ValueError(f"chunking must be 'paragraph' or 'file', got {chunking!r}")
    paragraphs = [p.strip() for p in text.replace("\r\n", "\n").split("\n\n")]
    for n, p in enumerate(q for q in paragraphs if q):
        yield f"{rel}#{n}", p
