"""A side's language model over its own retrieved documents (DRAGON §3, output aggregation).

Legend: D^s — the documents side s retrieved for the query; P^s_t (n, V) — p(x | d, x_<t) for each
d ∈ D^s; R(d, x_<t) — relevance (dragon/relevance.py); p^s_t = ω̃ᵀ P^s_t and log h̃^s_t (dragon/aggregation.py).

Each document gets its own prompt (document text + the query) and its own KV cache; the generated
tokens x_<t are appended to every one of them. Departure from the paper: the per-document prompts
are prefilled when the decision opens (the paper precomputes document KV offline; our memory grows
while the robot runs). A rejection rolls every cache back to the committed prefix (``rollback``),
and ``DecoderStack.run`` rolls back to the longest common prefix on its own as well.

Nothing here leaves the side: the documents, their prompts, caches and scores stay in this object;
the side function returns only p^s_t and log h̃^s_t.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from edge_spec_ros.dragon.aggregation import LocalAggregate, SideFunction, document_probs, local_aggregate
from edge_spec_ros.dragon.relevance import DynamicRelevance, ScoredStore
from edge_spec_ros.dragon.stores import Retrieved
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.spec.sampling import SamplingConfig

# document text + query → the ids the side's LM reads for that document
PromptIds = Callable[[str, str], list[int]]


@dataclass
class DocumentMixture:
    """A side's next-token function from per-document LM outputs (§3): p^s_t = ω̃ᵀ P^s_t.

    doc_logits: context → (n, V) logits of the side's LM over each retrieved document + context;
    scores: context → (n,) relevance R(d, x_<t): constant for static weights, or re-estimated from the
    context at each step (dynamic weights, §4.1; e.g. dragon/relevance.py).
    """

    doc_logits: Callable[[Sequence[int]], torch.Tensor]
    scores: Callable[[Sequence[int]], torch.Tensor]
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def __call__(self, context: Sequence[int]) -> LocalAggregate:
        return local_aggregate(document_probs(self.doc_logits(context), self.sampling), self.scores(context))


def text_prompt(ids: Sequence[int]) -> EncodedPrompt:
    return EncodedPrompt(input_ids=torch.tensor(list(ids), dtype=torch.long),
                         mm_token_type_ids=torch.zeros(len(ids), dtype=torch.int32))


def chat_prompt_ids(encoder) -> PromptIds:
    """Prompt ids through the project's chat template (models/prompt.PromptEncoder), text only."""

    def ids(document: str, query: str) -> list[int]:
        text = f"Context: {document}\n\nQuestion: {query}" if document else f"Question: {query}"
        return encoder.encode(text).input_ids.tolist()

    return ids


def stop_token_ids(tokenizer) -> tuple[int, ...]:
    """The ids that end an answer: the tokenizer's eos and, for a ChatML model (SmolLM2, Qwen2), the
    end of the assistant's turn ``<|im_end|>`` when it is a token of its own."""
    stop = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    convert = getattr(tokenizer, "convert_tokens_to_ids", None)
    im_end = convert("<|im_end|>") if convert is not None else None
    if isinstance(im_end, int) and im_end != getattr(tokenizer, "unk_token_id", None) and im_end not in stop:
        stop.append(im_end)
    return tuple(stop)


class DocumentLM:
    """context (generated ids x_<t) → logits (n, V) of the side's LM, one row per document."""

    def __init__(self, stack: DecoderStack, prompts: Sequence[Sequence[int]]) -> None:
        if not prompts or any(len(p) < 2 for p in prompts):
            raise ValueError("one prompt of two or more ids per document")
        self.stack = stack
        self.prompts = [list(p) for p in prompts]
        self.caches = [stack.prefill(text_prompt(p)) for p in self.prompts]

    def __call__(self, generated: Sequence[int]) -> torch.Tensor:
        rows = []
        for prompt, kv in zip(self.prompts, self.caches):
            sequence = prompt + list(generated)
            rows.append(self.stack.final_logits(kv, sequence, len(sequence) - 1)[-1])
        return torch.stack(rows)  # (n, V)

    def rollback(self, committed: int) -> None:
        """Every cache back to its prompt + the ``committed`` target tokens (§4.2 step 4)."""
        for prompt, kv in zip(self.prompts, self.caches):
            kv.truncate(len(prompt) + committed)

    def cached_lengths(self) -> list[int]:
        return [kv.length for kv in self.caches]


@dataclass
class RetrievalSide:
    """One side ready to decode: its next-token function, its rollback hook, and how many documents."""

    next_distribution: SideFunction
    rollback: Callable[[int], None]
    lm: DocumentLM
    documents: int


def build_side(stack: DecoderStack, store: ScoredStore, hits: Sequence[Retrieved], query: str,
               prompt_ids: PromptIds, decode_text: Callable[[Sequence[int]], str], sampling: SamplingConfig,
               relevance_scale: float = 1.0, relevance_every: int = 1) -> RetrievalSide:
    """The side's p^s_t over its retrieved ``hits`` with dynamic relevance (§4.1). With no hit the
    side's LM reads the query alone, as one row with R = 0 (log h̃ = 0)."""
    if hits:
        lm = DocumentLM(stack, [prompt_ids(h.text, query) for h in hits])
        scores = DynamicRelevance(store, tuple(h.doc_id for h in hits), query, 0, decode_text,
                                  relevance_scale, relevance_every)
    else:
        lm = DocumentLM(stack, [prompt_ids("", query)])
        zero = torch.zeros(1, dtype=torch.float64)
        scores = lambda context: zero  # noqa: E731
    return RetrievalSide(DocumentMixture(lm, scores, sampling), lm.rollback, lm, len(hits))
