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
           sampling (as dssd). The block after next is drafted meanwhile too, and sent at a full hit's
           verdict (``pipeline_depth`` 2, a departure: ``edge.pipeline``). Fast verification: a block
           drafted from scratch leaves in two parts, its first half as soon as it exists, so the cloud
           starts on it while the rest is drafted;
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

Structure: ``EdgeDecoder._speculative`` is one short loop shaped like ``decoding.reference.speculative``;
what varies between the modes is plugged in. γ per round: ``edge.gamma`` (fixed, or TK-SLT's ODLD/AS²,
whose cloud-only fallback is ``edge.decision.CloudFallback``; the decision's state between rounds:
``edge.decision.DecisionState``). The mode is resolved once, at ``decode``, and handed on as the
registry's ``Mode``.
The round's draft: the first of ``edge.draft_sources`` that has one (PicoSpec's pipelined block,
FSD's pre-draft cache, a fresh draft). The wait for the verdict: ``edge.pipeline`` (a serial round, or
PicoSpec's round that drafts ahead, chains and numbers its successor). The link's side of a round:
``edge.round_link`` (blocks up, exits down, DSSD's resample). The pre-draft workers and the γ
controller outlive a decision: ``edge.long_lived``.
The first block rides with the Open (``edge.first_block``): drafted from the prompt while the Open
travels and is prefilled, sent right behind it, so the first verdict comes one round trip sooner.

Legend: n — tokens; τ — tokens per round; γ — draft length; r — cache miss rate; T_p, T_q, T_c —
draft forward, verification, one-way communication; T_r — waiting for a pre-draft on a hit.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from functools import partial

import numpy as np

from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.decoding.reference import DecodeResult, append_until_stop
from edge_spec_ros.edge.config import EdgeConfig
from edge_spec_ros.edge.constrained import DecisionMasks, GrammarDrafter
from edge_spec_ros.edge.decision import CloudFallback, CloudTokens, DecisionState, NewRound
from edge_spec_ros.edge.draft_sources import DraftChain, FreshDraft, PreDraftCache, SourcedDraft
from edge_spec_ros.edge.first_block import FirstBlockThread, Opening, first_gamma, observed_open_times
from edge_spec_ros.edge.gamma import GammaPolicy, RoundTiming
from edge_spec_ros.edge.long_lived import LongLivedParts
from edge_spec_ros.edge.pipeline import Pipeline, PipelinedRound, SerialRound
from edge_spec_ros.edge.predraft import PreDrafter
from edge_spec_ros.edge.registry import MODES, REGISTRY, Mode, get_mode
from edge_spec_ros.edge.round_link import RoundLink, verdict_tokens
from edge_spec_ros.models.drafter import Draft, Drafter
from edge_spec_ros.models.grammar import GrammarBook
from edge_spec_ros.models.kv_cache import KVCache
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.spec.pipeline import OpenTimes
from edge_spec_ros.spec.sampling import PositionalRNG
from edge_spec_ros.wire.messages import ErrorCode, ExitResult, Generate, Open, Tokens
from edge_spec_ros.wire.verifier_link import (
    VerifierAuthError, VerifierError, VerifierLink, VerifierLost, VerifierTimeout,
)

log = logging.getLogger(__name__)

# A decision is opened again after these errors (the verifier restarted and forgot the session; the
# bridge heard no reply within its reply timeout: code -1), and after a timeout; never after
# VerifierLost (the link's heartbeat says the verifier is gone: the decision fails at once).
RETRYABLE_CODES = frozenset({int(ErrorCode.UNKNOWN_SESSION), -1})
RETRY_BACKOFF_S = 0.5  # before the first retry; the n-th waits n times this

# Views of the mode registry (edge/registry.py), the one list of modes.
SPLIT_MODES = tuple(m.name for m in REGISTRY if m.split)  # q_i(x_i) up, p_δ down, the robot resamples
EXIT_MODES = tuple(m.name for m in REGISTRY if m.early_exits)  # exits streamed, pre-drafting on the robot
PIPELINED_MODES = tuple(m.name for m in REGISTRY if m.pipelined)
LOSSY_MODES = tuple(m.name for m in REGISTRY if not m.exact)


__all__ = ["EdgeConfig", "EdgeDecoder", "MODES", "SPLIT_MODES", "EXIT_MODES", "PIPELINED_MODES", "LOSSY_MODES"]


class EdgeDecoder:
    """Runs decisions in a chosen mode against a remote verifier, one speculative decision at a time.

    Long-lived parts (``edge.long_lived``): FSD's N pre-draft threads start with the first decision
    in a mode with early exits and idle between decisions; TK-SLT's γ controller keeps its estimates
    across decisions. ``close()`` (or leaving a ``with`` block) joins the threads; a decoder dropped
    without it tells them to exit. ``config`` may be replaced between decisions.

    ``grammars``: the grammars ``config.grammar`` may name, over the drafter's tokenizer
    (``models.grammar.book_for``); a speculative decision with a grammar masks the drafter's q by it
    (``edge.constrained``) while the verifier masks p (docs/grammar.md)."""

    def __init__(self, client: VerifierLink, drafter: Drafter | None, config: EdgeConfig,
                 grammars: GrammarBook | None = None) -> None:
        self.client = client
        self.drafter = drafter
        self.config = config
        self.grammars = grammars
        self._parts = LongLivedParts()
        self._open_times: OpenTimes | None = None  # measured at the last speculative decision (edge.first_block)
        weakref.finalize(self, self._parts.stop)

    @property
    def drafter(self) -> Drafter | None:
        """The decoder's drafter; during a decision under a grammar, its masked view (``edge.constrained``)."""
        return self._active if self._active is not None else self._drafter

    @drafter.setter
    def drafter(self, drafter: Drafter | None) -> None:
        self._drafter, self._active, self._grammar_drafter = drafter, None, None

    @contextmanager
    def _constrained(self, prompt: EncodedPrompt) -> Iterator[None]:
        """A speculative decision under ``config.grammar``: the drafter masks q by the grammar's automaton
        from the prompt's end on, the state the verifier starts from."""
        if not self.config.grammar:
            yield
            return
        if self.grammars is None:
            raise ValueError("a decision under a grammar needs the decoder's GrammarBook (models.grammar.book_for)")
        constraint = self.grammars.get(self.config.grammar)
        if self._grammar_drafter is None:
            self._grammar_drafter = GrammarDrafter(self._drafter)
        self._grammar_drafter.use(DecisionMasks(constraint.start(), int(prompt.input_ids.numel())))
        self._active = self._grammar_drafter.drafter
        try:
            yield
        finally:
            self._active = None
            self._grammar_drafter.use(None)

    def close(self) -> None:
        """Stop and join the pre-draft threads; a later decision starts them again."""
        self._parts.close()

    def __enter__(self) -> EdgeDecoder:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def decode(self, mode: str, prompt: EncodedPrompt, image: bytes) -> DecodeResult:
        """``prompt``: the robot's encoding of instruction + image; ``image``: the same image as sent
        (JPEG/PNG bytes, travels once).

        Reconnect (Lazy Pirate, at the level of a decision): when the verifier stops answering or no
        longer knows the session (it restarted, or the link was lost), the decision is opened again on
        a new session and decoded from the start, up to ``reconnect_retries`` times with
        ``RETRY_BACKOFF_S`` between tries. Every mode's output is a function of the prompt, the seed and
        the position-indexed draws, so the decision that finishes is exactly the one that was
        interrupted; nothing of a failed try has left the decoder. A decision interrupted by a link
        known dead (``VerifierLost``: the heartbeat, edge/client.py) fails at once and is not opened
        again: the robot stops, and its next decision opens once the link is alive again."""
        spec = get_mode(mode)  # the one lookup of a decision's mode: the registry's object from here on
        for attempt in range(self.config.reconnect_retries + 1):
            try:
                return self._decode_once(spec, prompt, image)
            except (VerifierAuthError, VerifierLost):
                raise  # a refused key does not heal by retrying; a dead verifier is not waited for
            except VerifierError as exc:
                retryable = isinstance(exc, VerifierTimeout) or exc.code in RETRYABLE_CODES
                if not retryable or attempt == self.config.reconnect_retries:
                    raise
                log.warning("decision interrupted (%s); opening it again (%d of %d)", exc, attempt + 1,
                            self.config.reconnect_retries)
                time.sleep(RETRY_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")

    def _decode_once(self, spec: Mode, prompt: EncodedPrompt, image: bytes) -> DecodeResult:
        if spec.speculative and self.drafter is None:
            raise ValueError(f"mode {spec.name} needs a drafter")
        c = self.config
        stats = DecodeStats(spec.name.upper())
        t0 = time.perf_counter()
        request = Open(input_ids=prompt.input_ids.numpy().astype(np.int32), image=image,
                       temperature=c.decode.sampling.temperature, seed=c.decode.seed, want_exits=spec.early_exits,
                       queue_policy=c.server_policy,
                       p_top_k=c.lossy_p_k if spec.lossy_p else 0, pipelined=spec.pipelined, grammar=c.grammar)
        if spec.speculative:
            tokens, opening = self._speculative_decision(request, prompt, stats, t0, spec)
            sid = opening.sid
        else:
            sid, _ = self.client.open(request)
            stats.prefill_s = time.perf_counter() - t0
            try:
                cloud = self._cloud_ar(sid, stats, t0, c.decode.max_new_tokens)
                self._parts.cloud.observe(cloud.wall(time.perf_counter()))  # what the adaptive modes weigh
                tokens = cloud.tokens
            finally:
                self.client.end(sid)
        self._parts.lengths.observe(len(tokens), c.decode.max_new_tokens)  # what a hand-over is priced over
        traffic = self.client.traffic.pop(sid)
        stats.bytes_up, stats.bytes_down = traffic.up_bytes, traffic.down_bytes
        stats.wall_s = time.perf_counter() - t0
        stats.tokens = len(tokens)
        stats.steady_s = max(0.0, stats.wall_s - stats.ttft_s)
        stats.steady_tokens = max(0, stats.tokens - stats.first_tokens)
        stats.steady_rounds = max(0, stats.rounds - 1)
        if spec.speculative:
            self._open_times = observed_open_times(stats, self._open_times)
        return DecodeResult(tokens, stats)

    def _speculative_decision(self, request: Open, prompt: EncodedPrompt, stats: DecodeStats, t0: float,
                              spec: Mode) -> tuple[list[int], Opening]:
        """Open a speculative decision (with its first block where it can travel: ``_open_first``),
        decode it (``_speculative``) and close it; its tokens and how it was opened."""
        rng = PositionalRNG(self.config.decode.seed)
        with self._constrained(prompt), self._parts.decision(self.config, self.drafter, spec, rng) as \
                (policy, predrafter):
            opening = self._open_first(request, prompt, stats, t0, spec, rng, policy)
            try:
                return self._speculative(opening, prompt, stats, t0, spec, rng, policy, predrafter), opening
            finally:
                self.client.end(opening.sid)

    def _open_first(self, request: Open, prompt: EncodedPrompt, stats: DecodeStats, t0: float, spec: Mode,
                    rng: PositionalRNG, policy: GammaPolicy) -> Opening:
        """Open the decision. The first block (``edge.first_block``): where the link can carry it
        (``open_with``) and the γ policy speculates, the robot drafts γ₀ tokens from the prompt right
        after the Open has left, on a thread of its own (``FirstBlockThread``) while this one waits for
        ``Opened``, and sends them as round 0's block right behind the Open; the verifier verifies them
        in the forward that follows the prefill. Otherwise today's sequence: the Open, ``Opened``, then
        the first draft."""
        c, d = self.config, self.config.decode
        distribution = c.draft_distribution(spec)
        open_with = getattr(self.client, "open_with", None)
        plan = first_gamma(c, policy, self._open_times) if open_with is not None else None
        if plan is None:
            sid, _ = self.client.open(request)
            stats.prefill_s = time.perf_counter() - t0
            return Opening(sid, RoundLink(self.client, sid, spec, distribution))

        def first(sid: bytes) -> tuple[RoundLink, SourcedDraft]:
            link = RoundLink(self.client, sid, spec, distribution)
            fresh = FreshDraft(self.drafter, link, d.sampling, rng, c.tp_s, False, stats, d.stop_tokens)
            sourced = fresh.draft(0, self._draft_prefill(prompt, stats), prompt.input_ids.tolist(), plan.gamma0, -1)
            return link, replace(sourced, sent_at=link.send(0, sourced.draft, -1))

        block = FirstBlockThread(first)
        try:
            sid, _ = open_with(request, block.start)
        except BaseException:
            with suppress(BaseException):  # the Open's error is the decision's; the drafter is free again
                block.join()
            raise
        stats.prefill_s = time.perf_counter() - t0  # the Open's round trip, the block drafted meanwhile
        try:
            link, sourced = block.join()
        except BaseException:
            self.client.end(sid)
            raise
        # round 0's round trip counts from when both Opened and the block were there (``Opening``)
        return Opening(sid, link, replace(sourced, sent_at=max(t0 + stats.prefill_s, sourced.sent_at)),
                       plan.round_gamma)

    def _resume_drafter(self, state: DecisionState, prompt: EncodedPrompt, stats: DecodeStats,
                        policy: GammaPolicy) -> float:
        """Bring the drafter's cache up to the committed sequence before a speculative round: the
        prompt's prefill when none ran yet (a decision AS² hands to the cloud at once never pays it),
        and the tokens cloud-only chunks emitted since the drafter last drafted (``Drafter.catch_up``;
        only these two leave it behind). Returns the time it took: a cost of starting or resuming
        speculation, not of the round (AS² prices rounds by their wall time); after cloud-only chunks
        the policy hears it as the cost of resuming (``observe_resume``)."""
        start = time.perf_counter()
        prefill = state.kv is None
        if prefill:
            state.kv = self._draft_prefill(prompt, stats)
        behind = (prefill or stats.cloud_fallback) and self.drafter.catch_up(state.kv, state.seq)
        if not (prefill or behind):
            return 0.0
        took = time.perf_counter() - start
        if stats.cloud_fallback:
            policy.observe_resume(took)
        return took

    def _draft_prefill(self, prompt: EncodedPrompt, stats: DecodeStats) -> KVCache:
        """The drafter's prefill of the prompt, timed (``stats.draft_prefill_s``: T_pre of ``OpenTimes``)."""
        start = time.perf_counter()
        kv = self.drafter.start(prompt)
        stats.draft_prefill_s += time.perf_counter() - start
        return kv

    def _cloud_ar(self, sid: bytes, stats: DecodeStats, t0: float, budget: int, resampled: int = -1) -> CloudTokens:
        """Cloud-only decoding of up to ``budget`` tokens (the baseline, or AS²'s fallback)."""
        d = self.config.decode
        sent = time.perf_counter()
        self.client.send(sid, Generate(budget, d.stop_tokens, resampled))
        out: list[int] = []
        first_at, first_count = 0.0, 0
        while True:
            msg = self.client.receive(sid)
            if isinstance(msg, ExitResult) and (msg.stale or not msg.is_final):
                continue  # the answer to a pipelined block that was dropped, a late early exit
            if not isinstance(msg, Tokens):
                raise VerifierError(0, f"expected Tokens, got {type(msg).__name__}")
            stats.server_s += msg.compute_s
            stats.rounds += 1
            if not stats.ttft_s:
                stats.ttft_s = time.perf_counter() - t0
                stats.first_tokens = len(msg.tokens)
            if not out and len(msg.tokens):
                first_at, first_count = time.perf_counter(), len(msg.tokens)
            out.extend(int(t) for t in msg.tokens)
            if msg.is_final:
                break
        stats.round_trip_s += time.perf_counter() - sent
        stats.verify_s += time.perf_counter() - sent
        # the cloud counted the same budget and stops; this also cuts at a stop token it missed
        done: list[int] = []
        append_until_stop(done, out, replace(d, max_new_tokens=budget))
        return CloudTokens(done, sent, first_at, first_count)

    def _speculative(self, opening: Opening, prompt: EncodedPrompt, stats: DecodeStats, t0: float, spec: Mode,
                     rng: PositionalRNG, policy: GammaPolicy, predrafter: PreDrafter | None) -> list[int]:
        """Speculative decoding over the link, round by round as ``decoding.reference.speculative``: γ
        (``edge.gamma``; AS²'s cloud-only chunks meanwhile, ``CloudFallback``), a draft from the first
        source that has one (``edge.draft_sources``), send it, the verdict (``edge.pipeline``: a
        pipelined round drafts ahead meanwhile), commit its tokens, settle the next round's draft. A first
        block sent with the Open (``opening.first``) is round 0's, on the link already."""
        link = opening.link
        state = DecisionState(prompt.input_ids.tolist(), self.config.decode, stats, t0,
                              partial(self._round_parts, spec, link, rng, predrafter, stats))
        gamma = self._opening_gamma(opening, state, policy)
        fallback = CloudFallback(policy, partial(self._cloud_ar, opening.sid, stats, t0))
        for i in range(self.config.decode.max_new_tokens + 1):
            if not state.sources.in_flight:  # a block on the link already keeps the γ it was drafted with
                gamma = fallback.gamma(state)
                if gamma is None:  # the cloud's chunks finished the decision
                    return state.out
                state.mark += self._resume_drafter(state, prompt, stats, policy)  # a switch's cost, not the round's
            elif spec.pipelined and i > 0:  # what is drafted ahead meanwhile takes the estimates as they are now
                gamma = policy.ahead()
            block = state.sources.draft(state.number, state.kv, state.seq, gamma, state.resampled)
            sent = block.sent_at if block.sent_at is not None else \
                link.send(state.number, block.draft, state.resampled)
            state.kv, draft = block.kv, block.draft
            state.sources.begin_round(state.number, state.seq, state.kv, gamma)
            round_ = state.new_round(state.number)
            final = round_.verdict(state.seq, state.kv, draft, gamma, state.remaining)
            # the first block's round trip waited for the prefill, and its drafting overlapped the Open: neither
            # its round trip nor its wall time is what a round costs
            tokens, now, timing = self._observe(state, block, final, sent, block is not opening.first, link, rng)
            done = state.commit(tokens, now, tokens[-1] if final.resample else -1)  # DSSD: the next block tells it
            # a decision's last round ends at a stop token or the budget: its wall time per token is what the
            # decision's end costs, not what speculating does
            policy.observe(replace(timing, wall_s=None) if done else timing)
            if done:
                round_.close()  # nothing drafted ahead outlives the decision
                return state.out
            settled = round_.settle(draft, final, tokens)
            stats.branches_held += settled.branch
            stats.after_next_held += settled.after_next
            state.sources.after_verdict(settled.ahead, tokens)
            state.number = settled.next_number
        raise VerifierError(0, "decode did not finish within its token budget")  # unreachable

    def _opening_gamma(self, opening: Opening, state: DecisionState, policy: GammaPolicy) -> int:
        """Round 0's γ. A first block keeps its γ₀; what is drafted while it is verified (PicoSpec's next
        block, FSD's pre-drafts) takes round 0's γ, which the block drafted ahead then carries on: the
        policy's answer at the opening (asked once), or a fixed policy's γ. Without a first block the
        loop asks the policy itself."""
        if opening.first is None:
            return self.config.decode.gamma
        state.kv = opening.first.kv
        state.sources.preset(opening.first)
        asked = policy.gamma(state.remaining) if opening.round_gamma is None else opening.round_gamma
        return asked or opening.first.draft.gamma

    def _observe(self, state: DecisionState, block: SourcedDraft, final: ExitResult, sent: float, measured: bool,
                 link: RoundLink, rng: PositionalRNG) -> tuple[tuple[int, ...], float, RoundTiming]:
        """A verdict's tokens, when they came and the round's timing for the γ policy, the round recorded
        (``record_round``); ``measured``: whether its round trip and wall time are what a round costs."""
        round_trip = time.perf_counter() - sent
        record_round(state.stats, block.draft, final, round_trip, measured)
        tokens = verdict_tokens(final, block.draft, rng, self.drafter.stack.vocab_size)
        now = time.perf_counter()
        return tokens, now, RoundTiming(final.accepted, block.draft.gamma, block.t_token_s, round_trip,
                                        final.compute_s, link.sent_bytes(state.number),
                                        wall_s=now - state.mark if measured else None, emitted=len(tokens),
                                        link_measured=measured)

    def _round_parts(self, spec: Mode, link: RoundLink, rng: PositionalRNG, predrafter: PreDrafter | None,
                     stats: DecodeStats, number: int) -> tuple[DraftChain, NewRound]:
        """The draft sources and the round type of a decision in ``spec`` from round ``number`` on."""
        c, d = self.config, self.config.decode
        sources = DraftChain(FreshDraft(self.drafter, link, d.sampling, rng, c.tp_s, spec.pipelined, stats,
                                        d.stop_tokens),
                             PreDraftCache(predrafter) if predrafter is not None else None, spec.pipelined, stats)
        if not spec.pipelined:
            return sources, partial(SerialRound, link=link, on_exit=sources.on_exit)
        pipeline = Pipeline(number + 1, self._parts.branch_gate(spec.name) if c.branch_blocks > 0 else None,
                            c.branch_blocks, depth=c.pipeline_depth)
        return sources, partial(PipelinedRound, link=link, on_exit=sources.on_exit, drafter=self.drafter,
                                sampling=d.sampling, rng=rng, tp_s=c.tp_s, pipeline=pipeline, split=spec.split)


def record_round(stats: DecodeStats, draft: Draft, final: ExitResult, round_trip_s: float,
                 link_measured: bool = True) -> None:
    """A verified round's counters: γ drafted, δ accepted, its round trip and the server's T_q; its
    overhead (round trip less T_q) unless the round trip says nothing of the link (``link_measured``)."""
    stats.rounds += 1
    stats.drafted += draft.gamma
    stats.block_gammas.append(draft.gamma)
    stats.accepted += final.accepted
    stats.full_rounds += final.accepted == draft.gamma
    stats.round_trip_s += round_trip_s
    stats.server_s += final.compute_s
    if link_measured:
        stats.round_overheads_s.append(round_trip_s - final.compute_s)
    if final.resample:  # DSSD: the robot resampled the rejected position
        stats.resamples += 1
        stats.tv_sum += final.p_tv
