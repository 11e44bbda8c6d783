"""Robot-side decoding over the network: cloud-only AR (the baseline), edge-cloud SD and FSD, and the
other papers' protocols.

Modes and what crosses the link per round (γ draft tokens, vocabulary V, K kept entries):
  ar     — cloud-only autoregressive decoding, tokens streamed down;
  sd     — γ ids + γ×V q up, verdict down;
  fsd    — as sd, plus every early exit's verdict down, pre-drafting on the robot (FSD paper);
  dssd   — γ ids + γ values q_i(x_i) up; on a rejection p_δ (V values) down and the robot
           resamples (DSSD, Algorithm 2);
  tkslt  — the drafter samples from its top-K (K = ``tkslt_k``), γ×K ids + values up, verdict down
           (TK-SLT, Solution 1);
  lowpay — exact low-payload mode: TK-SLT's sparse uplink at a small K (``lowpay_k``) that the
           drafter samples from exactly; the server forms norm(max(0, p − q)) itself and only the
           verdict comes down, so neither direction carries a distribution of size V;
  pico   — PicoSpec's asynchronous pipeline: while the cloud verifies S_i the robot drafts S_{i+1}
           (its guess of the cloud's token, then γ more) as if S_i were fully accepted, cutting it
           short when the verdict arrives (latency-aware truncation). Finished before the verdict,
           S_{i+1} is sent at once, chained: the cloud verifies it right after S_i if the assumption
           held and answers "stale" otherwise (overlapped communication). Arriving with the verdict,
           it is sent then if the assumption held, dropped otherwise; dropping discards its cache
           fork, and the verifier's cache rolls back by prefix. Rejections use separate rejection
           sampling (as dssd). Fast verification: a block drafted from scratch leaves in two parts,
           its first half as soon as it exists, so the cloud starts on it while the rest is drafted;
  pico-fsd — both at once, a combination neither paper makes: the pipeline's block covers the case
           "all accepted, guess right", FSD's pre-drafts from early exits cover the others; with
           early exits the cloud verifies, so q travels whole (as sd);
  dssd-topk-lossy — LOSSY: DSSD with PicoSpec's top-K pruning of p_δ on the downlink; its TV error
           is reported (``DecodeStats.mean_tv``).
All but the lossy mode are exact: greedy output equals the target's greedy output, sampled output
follows the target distribution.

Latency models (FSD paper, Table 4): AR 2T_c + nT_q; SD (n/τ)(2T_c + γT_p + T_q);
FSD (n/τ)(2T_c + rγT_p + (1 − r)T_r + T_q). SD and FSD emit exactly the same tokens for the same
seed: a cached pre-draft is bit-identical to the draft SD would compute from the same prefix.

Legend: n — tokens; τ — tokens per round; γ — draft length; r — cache miss rate; T_p, T_q, T_c —
draft forward, verification, one-way communication; T_r — waiting for a pre-draft on a hit.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.decoding.reference import DecodeConfig, DecodeResult, append_until_stop
from edge_spec_ros.edge.client import VerifierAuthError, VerifierError, VerifierTimeout
from edge_spec_ros.edge.predraft import PreDrafter
from edge_spec_ros.edge.registry import MODES, REGISTRY, get_mode  # noqa: F401 - MODES re-exported
from edge_spec_ros.models.drafter import Draft, Drafter
from edge_spec_ros.models.kv_cache import KVCache
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.spec.draft_length import DraftLengthController
from edge_spec_ros.spec.queues import POLICIES
from edge_spec_ros.spec.sampling import PositionalRNG
from edge_spec_ros.spec.sparse import DraftDistribution, densify, to_sparse
from edge_spec_ros.spec.verify import SplitVerdict, split_verify_device
from edge_spec_ros.wire.verifier_link import VerifierLink
from edge_spec_ros.wire.messages import DraftBlock, ErrorCode, ExitResult, Generate, Open, Tokens

log = logging.getLogger(__name__)

# A decision is opened again after these errors (the verifier restarted and forgot the session; the
# link through the bridge was lost: code -1), and after a timeout.
RETRYABLE_CODES = frozenset({int(ErrorCode.UNKNOWN_SESSION), -1})
RETRY_BACKOFF_S = 0.5  # before the first retry; the n-th waits n times this

# Views of the mode registry (edge/registry.py), the one list of modes.
SPLIT_MODES = tuple(m.name for m in REGISTRY if m.split)  # q_i(x_i) up, p_δ down, the robot resamples
EXIT_MODES = tuple(m.name for m in REGISTRY if m.early_exits)  # exits streamed, pre-drafting on the robot
PIPELINED_MODES = tuple(m.name for m in REGISTRY if m.pipelined)
LOSSY_MODES = tuple(m.name for m in REGISTRY if not m.exact)


@dataclass(frozen=True)
class EdgeConfig:
    """threads: N pre-draft workers (FSD); client_policy / server_policy: Q_p and Q_e order (Table 7);
    tp_s: emulated draft-forward time (0: real compute only); the verification time is emulated by
    the verifier's operator (``serve --emulate-tq-s``), never asked for by the robot."""

    decode: DecodeConfig = field(default_factory=DecodeConfig)
    threads: int = 4
    client_policy: str = "priority"
    server_policy: str = "priority"
    tp_s: float = 0.0
    tkslt_k: int = 20  # TK-SLT's K
    lowpay_k: int = 4  # the low-payload mode's K
    lossy_p_k: int = 10  # PicoSpec's K for the pruned downlink of p_δ (LOSSY)
    adaptive_gamma: bool = False  # pick γ per round by ODLD and fall back to cloud-only by AS² (TK-SLT)
    alpha_prior: float = 0.5  # the controller's α, b, c before the first measured round
    b_prior: float = 0.05
    c_prior: float = 0.05
    max_gamma: int = 16
    reconnect_retries: int = 2  # a decision interrupted by a lost or restarted verifier is opened again

    def draft_distribution(self, mode: str) -> DraftDistribution | None:
        """The q the drafter samples from in ``mode`` (None: its full softmax)."""
        k_field = get_mode(mode).sparse_q
        return DraftDistribution(getattr(self, k_field)) if k_field else None

    def __post_init__(self) -> None:
        for policy in (self.client_policy, self.server_policy):
            if policy not in POLICIES:
                raise ValueError(f"queue policy {policy!r} is not one of {POLICIES}")


class EdgeDecoder:
    """Runs one decision in a chosen mode against a remote verifier."""

    def __init__(self, client: VerifierLink, drafter: Drafter | None, config: EdgeConfig) -> None:
        self.client = client
        self.drafter = drafter
        self.config = config

    def decode(self, mode: str, prompt: EncodedPrompt, image: bytes) -> DecodeResult:
        """``prompt``: the robot's encoding of instruction + image; ``image``: the same image as sent
        (JPEG/PNG bytes, travels once).

        Reconnect (Lazy Pirate, at the level of a decision): when the verifier stops answering or no
        longer knows the session (it restarted, or the link was lost), the decision is opened again on
        a new session and decoded from the start, up to ``reconnect_retries`` times with
        ``RETRY_BACKOFF_S`` between tries. Every mode's output is a function of the prompt, the seed and
        the position-indexed draws, so the decision that finishes is exactly the one that was
        interrupted; nothing of a failed try has left the decoder."""
        for attempt in range(self.config.reconnect_retries + 1):
            try:
                return self._decode_once(mode, prompt, image)
            except VerifierAuthError:
                raise  # a refused key does not heal by retrying
            except VerifierError as exc:
                retryable = isinstance(exc, VerifierTimeout) or exc.code in RETRYABLE_CODES
                if not retryable or attempt == self.config.reconnect_retries:
                    raise
                log.warning("decision interrupted (%s); opening it again (%d of %d)", exc, attempt + 1,
                            self.config.reconnect_retries)
                time.sleep(RETRY_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")

    def _decode_once(self, mode: str, prompt: EncodedPrompt, image: bytes) -> DecodeResult:
        spec = get_mode(mode)
        if spec.speculative and self.drafter is None:
            raise ValueError(f"mode {mode} needs a drafter")
        c = self.config
        stats = DecodeStats(mode.upper())
        t0 = time.perf_counter()
        request = Open(input_ids=prompt.input_ids.numpy().astype(np.int32), image=image,
                       temperature=c.decode.sampling.temperature, seed=c.decode.seed, want_exits=spec.early_exits,
                       queue_policy=c.server_policy,
                       p_top_k=c.lossy_p_k if spec.lossy_p else 0)
        sid, opened = self.client.open(request)
        stats.prefill_s = time.perf_counter() - t0
        try:
            if not spec.speculative:
                tokens = self._cloud_ar(sid, stats, t0, c.decode.max_new_tokens)
            else:
                tokens = self._speculative(sid, prompt, stats, t0, mode)
        finally:
            self.client.end(sid)
        traffic = self.client.traffic.pop(sid)
        stats.bytes_up, stats.bytes_down = traffic.up_bytes, traffic.down_bytes
        stats.wall_s = time.perf_counter() - t0
        stats.tokens = len(tokens)
        return DecodeResult(tokens, stats)

    def _cloud_ar(self, sid: bytes, stats: DecodeStats, t0: float, budget: int, resampled: int = -1) -> list[int]:
        """Cloud-only decoding of up to ``budget`` tokens (the baseline, or AS²'s fallback)."""
        d = self.config.decode
        sent = time.perf_counter()
        self.client.send(sid, Generate(budget, d.stop_tokens, resampled))
        out: list[int] = []
        while True:
            msg = self.client.receive(sid)
            if isinstance(msg, ExitResult) and msg.stale:
                continue  # the answer to a pipelined block that was dropped
            if not isinstance(msg, Tokens):
                raise VerifierError(0, f"expected Tokens, got {type(msg).__name__}")
            stats.server_s += msg.compute_s
            stats.rounds += 1
            if not stats.ttft_s:
                stats.ttft_s = time.perf_counter() - t0
            out.extend(int(t) for t in msg.tokens)
            if msg.is_final:
                break
        stats.round_trip_s += time.perf_counter() - sent
        stats.verify_s += time.perf_counter() - sent
        # the cloud counted the same budget and stops; this also cuts at a stop token it missed
        done: list[int] = []
        append_until_stop(done, out, replace(d, max_new_tokens=budget))
        return done

    def _speculative(self, sid: bytes, prompt: EncodedPrompt, stats: DecodeStats, t0: float,
                     mode: str) -> list[int]:
        c, d = self.config, self.config.decode
        rng = PositionalRNG(d.seed)
        kv = self.drafter.start(prompt)
        seq = prompt.input_ids.tolist()
        predrafter = PreDrafter(self.drafter, c.threads, c.client_policy, d.gamma, d.sampling, rng,
                                c.tp_s) if mode in EXIT_MODES else None
        distribution = c.draft_distribution(mode)
        controller = DraftLengthController(c.alpha_prior, c.b_prior, c.c_prior, max_gamma=c.max_gamma) \
            if c.adaptive_gamma else None
        gamma, t_token = d.gamma, 0.0
        out: list[int] = []
        resampled = -1
        draft: Draft | None = None
        round_, already_sent = 0, False  # PicoSpec: the next round's block may be in flight already
        try:
            for _ in range(d.max_new_tokens + 1):
                if controller is not None and not already_sent:  # ODLD picks γ, AS² may hand over to the cloud
                    choice = controller.choice()
                    if not choice.use_speculation:
                        stats.cloud_fallback = 1
                        return out + self._cloud_ar(sid, stats, t0, d.max_new_tokens - len(out), resampled)
                    gamma = choice.gamma
                if draft is None:
                    t = time.perf_counter()
                    if mode in PIPELINED_MODES and gamma >= 2:  # fast verification: the head goes first
                        head = self._draft(kv, seq, stats, rng, distribution, (gamma + 1) // 2)
                        self.client.send(sid, replace(draft_block(round_, head, mode, distribution, resampled),
                                                      partial=True))
                        rest = self._draft(kv, seq + list(head.tokens), stats, rng, distribution, gamma - head.gamma)
                        draft = head.join(rest)
                    else:
                        draft = self._draft(kv, seq, stats, rng, distribution, gamma)
                    t_token = (time.perf_counter() - t) / draft.gamma
                if not already_sent:
                    sent = time.perf_counter()
                    self.client.send(sid, draft_block(round_, draft, mode, distribution, resampled))
                stats.rounds += 1
                stats.drafted += draft.gamma
                if predrafter is not None:
                    predrafter.begin_round(round_, seq, kv.fork(), gamma)
                ahead = final = None
                chained = False
                earliest: dict[tuple[int, ...], int] = {}
                if mode in PIPELINED_MODES:
                    ahead, ahead_kv, final = self._draft_ahead(sid, round_, kv, seq + list(draft.tokens), rng,
                                                               distribution, gamma, predrafter, earliest)
                    if final is None and ahead.gamma >= 2:  # overlapped: send it before the verdict
                        self.client.send(sid, replace(draft_block(round_ + 1, ahead, mode, distribution, -1),
                                                      chained=True))
                        chained, chained_at = True, time.perf_counter()
                if final is None:
                    final, earliest = self._await_final(sid, round_, predrafter, earliest)
                round_trip = time.perf_counter() - sent
                stats.round_trip_s += round_trip
                stats.server_s += final.compute_s
                stats.round_overheads_s.append(round_trip - final.compute_s)
                if controller is not None:
                    controller.observe(final.accepted, draft.gamma, t_token,
                                       max(0.0, round_trip - final.compute_s) / draft.gamma, max(final.compute_s, 1e-6))
                tokens = tuple(int(t) for t in final.tokens)
                resampled = -1
                if final.resample:  # DSSD: the robot resamples the rejected position itself
                    p_row = final_p_row(final, self.drafter.stack.vocab_size)
                    split = SplitVerdict(final.accepted, tokens, p_row)
                    tokens = split_verify_device(split, draft.q, rng, draft.position).tokens
                    resampled = tokens[-1]
                    stats.resamples += 1
                    stats.tv_sum += final.p_tv
                stats.accepted += final.accepted
                stats.full_rounds += final.accepted == draft.gamma
                seq.extend(tokens)
                first = not out
                done = append_until_stop(out, tokens, d)
                if first:
                    stats.ttft_s = time.perf_counter() - t0
                if done:
                    return out
                hit = predrafter.take(tokens) if predrafter is not None else None
                round_, already_sent = round_ + 1, False
                valid = ahead is not None and final.accepted == draft.gamma and not final.resample \
                    and ahead.gamma >= 2 and ahead.tokens[0] == tokens[-1]
                if chained:  # the cloud verifies the block sent ahead if valid, and answers stale if not
                    already_sent, sent = valid, chained_at
                    round_ += not valid
                if valid:  # PicoSpec: the pipelined block's assumption held
                    stats.cache_hits += 1
                    draft, kv = ahead.tail(1), ahead_kv
                elif hit is not None:
                    stats.cache_hits += 1
                    stats.hit_exit_sum += earliest.get(tokens, hit.layer)
                    draft, kv = hit.draft, hit.kv
                else:
                    stats.cache_misses += predrafter is not None or ahead is not None
                    draft = None
            raise VerifierError(0, "decode did not finish within its token budget")  # unreachable
        finally:
            if predrafter is not None:
                predrafter.close()

    def _draft(self, kv: KVCache, seq: list[int], stats: DecodeStats, rng: PositionalRNG,
               distribution: DraftDistribution | None, gamma: int) -> Draft:
        d = self.config.decode
        t = time.perf_counter()
        draft = self.drafter.draft(kv, seq, gamma, d.sampling, rng, self.config.tp_s, distribution=distribution)
        stats.draft_s += time.perf_counter() - t
        stats.draft_forwards += gamma
        return draft

    def _draft_ahead(self, sid: bytes, round_: int, kv: KVCache, guess: list[int], rng: PositionalRNG,
                     distribution: DraftDistribution | None, gamma: int, predrafter: PreDrafter | None,
                     earliest: dict[tuple[int, ...], int]):
        """PicoSpec's parallel drafting: draft 1 + γ tokens after ``guess`` (the prefix as if the block
        in flight were fully accepted) on a fork of the cache, stopping early once the verdict is in;
        early exits arriving meanwhile go to the pre-drafter (pico-fsd).
        Returns (the draft, its cache, the final verdict if it arrived meanwhile, else None)."""
        arrived: list[ExitResult] = []

        def verdict_in() -> bool:
            while not arrived:
                try:
                    msg = self.client.receive(sid, 0.0)
                except VerifierTimeout:
                    return False
                if not isinstance(msg, ExitResult) or msg.round > round_:
                    raise VerifierError(0, f"unexpected {type(msg).__name__} while pipelining round {round_}")
                if msg.round < round_:
                    continue  # the stale answer to a dropped pipelined block, or a late early exit
                if msg.is_final:
                    arrived.append(msg)
                else:
                    self._early_exit(msg, round_, predrafter, earliest)
            return True

        fork = kv.fork()
        ahead = self.drafter.draft(fork, guess, gamma + 1, self.config.decode.sampling, rng, self.config.tp_s,
                                   distribution=distribution, truncate=verdict_in)
        return ahead, fork, arrived[0] if arrived else None

    def _await_final(self, sid: bytes, round_: int, predrafter: PreDrafter | None,
                     earliest: dict[tuple[int, ...], int] | None = None
                     ) -> tuple[ExitResult, dict[tuple[int, ...], int]]:
        """Receive until the round's final exit; early exits feed the pre-drafter. Returns the final
        result and, per early output, the earliest exit layer that produced it."""
        earliest = {} if earliest is None else earliest
        while True:
            msg = self.client.receive(sid)
            if not isinstance(msg, ExitResult):
                raise VerifierError(0, f"expected ExitResult, got {type(msg).__name__}")
            if msg.round != round_:
                continue  # a late early exit of an earlier round
            if msg.is_final:
                return msg, earliest
            self._early_exit(msg, round_, predrafter, earliest)

    @staticmethod
    def _early_exit(msg: ExitResult, round_: int, predrafter: PreDrafter | None,
                    earliest: dict[tuple[int, ...], int]) -> None:
        """An early exit's output: remember its earliest layer, hand it to the pre-draft queue."""
        tokens = tuple(int(t) for t in msg.tokens)
        earliest[tokens] = min(earliest.get(tokens, msg.layer), msg.layer)
        if predrafter is not None:
            predrafter.offer(round_, tokens, msg.confidence, msg.layer)


def draft_block(round_: int, draft: Draft, mode: str, distribution: DraftDistribution | None,
                resampled: int) -> DraftBlock:
    """What ``mode`` sends of a draft: the ids always, and q whole, sparse, or its drafted values only."""
    tokens = np.asarray(draft.tokens, dtype=np.int32)
    block = DraftBlock(round=round_, position=draft.position, tokens=tokens, resampled=resampled)
    if draft.q is None:  # greedy: nothing to send about q
        return block
    if mode in SPLIT_MODES:
        values = draft.q[torch.arange(draft.gamma), torch.from_numpy(tokens).long()]
        return replace(block, q_draft=values.float().numpy())
    if distribution is not None and distribution.sparse:
        ids, values = to_sparse(draft.q, distribution.top_k)
        return replace(block, q_ids=ids.numpy(), q_values=values.numpy())
    return replace(block, q=draft.q.numpy())


def final_p_row(final: ExitResult, vocab_size: int) -> torch.Tensor:
    """p_δ (V,) from a DSSD verdict: sent whole, or (LOSSY) its top K."""
    if final.p is None:
        raise VerifierError(0, "a resample verdict without p")
    p = torch.from_numpy(np.array(final.p, dtype=np.float32))
    if final.p_ids is None:
        return p
    return densify(torch.from_numpy(np.array(final.p_ids))[None], p[None], vocab_size)[0]
