"""Training prompts written by the verifier itself (Magpie, Xu et al. 2024), for drafter distillation.

Magpie feeds an aligned chat model its own template up to the start of a user turn and lets it write
the user's message: the model's prompts come out in the style it was aligned on, and the verifier's
answers to them are more contexts for a drafter to learn from. The text task set has only 168
hand-written training prompts, so a distilled drafter sees few situations; this module adds as
many as asked, at the cost of a batched ``generate``.

Departures from Magpie: the user turn is not left empty but opened with a few words of one of the
task set's six kinds (``OPENINGS``, in turn), so every kind the drafter is measured on is covered;
and Magpie samples at T = 1, here T = 0.8 (top-50), a choice made without tuning.

A prompt is kept when the model closed its user turn (``<|im_end|>``) or, if it ran out of tokens,
cut at its last sentence end; a prompt of fewer than ``MIN_WORDS`` words, a repeat, or a near-copy of
a bench prompt (the drafter is measured on those, never trained on them: word-set Jaccard similarity
of at least ``BENCH_JACCARD``, which catches "What is the capital of France." but not "… of Spain?")
is dropped. Seeded per batch and resumable: the prompts of batch b are a function of (seed, b).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from edge_spec_ros.models.prompt import PromptEncoder

PROMPTS_FILE = "synthetic_prompts.json"
TEMPERATURE = 0.8
TOP_K = 50
PROMPT_TOKENS = 80  # new tokens for a prompt (a summarisation prompt writes its article in them)
MIN_WORDS = 4
BENCH_JACCARD = 0.8
SEED_OFFSET = 7_919  # keeps these draws apart from the sampled answers' (seed · 1_000_003 + batch start)

# The text task set's kinds (bench/tasks.TASK_KINDS, in its order; training/ does not import bench/).
OPENINGS: dict[str, tuple[str, ...]] = {
    "conversation": ("Hi!", "I feel", "My friend", "What do you think about", "Can you help me", "I'm planning"),
    "code": ("Write a Python function that", "Write a Python program that", "How do I write a Python function",
             "Write a function in Python to", "Fix this Python code:", "Write a Python class that"),
    "maths": ("Sarah has", "A car travels", "A store sells", "If a box holds", "John buys", "What is the sum of"),
    "instructions": ("Give me", "Explain how to", "List", "Write a short", "Describe", "Suggest"),
    "summarisation": ("Summarise this news article in two sentences.\n\n", "Summarise the following text.\n\n",
                      "Give a one-sentence summary of this article.\n\n"),
    "qa": ("What is the capital of", "Who wrote", "When did", "Where is", "How many", "Which"),
}
KINDS = tuple(OPENINGS)


@dataclass(frozen=True)
class SyntheticPrompt:
    task: str
    text: str


def opening(index: int) -> tuple[str, str]:
    """(task kind, opening words) of the index-th prompt: kinds in turn, each kind's openings in turn."""
    task = KINDS[index % len(KINDS)]
    choices = OPENINGS[task]
    return task, choices[(index // len(KINDS)) % len(choices)]


def finish(start: str, continuation: str, ended: bool) -> str | None:
    """The prompt ``start + continuation``: whole when the model ended its turn, else cut after its last
    sentence end past the opening; None when too short or with no sentence end."""
    text = start + continuation
    if not ended:
        cut = max(text.rfind(c, len(start)) for c in ".?!")
        if cut < 0:
            return None
        text = text[:cut + 1]
    text = text.strip()
    return text if len(text.split()) >= MIN_WORDS else None


def words(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z0-9]+", text.lower()))


def near_copy(text: str, references: list[frozenset[str]]) -> bool:
    """Whether ``text`` is a near-copy of one of ``references`` (their ``words``): word-set Jaccard
    similarity of at least ``BENCH_JACCARD``."""
    w = words(text)
    return any(len(w & r) >= BENCH_JACCARD * len(w | r) for r in references)


def template_tail(encoder: PromptEncoder) -> int:
    """How many ids the chat template puts after a user message (end of turn, assistant header)."""
    a, b = (encoder.encode(t).input_ids.tolist() for t in ("x", "y"))
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


@dataclass
class PromptBatch:
    """Resumable state: ``attempts`` prompts tried so far, ``prompts`` kept (in order)."""

    attempts: int = 0
    prompts: list[SyntheticPrompt] | None = None

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"attempts": self.attempts, "prompts": [asdict(p) for p in self.prompts or []]}))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "PromptBatch":
        if not path.is_file():
            return cls(0, [])
        d = json.loads(path.read_text())
        return cls(int(d["attempts"]), [SyntheticPrompt(**p) for p in d["prompts"]])


@torch.no_grad()
def write_prompts(model, encoder: PromptEncoder, attempts: int, batch_size: int, held_out: tuple[str, ...],
                  seed: int = 0, done: PromptBatch | None = None,
                  checkpoint: Callable[[PromptBatch], None] = lambda state: None) -> PromptBatch:
    """``attempts`` user prompts written by ``model`` (kinds in turn, see ``opening``), ``batch_size``
    per left-padded ``generate``, none a near-copy of ``held_out`` (the bench prompts); continues after
    ``done`` and calls ``checkpoint`` after each batch."""
    tokenizer = encoder.tokenizer
    stop = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop
    tail = template_tail(encoder)
    state = done or PromptBatch(0, [])
    state.prompts = list(state.prompts or [])
    seen = {p.text for p in state.prompts}
    references = [words(t) for t in held_out]
    while state.attempts < attempts:
        b = state.attempts
        starts = [opening(i) for i in range(b, min(b + batch_size, attempts))]
        prefixes = [encoder.encode(opener).input_ids.tolist()[:-tail] for _, opener in starts]
        width = max(map(len, prefixes))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prefixes])  # (B, width)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prefixes])
        torch.manual_seed(seed * 1_000_003 + SEED_OFFSET + b)
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=PROMPT_TOKENS, do_sample=True,
                             temperature=TEMPERATURE, top_k=TOP_K, top_p=1.0, eos_token_id=stop, pad_token_id=pad)
        for (task, opener), row in zip(starts, out[:, width:].tolist()):
            ended = stop in row
            text = finish(opener, tokenizer.decode(row[:row.index(stop)] if ended else row, skip_special_tokens=True),
                          ended)
            if text is not None and text not in seen and not near_copy(text, references):
                seen.add(text)
                state.prompts.append(SyntheticPrompt(task, text))
        state.attempts = b + len(starts)
        checkpoint(state)
    return state
