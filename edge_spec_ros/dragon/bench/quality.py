"""DRAGON's answer quality where both sides' documents are needed: no RAG, robot only, cloud only,
centralised and DRAGON on a small question set (``dragon/bench/data/dragon_qa.json``).

Legend: l ≡ robot, r ≡ cloud; D^l — the robot's top-k memory entries, D^r — the cloud's top-k
documents (BM25, k = the set's ``top_k``); y — the reference answer; p_t — DRAGON's target
η^l p^l_t + η^r p^r_t (eq. 4) with p^s_t = Σ_d ω̃(d) p(x | d, y_<t) over one prompt per document
(output aggregation, dynamic relevance R(d, y_<t) as in decoding, §4.1).

Each item needs the robot's memory (``robot``: its first memory entry holds the answer), the cloud's
documents (``cloud``: its first document) or one fact from each (``both``: the first of each, a
two-step question such as "which floor is the red chair on?" — the chair's room is in the robot's
memory, the room's floor in the cloud's documents). Every item has its own small world (three
entries, three documents); each side retrieves its top k of them for the question alone.

Methods, all with the same model on both sides (as the paper):
- no RAG — the question alone;
- robot only / cloud only — CRCG: that side's retrieved documents joined into one prompt;
- centralised — the cloud's and the robot's retrieved documents in one prompt (context aggregation,
  the privacy-free upper reference: the memory leaves the robot);
- DRAGON — output aggregation across both sides (what DRDG/TW and Speculative Aggregation decode).

Metrics: perplexity of the reference answer y given the prompt(s) — exp of the mean −log p(y_t | ...)
over all reference tokens of the set (or of one ``need``) — and accuracy: the greedy reply (at most
``--max-new-tokens``, cut at the end-of-turn token) contains one of the item's answers, case-folded.
DRAGON's greedy reply is ``dragon/aggregation.drdg_tw``'s, token for token what Speculative Aggregation
gives. Differs from the paper's Fig. 5: there, WikiText language-modelling perplexity with 0-16
documents per side retrieved from one corpus split in halves; here, short answers to questions whose
facts sit on one side or the other, three documents per side in each item.

Run: ``edge-spec-ros bench dragon-quality`` (SmolLM2-135M-Instruct, converted on first use;
10 minutes on a loaded 2-core CPU, 1 thread); ``--model embedded --items 3`` checks the harness on the
shipped pair in seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from edge_spec_ros.dragon.aggregation import drdg_tw, side_weights, target_distribution
from edge_spec_ros.dragon.bench.baselines import joined, teacher_forced
from edge_spec_ros.dragon.document_lm import PromptIds, build_side, chat_prompt_ids, text_prompt
from edge_spec_ros.dragon.stores import MEMORY_KINDS, DocumentStore, Retrieved, RobotMemory
from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig

DATA = Path(__file__).resolve().parent / "data" / "dragon_qa.json"
NEEDS = ("robot", "cloud", "both")
METHODS = ("no RAG", "robot only", "cloud only", "centralised", "DRAGON")


@dataclass(frozen=True)
class QAItem:
    id: str
    need: str  # robot | cloud | both
    question: str
    answers: tuple[str, ...]  # lower case; a reply containing any of them is correct
    reference: str  # the sentence whose perplexity is scored
    memory: tuple[tuple[str, str], ...]  # (kind, text); the first holds the robot's fact
    documents: tuple[str, ...]  # the first holds the cloud's fact


def load_items(path: str | Path = DATA) -> tuple[int, list[QAItem]]:
    """(top_k, items) of a question set; raises ValueError naming the item for a malformed one."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    items, seen = [], set()
    for raw in data["items"]:
        item = QAItem(raw["id"], raw["need"], raw["question"], tuple(raw["answers"]), raw["reference"],
                      tuple((m["kind"], m["text"]) for m in raw["memory"]), tuple(raw["documents"]))
        problems = [
            *(["duplicate id"] if item.id in seen else []),
            *([f"need {item.need!r} not in {NEEDS}"] if item.need not in NEEDS else []),
            *(["no answers, or one not lower case"] if not item.answers or any(a != a.lower() for a in item.answers)
              else []),
            *(["no memory entry or no document"] if not item.memory or not item.documents else []),
            *([f"memory kind not in {MEMORY_KINDS}"] if any(k not in MEMORY_KINDS for k, _ in item.memory) else []),
            *(["a document with a blank line (the store would split it)"]
              if any("\n\n" in d for d in item.documents) else []),
        ]
        if problems:
            raise ValueError(f"question set {path}, item {raw.get('id')!r}: {'; '.join(problems)}")
        seen.add(item.id)
        items.append(item)
    return int(data["top_k"]), items


def write_item_world(item: QAItem, directory: Path) -> tuple[RobotMemory, DocumentStore]:
    """The item's robot memory (``directory/memory``) and cloud folder (``directory/docs``, one file each)."""
    memory = RobotMemory(directory / "memory")
    for i, (kind, text) in enumerate(item.memory):
        memory.add(kind, text, time=float(i))
    docs = directory / "docs"
    docs.mkdir()
    for i, text in enumerate(item.documents):
        (docs / f"doc{i}.txt").write_text(text, encoding="utf-8")
    return memory, DocumentStore(docs)


def contains_answer(reply: str, answers: Sequence[str]) -> bool:
    reply = reply.lower()
    return any(a in reply for a in answers)


def reference_nll(stack: DecoderStack, prompt: Sequence[int], reference: Sequence[int]) -> float:
    """Σ_t −log p(y_t | prompt, y_<t) of one model over one prompt."""
    kv = stack.prefill(text_prompt(list(prompt)))
    logits = stack.final_logits(kv, list(prompt) + list(reference), len(prompt) - 1)[:-1]  # (|y|, V)
    logp = torch.log_softmax(logits.double(), -1)
    return float(-logp.gather(1, torch.tensor(list(reference))[:, None]).sum())


def greedy_reply(stack: DecoderStack, prompt: Sequence[int], max_new: int, stop: set[int]) -> list[int]:
    seq = list(prompt)
    kv = stack.prefill(text_prompt(seq))
    out: list[int] = []
    for _ in range(max_new):
        token = int(torch.argmax(stack.final_logits(kv, seq, len(seq) - 1)[-1]))
        if token in stop:
            break
        out.append(token)
        seq.append(token)
    return out


@dataclass(frozen=True)
class ItemResult:
    id: str
    need: str
    method: str
    nll: float  # Σ over the reference's tokens
    tokens: int  # reference tokens
    reply: str
    correct: bool
    robot_fact_retrieved: bool
    cloud_fact_retrieved: bool


def evaluate_item(item: QAItem, top_k: int, robot_stack: DecoderStack, cloud_stack: DecoderStack,
                  prompt_ids: PromptIds, encode: Callable[[str], list[int]],
                  decode_text: Callable[[Sequence[int]], str], stop: set[int], max_new: int,
                  relevance_scale: float = 1.0, methods: Sequence[str] = METHODS) -> list[ItemResult]:
    """Every method on one item (its world written to a temporary folder)."""
    y = encode(item.reference)
    with tempfile.TemporaryDirectory() as tmp:
        memory, store = write_item_world(item, Path(tmp))
        robot_hits: list[Retrieved] = memory.top_k(item.question, top_k)
        cloud_hits: list[Retrieved] = store.top_k(item.question, top_k)
        robot_fact = any(item.memory[0][1] in h.text for h in robot_hits)
        cloud_fact = any(item.documents[0] == h.text for h in cloud_hits)
        contexts = {"no RAG": (cloud_stack, ""),
                    "robot only": (robot_stack, joined([h.text for h in robot_hits])),
                    "cloud only": (cloud_stack, joined([h.text for h in cloud_hits])),
                    "centralised": (robot_stack, joined([h.text for h in cloud_hits + robot_hits]))}
        results = []
        for method in methods:
            if method in contexts:
                stack, context = contexts[method]
                prompt = prompt_ids(context, item.question)
                nll = reference_nll(stack, prompt, y)
                reply = greedy_reply(stack, prompt, max_new, stop)
            elif method == "DRAGON":
                greedy = SamplingConfig(0.0)
                robot = build_side(robot_stack, memory, robot_hits, item.question, prompt_ids, decode_text, greedy,
                                   relevance_scale)
                cloud = build_side(cloud_stack, store, cloud_hits, item.question, prompt_ids, decode_text, greedy,
                                   relevance_scale)
                nll = 0.0
                for t, (a_l, a_r) in enumerate(zip(teacher_forced(robot, y), teacher_forced(cloud, y))):
                    eta_l, _ = side_weights(a_l.log_h, a_r.log_h)
                    nll -= math.log(max(float(target_distribution(a_l.probs, a_r.probs, eta_l)[y[t]]), 1e-300))
                trace = drdg_tw(robot.next_distribution, cloud.next_distribution, [], max_new, PositionalRNG(0),
                                greedy)
                reply = []
                for token in trace.tokens:
                    if token in stop:
                        break
                    reply.append(token)
            else:
                raise ValueError(f"unknown method {method!r}: choose from {METHODS}")
            text = decode_text(reply)
            results.append(ItemResult(item.id, item.need, method, nll, len(y), text,
                                      contains_answer(text, item.answers), robot_fact, cloud_fact))
    return results


@dataclass(frozen=True)
class Summary:
    method: str
    need: str  # robot | cloud | both | all
    items: int
    accuracy: float
    perplexity: float


def summarise(results: Sequence[ItemResult]) -> list[Summary]:
    out = []
    methods = list(dict.fromkeys(r.method for r in results))
    for method in methods:
        for need in (*NEEDS, "all"):
            rows = [r for r in results if r.method == method and (need == "all" or r.need == need)]
            if not rows:
                continue
            ppl = math.exp(sum(r.nll for r in rows) / sum(r.tokens for r in rows))
            out.append(Summary(method, need, len(rows), sum(r.correct for r in rows) / len(rows), ppl))
    return out


def stop_tokens(tokenizer) -> set[int]:
    stop = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>") if hasattr(tokenizer, "convert_tokens_to_ids") else None
    if isinstance(im_end, int) and im_end != getattr(tokenizer, "unk_token_id", None):
        stop.add(im_end)
    return stop


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench dragon-quality``."""
    parser.add_argument("--model", default="smollm2", help="model source (models/pairs.py): its verifier on both "
                                                           "sides; 'embedded': the shipped pair (drafter on the robot)")
    parser.add_argument("--data", default=str(DATA),
                        help="the question set (default: the package's dragon/bench/data/dragon_qa.json)")
    parser.add_argument("--items", type=int, default=0, help="the first N items (0: all)")
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--relevance-scale", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=1)


def command(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    from edge_spec_ros.models.pairs import load_pair

    started = time.monotonic()
    embedded = args.model == "embedded"
    pair = load_pair(args.model, parts=("drafter", "verifier") if embedded else ("verifier",))
    cloud_stack = pair.verifier.stack
    robot_stack = pair.drafter.stack if embedded else cloud_stack
    tokenizer = pair.tokenizer
    prompt_ids = chat_prompt_ids(pair.prompt_encoder())

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    top_k, items = load_items(args.data)
    items = items[: args.items] if args.items else items
    results: list[ItemResult] = []
    for i, item in enumerate(items):
        rows = evaluate_item(item, top_k, robot_stack, cloud_stack, prompt_ids, encode, tokenizer.decode,
                             stop_tokens(tokenizer), args.max_new_tokens, args.relevance_scale)
        results.extend(rows)
        for r in rows:
            print(json.dumps(asdict(r)), flush=True)
        print(f"[dragon_quality] {i + 1}/{len(items)} items, {time.monotonic() - started:.0f} s", file=sys.stderr,
              flush=True)
    for s in summarise(results):
        print(json.dumps({"summary": asdict(s), "model": args.model}), flush=True)
    return 0
