"""The paper's baselines for DRAGON's latency figures (Liu et al. 2025, §7.2, Figs. 6-7), timed over the
same emulated link as DRAGON.

Legend: l ≡ robot, r ≡ cloud; D^l, D^r — each side's retrieved documents; n — generated tokens; V —
vocabulary; rtt — the extra round trip of the emulated link (each direction 0.45·rtt + uniform
[0, 0.1·rtt]: jitter 1/5 of the latency, ``link_shape``), optionally capped at a bandwidth.

- **CRCG/robot, CRCG/cloud** — centralised: context aggregation of one side's documents into one
  prompt (documents joined, then the query), decoded greedily by that side's model alone. The cloud's
  tokens stream down one message each; its query goes up first.
- **DRCG/Text** — the robot asks for the cloud's top-k documents as text (the query up, the texts'
  UTF-8 bytes down), joins them with its own (cloud's first, then its memory) into one prompt, prefills
  it from scratch and decodes with its own model.
- **DRCG/KV** — the same prompt, but the cloud sends the KV cache of the prompt's prefix that holds its
  documents, computed offline *with the robot's model* (a KV cache is only usable by the model that
  made it, so the cloud must host the robot's weights too). Bytes: the cache's real tensor bytes,
  layers × 2 × kv_heads × head_dim × tokens × dtype size (``kv_bytes``). The robot prefills only its
  memory and the query on top of it. Its output equals DRCG/Text's up to float rounding.
- **DRDG/SW** — sequence-wise synchronisation (the paper: "one-time aggregation of the independently
  generated output sequences", after REPLUG and RAG-Sequence): each side decodes n tokens greedily over
  its own documents with its own p^s_t, no exchange; the robot sends y^l (n int32) up, the cloud sends
  y^r down as soon as it is done; each side teacher-forces the other's sequence (one forward per
  document); the cloud sends its distributions along both sequences, 2·n·V float32, in one message;
  the robot picks argmax_y Σ_s η^s Π_t p^s_t(y_t) (η^s from log h̃^s at t = 0). No token is known
  before the end, so its TTFT is its total time. Our reading of a baseline the paper describes in one
  sentence.

Timing: each method's compute (retrieval, prefill, every decode step, teacher forcing) is measured on
this machine, one model at a time; the link adds its delays to the measured times with
``wire/emulator.LinkEmulator`` (the same model the server's emulated downlink uses), each message
``HEADER_BYTES`` plus its payload. Where the two sides compute in parallel (SW), the timeline takes
the later of the two. DRAGON and the DRDG/TW schedule are not modelled here: they run for real
(dragon/bench/latency).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from edge_spec_ros.dragon.aggregation import LocalAggregate, document_probs, local_aggregate
from edge_spec_ros.dragon.document_lm import PromptIds, RetrievalSide, build_side, text_prompt
from edge_spec_ros.dragon.relevance import ScoredStore
from edge_spec_ros.models.kv_cache import KVCache, common_prefix
from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.spec.sampling import SamplingConfig
from edge_spec_ros.wire.emulator import LinkEmulator, LinkShape

HEADER_BYTES = 64  # per baseline message: about the project's header frame (33-70 B for DRAGON's messages)
TOKEN_BYTES = 4  # one token id as int32
PROB_BYTES = 4  # float32, as DRAGON's distributions travel


def link_shape(rtt_s: float, bandwidth_bps: float = 0.0) -> LinkShape:
    """One direction of the emulated link: rtt/2 on average, jitter rtt/10 each way (1/5 of the rtt)."""
    return LinkShape(rtt_s * 0.45, rtt_s * 0.1, bandwidth_bps)


def kv_bytes(kv: KVCache, tokens: int | None = None) -> int:
    """Bytes of the first ``tokens`` positions (default: all) of a cache, as tensors hold them."""
    n = kv.length if tokens is None else tokens
    total = 0
    layers = kv.layers if hasattr(kv, "layers") else kv.cache.layers  # per-layer buffers, or a DynamicCache's
    for layer in layers:
        for t in (layer.keys, layer.values):  # (1, kv_heads, positions, head_dim)
            if t is None:
                continue
            total += t.shape[0] * t.shape[1] * min(n, t.shape[2]) * t.shape[3] * t.element_size()
    return total


def kv_bytes_formula(layers: int, kv_heads: int, head_dim: int, tokens: int, dtype_bytes: int) -> int:
    """layers × 2 (K and V) × kv_heads × head_dim × tokens × dtype size."""
    return layers * 2 * kv_heads * head_dim * tokens * dtype_bytes


@dataclass(frozen=True)
class Decoded:
    """One model's greedy decode over one prompt: tokens, prefill (+ first token) time, step times."""

    tokens: tuple[int, ...]
    prefill_s: float  # from the prompt ids to the first token's logits
    step_s: tuple[float, ...]  # each later token


def greedy_decode(stack: DecoderStack, ids: Sequence[int], n: int, kv: KVCache | None = None,
                  clock: Callable[[], float] = time.perf_counter) -> Decoded:
    """Greedy decoding of ``n`` tokens after ``ids``. With ``kv`` (a cache already covering a prefix of
    ``ids``: DRCG/KV) only the rest of the prompt is prefilled."""
    seq = list(ids)
    start = clock()
    if kv is None:
        kv = stack.prefill(text_prompt(seq))
    logits = stack.final_logits(kv, seq, kv.length)[-1]
    prefill_s = clock() - start
    tokens, steps = [], []
    for i in range(n):
        tok = int(torch.argmax(logits))
        tokens.append(tok)
        seq.append(tok)
        if i + 1 < n:
            t0 = clock()
            logits = stack.final_logits(kv, seq, len(seq) - 1)[-1]
            steps.append(clock() - t0)
    return Decoded(tuple(tokens), prefill_s, tuple(steps))


def timed_top_k(store: ScoredStore, query: str, k: int, clock: Callable[[], float] = time.perf_counter):
    start = clock()
    hits = store.top_k(query, k)
    return hits, clock() - start


def joined(texts: Sequence[str]) -> str:
    return "\n\n".join(texts)


@dataclass(frozen=True)
class Timeline:
    """One decision as the robot sees it: when each token became known (s from the query), bytes."""

    method: str
    tokens: tuple[int, ...]
    token_times: tuple[float, ...]
    up_bytes: int
    down_bytes: int
    decode_start_s: float | None = None  # all tokens at once (DRDG/SW): when decoding began

    @property
    def ttft_s(self) -> float:
        return self.token_times[0]

    @property
    def per_token_s(self) -> float:
        """Mean time between tokens after the first; for a method that delivers all tokens at once
        (DRDG/SW) the time from the start of decoding to the end, over n."""
        t = self.token_times
        if self.decode_start_s is not None:
            return (t[-1] - self.decode_start_s) / len(t)
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else float("nan")

    @property
    def total_s(self) -> float:
        return self.token_times[-1]


def _cumulative(start: float, decoded: Decoded) -> list[float]:
    times = [start + decoded.prefill_s]
    for s in decoded.step_s:
        times.append(times[-1] + s)
    return times


@dataclass(frozen=True)
class Centralised:
    """CRCG on one side: measured once, placed on any link."""

    side: str  # robot | cloud
    retrieve_s: float
    decoded: Decoded
    query_bytes: int

    def timeline(self, up: LinkEmulator, down: LinkEmulator) -> Timeline:
        if self.side == "robot":
            return Timeline("CRCG/robot", self.decoded.tokens, tuple(_cumulative(self.retrieve_s, self.decoded)), 0, 0)
        arrive = up.transmit(HEADER_BYTES + self.query_bytes, 0.0)
        computed = _cumulative(arrive + self.retrieve_s, self.decoded)
        times = [down.transmit(HEADER_BYTES + TOKEN_BYTES, t) for t in computed]
        n = len(times)
        return Timeline("CRCG/cloud", self.decoded.tokens, tuple(times), HEADER_BYTES + self.query_bytes,
                        n * (HEADER_BYTES + TOKEN_BYTES))


@dataclass(frozen=True)
class Fetched:
    """DRCG/Text or DRCG/KV: the cloud's documents fetched (as text or as the robot model's KV), then
    the robot decodes over both sides' documents."""

    method: str
    robot_retrieve_s: float
    cloud_retrieve_s: float
    payload_bytes: int  # texts' UTF-8 bytes, or the KV tensors' bytes
    query_bytes: int
    decoded: Decoded

    def timeline(self, up: LinkEmulator, down: LinkEmulator) -> Timeline:
        arrive = up.transmit(HEADER_BYTES + self.query_bytes, 0.0)
        fetched = down.transmit(HEADER_BYTES + self.payload_bytes, arrive + self.cloud_retrieve_s)
        start = max(fetched, self.robot_retrieve_s)  # the robot retrieves its own while it waits
        return Timeline(self.method, self.decoded.tokens, tuple(_cumulative(start, self.decoded)),
                        HEADER_BYTES + self.query_bytes, HEADER_BYTES + self.payload_bytes)


def side_sequence(side: RetrievalSide, n: int, clock: Callable[[], float] = time.perf_counter
                  ) -> tuple[list[int], float, float]:
    """Greedy y^s from the side's own p^s_t alone: (tokens, time of all n steps, log h̃^s_0)."""
    context: list[int] = []
    start = clock()
    log_h0 = 0.0
    for t in range(n):
        agg = side.next_distribution(context)
        if t == 0:
            log_h0 = float(agg.log_h)
        context.append(int(torch.argmax(agg.probs)))
    return context, clock() - start, log_h0


def teacher_forced(side: RetrievalSide, y: Sequence[int]) -> list[LocalAggregate]:
    """(p^s_t, log h̃^s_t) along ``y``: one forward per document over all of y, the relevance
    R(d, y_<t) of each prefix (dynamic, as in decoding). The caches end back at their prompts."""
    lm, mixture = side.lm, side.next_distribution
    rows = []
    for prompt, kv in zip(lm.prompts, lm.caches):
        seq = prompt + list(y)
        rows.append(lm.stack.final_logits(kv, seq, len(prompt) - 1)[:-1])  # (n, V): position t predicts y_t
    per_doc = torch.stack(rows, 1)  # (n, docs, V)
    out = [local_aggregate(document_probs(per_doc[t], mixture.sampling), mixture.scores(list(y[:t])))
           for t in range(len(y))]
    lm.rollback(0)
    return out


@dataclass(frozen=True)
class SequenceWise:
    """DRDG/SW measured once: each side's generation and teacher forcing times, and the choice."""

    robot_retrieve_s: float
    robot_prefill_s: float
    cloud_retrieve_s: float
    cloud_prefill_s: float
    robot_generate_s: float
    cloud_generate_s: float
    robot_force_s: float  # the robot over y^r
    cloud_force_s: float  # the cloud over y^l
    aggregate_s: float
    tokens: tuple[int, ...]  # the chosen sequence
    chosen: str  # robot | cloud
    n: int
    vocab: int
    query_bytes: int

    def timeline(self, up: LinkEmulator, down: LinkEmulator) -> Timeline:
        n, hb = self.n, HEADER_BYTES
        robot_done = self.robot_retrieve_s + self.robot_prefill_s + self.robot_generate_s
        opened = up.transmit(hb + self.query_bytes, 0.0)
        cloud_done = opened + self.cloud_retrieve_s + self.cloud_prefill_s + self.cloud_generate_s
        y_l_at_cloud = up.transmit(hb + n * TOKEN_BYTES, robot_done)
        y_r_at_robot = down.transmit(hb + n * TOKEN_BYTES, cloud_done)
        robot_forced = max(robot_done, y_r_at_robot) + self.robot_force_s
        dists_sent = max(cloud_done, y_l_at_cloud) + self.cloud_force_s
        dist_bytes = hb + 2 * n * self.vocab * PROB_BYTES + 8
        dists_at_robot = down.transmit(dist_bytes, dists_sent)
        end = max(robot_forced, dists_at_robot) + self.aggregate_s
        # no token is known before the end; decoding begins once the robot's own prefill is done
        return Timeline("DRDG/SW", self.tokens, (end,) * n, 2 * hb + self.query_bytes + n * TOKEN_BYTES,
                        hb + n * TOKEN_BYTES + dist_bytes, self.robot_retrieve_s + self.robot_prefill_s)


def measure_sequence_wise(robot_stack: DecoderStack, robot_store: ScoredStore, cloud_stack: DecoderStack,
                          cloud_store: ScoredStore, query: str, prompt_ids: PromptIds,
                          decode_text: Callable[[Sequence[int]], str], n: int, top_k: int = 2,
                          clock: Callable[[], float] = time.perf_counter) -> SequenceWise:
    greedy = SamplingConfig(0.0)
    measured = {}
    sides = {}
    for name, stack, store in (("robot", robot_stack, robot_store), ("cloud", cloud_stack, cloud_store)):
        hits, retrieve_s = timed_top_k(store, query, top_k, clock)
        start = clock()
        side = build_side(stack, store, hits, query, prompt_ids, decode_text, greedy)
        prefill_s = clock() - start
        y, generate_s, log_h0 = side_sequence(side, n, clock)
        sides[name] = side
        measured[name] = (retrieve_s, prefill_s, y, generate_s, log_h0)
    forced, force_s = {}, {}
    for name, other in (("robot", "cloud"), ("cloud", "robot")):
        start = clock()
        forced[name] = {other: teacher_forced(sides[name], measured[other][2])}
        force_s[name] = clock() - start
        forced[name][name] = teacher_forced(sides[name], measured[name][2])  # known from generation
    start = clock()
    log_h = torch.tensor([measured["robot"][4], measured["cloud"][4]], dtype=torch.float64)
    eta = torch.softmax(log_h, 0)
    scores = {}
    for cand in ("robot", "cloud"):
        y = torch.tensor(measured[cand][2])
        seq_logp = [torch.log(torch.stack([a.probs for a in forced[s][cand]]).gather(1, y[:, None]).clamp_min(1e-300)).sum()
                    for s in ("robot", "cloud")]
        scores[cand] = float(torch.logsumexp(torch.log(eta) + torch.stack(seq_logp), 0))
    chosen = max(scores, key=scores.get)
    aggregate_s = clock() - start
    return SequenceWise(measured["robot"][0], measured["robot"][1], measured["cloud"][0], measured["cloud"][1],
                        measured["robot"][3], measured["cloud"][3], force_s["robot"], force_s["cloud"], aggregate_s,
                        tuple(measured[chosen][2]), chosen, n, robot_stack.vocab_size, len(query.encode()))


def measure_centralised(side: str, stack: DecoderStack, store: ScoredStore, query: str, prompt_ids: PromptIds,
                        n: int, top_k: int = 2, clock: Callable[[], float] = time.perf_counter) -> Centralised:
    hits, retrieve_s = timed_top_k(store, query, top_k, clock)
    ids = prompt_ids(joined([h.text for h in hits]), query)
    return Centralised(side, retrieve_s, greedy_decode(stack, ids, n, clock=clock), len(query.encode()))


@dataclass(frozen=True)
class FetchedPair:
    text: Fetched
    kv: Fetched
    kv_tokens: int  # positions of the cloud's prefix cache
    kv_model: str  # whose KV it is


def measure_fetched(robot_stack: DecoderStack, robot_store: ScoredStore, cloud_store: ScoredStore, query: str,
                    prompt_ids: PromptIds, n: int, top_k: int = 2, robot_model: str = "robot",
                    clock: Callable[[], float] = time.perf_counter) -> FetchedPair:
    """DRCG/Text and DRCG/KV over the same prompt: the cloud's documents, then the robot's, then the query."""
    robot_hits, robot_retrieve_s = timed_top_k(robot_store, query, top_k, clock)
    cloud_hits, cloud_retrieve_s = timed_top_k(cloud_store, query, top_k, clock)
    cloud_text = joined([h.text for h in cloud_hits])
    ids = prompt_ids(joined([cloud_text, *[h.text for h in robot_hits]]), query)
    # the prefix the cloud can compute without the robot's memory: common to any continuation
    probe = prompt_ids(joined([cloud_text, "#"]), "?")
    m = min(common_prefix(ids, probe), len(ids) - 1)
    text_bytes = sum(len(h.text.encode()) for h in cloud_hits)
    query_bytes = len(query.encode())
    text = Fetched("DRCG/Text", robot_retrieve_s, cloud_retrieve_s, text_bytes, query_bytes,
                   greedy_decode(robot_stack, ids, n, clock=clock))
    cloud_kv = robot_stack.prefill(text_prompt(ids[: m + 1]))  # the cloud's offline cache: not timed
    size = kv_bytes(cloud_kv)
    kv = Fetched("DRCG/KV", robot_retrieve_s, cloud_retrieve_s, size, query_bytes,
                 greedy_decode(robot_stack, ids, n, kv=cloud_kv, clock=clock))
    return FetchedPair(text, kv, m, robot_model)


def emulators(rtt_s: float, bandwidth_bps: float, seed: int) -> tuple[LinkEmulator, LinkEmulator]:
    shape = link_shape(rtt_s, bandwidth_bps)
    return LinkEmulator(shape, seed), LinkEmulator(shape, seed + 1)


def median(values: Sequence[float]) -> float:
    return float(np.median(list(values)))
