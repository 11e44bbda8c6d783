"""One decision on the verifier: the committed sequence, its KV cache and the verification rounds.

No sockets here: the server and the in-process link hand each decoded request to
``VerifySession.handle`` with an ``emit`` callback and run the work it returns; the request state
machine (open, round order, PicoSpec partial and chained blocks, verification, generation) exists
here only. Algorithm 2 of the FSD paper (LISTENER): verify the draft at the exits (eq. 5), emit
each exit's output with its confidence (eq. 4) as soon as its layer is done, and the final exit
marked final. Which early exits a round computes is the verifier's ``ExitPlanner``'s
(``spec.exits``): every exit in a decision's first round, then those that earn their compute; each
round reports back which exits matched the final verdict, what their heads cost on the critical
path, and the gaps to the next block (the robot's saving on a hit, the cycle with and without exits).

Legend: γ — draft length; δ^(l) — accepted by exit l; L — final layer; T_q — verification time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from edge_spec_ros.cloud.limits import MAX_GAMMA, Limits, RequestError, check_draft, check_generate
from edge_spec_ros.models.grammar import GrammarBook, GrammarError, book_for
from edge_spec_ros.models.prompt import PromptEncoder, decode_image
from edge_spec_ros.models.stack import Shortlist
from edge_spec_ros.models.verifier import BlockForward, EarlyExitVerifier, ExitLogits
from edge_spec_ros.spec.constraint import ConstraintState, ForbiddenToken, mask_logits
from edge_spec_ros.spec.exits import exit_confidence, verify_exit
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig, Stream, choose, probs_from_logits
from edge_spec_ros.spec.sparse import densify, prune_topk
from edge_spec_ros.spec.verify import split_verify_server
from edge_spec_ros.spec.vocab import draft_in_vocab
from edge_spec_ros.wire.messages import (
    DraftBlock, ErrorCode, ExitResult, Generate, Message, Open, Opened, Tokens,
)

PROTOCOL_LIMITS = Limits(max_gamma=MAX_GAMMA)  # what a session refuses without a server's own limits

PREFILL_CHUNK_TOKENS = 256  # prompt positions per prefill slice (serve --prefill-chunk-tokens); shorter
# prompts are one slice, computed exactly as an unsliced prefill
PREFILL_CHUNK_CELLS = 256 * 1024  # query-key pairs per prefill slice (serve --prefill-chunk-cells): slices of
# 256 positions up to 1,024 cached, then shorter (16 positions at 16k), so one layer of one slice costs
# about as much at any depth


EXIT_SHORTLIST = 0  # > 0: an early exit's head scores the token ids below this and the decision's own
# tokens (prompt, committed, draft), not the whole vocabulary (serve --exit-shortlist; 0: the whole, as
# the FSD paper's heads do)


def shortlist_ids(below: int, vocab_size: int, *token_lists: list[int]) -> torch.Tensor | None:
    """The ids an early exit's head scores (sorted, (k,)): every id below ``below`` and every id in
    ``token_lists``; None (the whole vocabulary) when ``below`` is 0 or the set would cover V anyway.

    A departure from the FSD paper, whose exit heads score every token (eq. 4-5): an early exit only
    steers pre-drafting, never the output, so a head that scores fewer tokens changes which exits are
    right, never a token emitted. Byte-pair vocabularies (SmolLM2's, Qwen2's) give their most frequent
    tokens the lowest ids; on SmolLM2-135M's text tasks, with ids below 4,096 plus the decision's tokens,
    each exit was right about as often as with all 49,152 ids (within one round of 126) at a fifth of
    the heads' time; it is off by default because on this project's 2-core machine it did not make FSD
    faster end to end (docs/benchmarks.md)."""
    if below <= 0 or below >= vocab_size:
        return None
    extra = {t for tokens in token_lists for t in tokens if below <= t < vocab_size}
    return torch.cat([torch.arange(below), torch.tensor(sorted(extra), dtype=torch.long)])


class Cancelled(Exception):
    """The session was closed or expired: its work stops at the next layer or token."""


@dataclass(frozen=True)
class ComputeProfile:
    """Emulated verifier compute, set by the server's operator (``serve --emulate-tq-s``), never by a
    request: each forward pass takes at least ``tq_s`` (0: real time only). Exit l of L is released
    at t0 + T_q·l/L, so early exits stream out as they would on real hardware where layers take equal
    time."""

    tq_s: float = 0.0

    def wait_for_layer(self, t0: float, layer: int, num_layers: int, cancel: threading.Event | None = None) -> None:
        if self.tq_s > 0:
            delay = t0 + self.tq_s * layer / num_layers - time.perf_counter()
            if delay > 0:
                if cancel is None:
                    time.sleep(delay)
                elif cancel.wait(delay):
                    raise Cancelled()


class VerifySession:
    """The request state machine of one open decision, driven through ``handle`` only: nothing outside
    changes its state (``prepared`` is a read-only view). ``request`` is the Open that starts the decision (the server has run
    ``limits.check_open`` on it); building the session is cheap, the Open's work (decoding the image,
    prefill) runs later, as every request's does. ``compute``: emulated compute (None: the request's
    own ``compute_tq_s``, which only the in-process link honours; the server always passes its
    operator's profile); ``cancel``: set by the owner when the session is closed or expired, its work
    then stops with ``Cancelled`` at the next layer or token; ``max_tokens``: the longest committed
    sequence (prompt + decoded) the session may reach; ``prefill_chunk_tokens`` / ``prefill_chunk_cells``:
    the prefill's slices (``DecoderStack.begin_prefill``); ``limits``: what a draft block or a
    generation request may carry (``limits.check_draft``/``check_generate``, run by ``handle``);
    ``grammars``: the grammars an Open may name (None: the process's book for the encoder's tokenizer,
    ``models.grammar.book_for``).

    Grammar-constrained decoding (``Open.grammar``, docs/grammar.md): the automaton's state follows the
    committed reply; every row of every exit's logits over a block is masked by the state after the
    tokens before it (``spec.constraint``), as the drafter masked q, so the verdict follows norm(p · m);
    a drafted or resampled token the state forbids is refused (ErrorCode.GRAMMAR), nothing verified."""

    def __init__(self, verifier: EarlyExitVerifier, encoder: PromptEncoder, request: Open,
                 compute: ComputeProfile | None = None, cancel: threading.Event | None = None,
                 max_tokens: int = 1 << 30, prefill_chunk_tokens: int = PREFILL_CHUNK_TOKENS,
                 prefill_chunk_cells: int = 0, exit_shortlist: int = EXIT_SHORTLIST,
                 limits: Limits = PROTOCOL_LIMITS, grammars: GrammarBook | None = None) -> None:
        self._verifier = verifier
        self._grammars = grammars
        self._grammar: ConstraintState | None = None  # the automaton after the committed reply (Open.grammar)
        self._limits = limits
        self._exit_shortlist = exit_shortlist
        self._rare: set[int] = set()  # ids at or above the shortlist's bound met so far (prompt, blocks)
        self._scanned = 0  # committed tokens already looked at for them
        self._exit_head: Shortlist | None = None
        self._encoder = encoder
        self._request = request
        self._sampling = SamplingConfig(request.temperature)
        self._rng = PositionalRNG(request.seed)
        self._want_exits = request.want_exits
        self._pipelined = request.pipelined
        self._compute = compute if compute is not None else ComputeProfile(request.compute_tq_s)
        self._cancel = cancel if cancel is not None else threading.Event()
        self._max_tokens = max_tokens
        self._prefill_chunk = prefill_chunk_tokens
        self._prefill_cells = prefill_chunk_cells
        self._p_top_k = request.p_top_k
        # admission: touched by ``handle`` itself, on the caller's thread, in arrival order
        self._opened = False
        self._next_round = 0
        # the decision: touched by the requests' work only, one request at a time
        self._awaiting_resample = False  # DSSD: the robot owes the token it resampled last round
        self._prepared: _Prepared | None = None  # PicoSpec fast verification: a partial block's work
        self._committed: list[int] = []
        self._kv = None
        self._arrivals: dict[int, float] = {}  # round → when its whole block was admitted
        self._last_final: tuple[float, bool] | None = None  # the last verdict's time, and whether an exit matched it
        self._last_block: tuple[float, bool | None] | None = None  # last block's arrival; its arm (None: a probe)

    @property
    def prepared(self) -> "_Prepared | None":
        """PicoSpec: the work done on the current round's partial block, kept for its whole block."""
        return self._prepared

    def handle(self, message: Open | DraftBlock | Generate, emit: Callable[[Message], None]) -> Iterator[None]:
        """Take the session's next request: admit it now, and return its work.

        Admission is cheap and runs on the caller's thread in arrival order (the server's I/O thread):
        the session's own Open comes first, and once; every field of a draft block or a Generate is
        checked against the session's ``limits`` (``RequestError``, nothing changes); a draft block
        must be for the next round, else ``RequestError`` (OUT_OF_ORDER) and nothing changes; a whole
        block uses its round up even when its verification then fails, a partial block (PicoSpec)
        does not. Other refusals at admission are BAD_REQUEST.

        The returned iterator is the request's work, to be run to its end in admission order, one
        request at a time (a worker): Open — decode the image, prefill, emit ``Opened``, yielding after
        each layer of each prefill slice; partial block — prepare the verification; whole block —
        verify, emitting each exit's ``ExitResult``; Generate — emit ``Tokens``, yielding after each
        token. Between yields a scheduler may run other sessions' work; the other requests run whole
        on their first step (one round's forward pass is not sliced). The work raises ``RequestError`` for a request it cannot serve, and
        ``Cancelled`` once ``cancel`` is set."""
        if isinstance(message, Open):
            if message is not self._request or self._opened:
                raise RequestError("a session is opened once, by the Open it was built for")
            self._opened = True
            return self._open(emit)
        if not self._opened:
            raise RequestError(f"{type(message).__name__} before the session's Open")
        vocab = self._verifier.stack.vocab_size
        if isinstance(message, DraftBlock):
            check_draft(message, self._request, self._limits, vocab)
            if message.round != self._next_round:
                raise RequestError(f"draft for round {message.round}, expected {self._next_round}",
                                   ErrorCode.OUT_OF_ORDER)
            if message.partial:  # the same round's whole block follows
                return _whole(lambda: self._prepare(message))
            self._next_round += 1
            self._arrivals[message.round] = time.perf_counter()
            return VerifyJob(lambda: self._begin_verify(message, emit),
                             lambda plan, tally, out: self._verify_exit(plan, tally, out, emit), self._forward)
        if isinstance(message, Generate):
            check_generate(message, self._limits, vocab)
            return self._generate(message, emit)
        raise RequestError(f"{type(message).__name__} is not a request of an open decision")

    def _open(self, emit: Callable[[Opened], None]) -> Iterator[None]:
        """Build the prompt (decoding the image, JPEG/PNG: this may take a while) and prefill it in
        slices of ``prefill_chunk_tokens`` positions, yielding after each layer of each slice (chunked
        prefill), so that a long prompt shares the worker with other sessions' rounds."""
        ids = np.asarray(self._request.input_ids)
        vocab = self._verifier.stack.vocab_size
        if ids.ndim != 1 or ids.size < 2 or ids.min() < 0 or ids.max() >= vocab:
            raise RequestError(f"the prompt must be at least 2 ids in [0, {vocab})")
        try:
            image = decode_image(self._request.image) if self._request.image else None
            prompt = self._encoder.from_ids(ids, image)
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        self._grammar = self._start_grammar()
        if self._cancel.is_set():
            raise Cancelled()
        self._committed = prompt.input_ids.tolist()
        t0 = time.perf_counter()
        pending = self._verifier.begin_prefill(prompt, self._prefill_chunk, self._prefill_cells)
        while not pending.step():
            yield
            if self._cancel.is_set():
                raise Cancelled()
        self._kv = pending.kv
        emit(Opened(self._verifier.num_layers, self._verifier.exit_layers, time.perf_counter() - t0))

    def _start_grammar(self) -> ConstraintState | None:
        """The automaton at the reply's start for the Open's grammar (None: unconstrained), compiled once
        per grammar by the book; ``RequestError`` (GRAMMAR) for one that cannot be had."""
        if not self._request.grammar:
            return None
        vocab = self._verifier.stack.vocab_size
        try:
            book = self._grammars or book_for(self._encoder.tokenizer, vocab)
            constraint = book.get(self._request.grammar)
        except GrammarError as exc:
            raise RequestError(f"Open.grammar: {exc}", ErrorCode.GRAMMAR) from None
        if constraint.vocab_size != vocab:
            raise RequestError(f"the grammar covers {constraint.vocab_size} ids, the verifier {vocab}", ErrorCode.GRAMMAR)
        return constraint.start()

    def _grammar_masks(self, draft: DraftBlock, tokens: list[int]) -> torch.Tensor | None:
        """m(s_0..s_γ) (γ+1, V) for a block after the committed reply and the block's resampled token
        (DSSD), which the state then takes; ``RequestError`` (GRAMMAR), nothing changed, for a token the
        grammar forbids."""
        if self._grammar is None:
            return None
        state = self._grammar.fork()
        if draft.resampled >= 0:
            self._advance_grammar(draft.resampled, state)
        try:
            masks = state.masks_along(tokens)
        except ForbiddenToken as exc:
            raise RequestError(f"draft token {exc.index} ({exc.token}) of round {draft.round} is not allowed by the "
                               "grammar", ErrorCode.GRAMMAR) from None
        self._grammar = state
        return masks

    def _commit(self, tokens: tuple[int, ...] | list[int]) -> None:
        """Tokens the verifier emitted (drawn from masked distributions: the grammar allows them)."""
        self._committed.extend(tokens)
        if self._grammar is not None:
            self._grammar.extend(tokens)

    def _begin_verify(self, draft: DraftBlock, emit: Callable[[ExitResult], None]) -> "VerifyPlan | None":
        """A whole block's checks and state changes before its forward pass (None: answered already, a
        stale chained block); the forward then covers what ``plan.forward`` says. One block is
        one forward pass, not sliced (``VerifyJob``)."""
        if draft.chained:
            draft = self._unchain(draft, emit)
            if draft is None:
                return None
        if self._awaiting_resample != (draft.resampled >= 0):
            raise RequestError("after a DSSD rejection the next draft must carry the resampled token, and only then")
        tokens = [int(t) for t in draft.tokens]
        masks = self._grammar_masks(draft, tokens)
        if draft.resampled >= 0:
            self._committed.append(draft.resampled)
            self._awaiting_resample = False
        if draft.position != len(self._committed):
            raise RequestError(f"draft at position {draft.position}, the committed prefix has {len(self._committed)}")
        if draft.position + len(draft.tokens) + 1 > self._max_tokens:
            raise RequestError(f"the decision would pass {self._max_tokens} tokens (serve --max-prompt-tokens "
                               "+ --max-new-tokens)", ErrorCode.TOO_LARGE)
        t0 = time.perf_counter()
        prepared, self._prepared = self._prepared, None
        if prepared is not None and (prepared.position != draft.position
                                     or tuple(tokens[:len(prepared.tokens)]) != prepared.tokens):
            prepared = None  # the whole block does not extend the partial one: start afresh
        if prepared is not None:
            t0 = prepared.started  # the verification began with the partial block
        split = draft.q_draft is not None
        done = 0 if prepared is None else len(prepared.tokens)
        want_exits = self._want_exits and not split
        planner = self._verifier.planner_for(self._pipelined) if want_exits else None
        arrived = self._arrivals.pop(draft.round, None)
        if planner is not None and self._last_final is not None and arrived is not None:
            left, matched = self._last_final
            if arrived >= left and not draft.chained:  # a block sent after the verdict it follows
                planner.observe_gap(arrived - left, matched)
        probe = self._last_final is None
        exits = planner.plan(probe=probe) if planner is not None else \
            frozenset(self._verifier.exit_layers) if want_exits else frozenset()
        if planner is not None and arrived is not None and not draft.chained:
            if self._last_block is not None and arrived >= self._last_block[0]:
                planner.observe_cycle(arrived - self._last_block[0], self._last_block[1])
            every = probe and exits == frozenset(self._verifier.exit_layers)  # a probe round: neither arm
            self._last_block = (arrived, None if every else bool(exits))
        forward = BlockForward(self._kv, self._committed + tokens, len(self._committed) - 1 + done, exits,
                               self._shortlist(tokens) if exits else None)
        return VerifyPlan(draft, tokens, None if split else self._dense_q(draft), t0, prepared,
                          want_exits, split, forward, masks)

    def _verify_exit(self, plan: "VerifyPlan", tally: "ExitTally", out: ExitLogits,
                     emit: Callable[[ExitResult], None]) -> None:
        """One exit's logits over the block (joined to a prepared partial block's rows): verify, wait
        for the emulated compute, emit; the final exit commits. ``tally``: what the round's early exits
        gave and cost so far."""
        if not out.is_final and out.layer not in plan.forward.exits:
            return  # an exit this round's plan left out (a caller that computed it anyway)
        if plan.prepared is not None:
            out = ExitLogits(out.layer, torch.cat([plan.prepared.logits[out.layer], out.logits]), out.is_final,
                             out.head_s)
        if plan.masks is not None:  # every exit, as the final one: pre-drafts extend what the grammar allows
            out = replace(out, logits=mask_logits(out.logits, plan.masks))
            if not out.is_final and not torch.isfinite(out.logits).any(-1).all():
                return  # a shortlisted head with no allowed id in some row: no verdict of its own
        if plan.split:
            if out.is_final:
                self._verify_split(plan.draft, plan.tokens, plan.t0, emit, out.logits)
            return
        draft = plan.draft
        t = time.perf_counter()
        result = verify_exit(out.layer, out.logits, plan.tokens, plan.q, self._sampling, self._rng, draft.position,
                             out.is_final)
        if not out.is_final:
            tally.outputs[out.layer] = result.verdict.tokens
            tally.heads[out.layer] = out.head_s + time.perf_counter() - t
        t = time.perf_counter()
        self._compute.wait_for_layer(plan.t0, out.layer, self._verifier.num_layers, self._cancel)
        tally.slept += time.perf_counter() - t
        if self._cancel.is_set():
            raise Cancelled()
        if out.is_final:
            self._commit(result.verdict.tokens)
        compute_s = time.perf_counter() - plan.t0
        emit(ExitResult(round=draft.round, layer=out.layer, accepted=result.verdict.accepted,
                        tokens=np.asarray(result.verdict.tokens, dtype=np.int32),
                        confidence=result.confidence, is_final=out.is_final,
                        compute_s=compute_s))
        if out.is_final and plan.want_exits:
            self._learn_exits(tally, result.verdict.tokens, compute_s,
                              covered=self._pipelined and result.verdict.accepted == len(plan.tokens))

    def _learn_exits(self, tally: "ExitTally", final: tuple[int, ...], compute_s: float, covered: bool) -> None:
        """After a round's verdict left: tell the exit planner which computed exits matched it and what
        their heads cost on the critical path; ``covered``: the robot had the next block already (a
        pipelined session's fully accepted block), so no exit was of use to it. With emulated compute (``ComputeProfile``) a head costs
        only what it adds beyond the emulated T_q: max(T_q, R) − max(T_q, R − H) for real compute R and
        heads H, shared among the exits by their measured times."""
        planner = self._verifier.planner_for(self._pipelined)
        matched = not covered and any(tuple(t) == tuple(final) for t in tally.outputs.values())
        self._last_final = (time.perf_counter(), matched)
        if planner is None or not tally.outputs:
            return
        heads = sum(tally.heads.values())
        real = compute_s - tally.slept
        tq = self._compute.tq_s
        extra = max(tq, real) - max(tq, real - heads)
        scale = extra / heads if heads > 0 else 0.0
        planner.observe(tally.outputs, final, {l: h * scale for l, h in tally.heads.items()}, compute_s, covered)

    def _prepare(self, partial: DraftBlock) -> None:
        """PicoSpec's fast verification: run the verifier over the first tokens of the next block as
        soon as they arrive, keeping every exit's logits, so only the rest is computed when the whole
        block comes. A partial block that does not fit the committed prefix is ignored."""
        if partial.chained or partial.position != len(self._committed) or self._awaiting_resample \
                or partial.resampled >= 0:
            self._prepared = None
            return
        started = time.perf_counter()
        tokens = tuple(int(t) for t in partial.tokens)
        seq = self._committed + list(tokens)
        first = len(self._committed) - 1
        if self._want_exits:
            logits = {out.layer: out.logits[: len(tokens)]
                      for out in self._verifier.exits(self._kv, seq, first, shortlist=self._shortlist(list(tokens)))}
        else:
            logits = {self._verifier.num_layers: self._verifier.logits(self._kv, seq, first)[: len(tokens)]}
        self._prepared = _Prepared(partial.position, tokens, logits, started)

    def _shortlist(self, tokens: list[int]) -> Shortlist | None:
        """The early exits' shortlist for a block of ``tokens`` after the committed prefix (None: all):
        the ids below the bound and every rarer id the decision has met so far, so the LM head's rows
        are gathered again only when a new one appears."""
        below, vocab = self._exit_shortlist, self._verifier.stack.vocab_size
        if below <= 0 or below >= vocab:
            return None
        fresh = {t for t in self._committed[self._scanned:] + tokens if below <= t < vocab} - self._rare
        self._scanned = len(self._committed)
        if fresh or self._exit_head is None:
            self._rare |= fresh
            self._exit_head = self._verifier.stack.shortlist(shortlist_ids(below, vocab, sorted(self._rare)))
        return self._exit_head

    def _forward(self, plan: "VerifyPlan") -> Iterator[ExitLogits]:
        """Exit logits over the block's rows after a prepared partial block (all γ+1 rows without one),
        layer by layer; ``verify_exit`` joins them to the prepared rows."""
        f = plan.forward
        if plan.want_exits:
            yield from self._verifier.exits(f.kv, f.sequence, f.first, f.exits, f.shortlist)
        else:
            yield ExitLogits(self._verifier.num_layers, self._verifier.logits(f.kv, f.sequence, f.first), True)

    def _unchain(self, draft: DraftBlock, emit: Callable[[ExitResult], None]) -> DraftBlock | None:
        """PicoSpec's overlapped round: a block drafted (and sent) before the previous verdict, as if
        that verdict accepted everything and produced tokens[0]. If so, verify the rest at once;
        otherwise answer stale and change nothing."""
        guess = int(draft.tokens[0])
        if self._awaiting_resample or len(draft.tokens) < 2 or len(self._committed) != draft.position + 1 \
                or self._committed[draft.position] != guess:
            emit(ExitResult(round=draft.round, layer=self._verifier.num_layers, accepted=0,
                            tokens=np.zeros(0, dtype=np.int32), confidence=0.0, is_final=True, stale=True))
            return None
        rows = {name: (None if getattr(draft, name) is None else getattr(draft, name)[1:])
                for name in ("q", "q_ids", "q_values", "q_draft")}
        return replace(draft, position=draft.position + 1, tokens=draft.tokens[1:], chained=False, **rows)

    def _dense_q(self, draft: DraftBlock) -> torch.Tensor | None:
        """The draft distributions as (γ, V_p): sent whole, or rebuilt exactly from TK-SLT's sparse form; a
        drafter with fewer ids (V_q < V_p) has q = 0 on the rest (``spec.vocab``: exact; checked on arrival)."""
        vocab = self._verifier.stack.vocab_size
        if draft.q is not None:
            return draft_in_vocab(torch.from_numpy(np.array(draft.q)), vocab)
        if draft.q_ids is not None:
            return densify(torch.from_numpy(np.array(draft.q_ids)), torch.from_numpy(np.array(draft.q_values)), vocab)
        return None

    def _verify_split(self, draft: DraftBlock, tokens: list[int], t0: float,
                      emit: Callable[[ExitResult], None], logits: torch.Tensor) -> None:
        """DSSD (Algorithm 2): accept/reject here from q_i(x_i), given the final exit's logits (γ+1, V);
        on a rejection send p_δ down (whole, or pruned to its top K, which is LOSSY) and let the robot
        resample."""
        p = probs_from_logits(logits, self._sampling)
        split = split_verify_server(tokens, p, torch.from_numpy(np.array(draft.q_draft)), self._rng, draft.position)
        self._compute.wait_for_layer(t0, 1, 1, self._cancel)
        self._commit(split.tokens)
        row = p_ids = None
        tv = 0.0
        if split.resample_p is not None:
            self._awaiting_resample = True
            row = split.resample_p
            if self._p_top_k:
                pruned, tv = prune_topk(row, self._p_top_k)
                values, ids = torch.topk(pruned, min(self._p_top_k, row.shape[0]))
                row, p_ids = values, ids.to(torch.int32).numpy()
        emit(ExitResult(round=draft.round, layer=self._verifier.num_layers, accepted=split.accepted,
                        tokens=np.asarray(split.tokens, dtype=np.int32),
                        confidence=float(exit_confidence(logits[split.accepted])), is_final=True,
                        compute_s=time.perf_counter() - t0, resample=split.resample_p is not None,
                        p=None if row is None else row.float().numpy(), p_ids=p_ids, p_tv=tv))

    def _advance_grammar(self, resampled: int, state: ConstraintState | None = None) -> None:
        """DSSD's resampled token into ``state`` (the session's own by default); ``RequestError`` (GRAMMAR)
        if the grammar forbids it."""
        state = state or self._grammar
        if state is not None:
            try:
                state.advance(resampled)
            except ForbiddenToken:
                raise RequestError(f"the resampled token ({resampled}) is not allowed by the grammar",
                                   ErrorCode.GRAMMAR) from None

    def _generate(self, request: Generate, emit: Callable[[Tokens], None]) -> Iterator[None]:
        """Cloud-only autoregressive decoding (the baseline): one target forward per token, each token
        streamed as soon as it exists; yields after each token but the last (between whole forward
        passes) so that a scheduler may run other sessions' work in between."""
        if self._awaiting_resample != (request.resampled >= 0):
            raise RequestError("after a DSSD rejection cloud-only decoding must start with the resampled token")
        if request.resampled >= 0:
            self._advance_grammar(request.resampled)
            self._committed.append(request.resampled)
            self._awaiting_resample = False
        if len(self._committed) + request.max_new_tokens > self._max_tokens:
            raise RequestError(f"the decision would pass {self._max_tokens} tokens (serve --max-prompt-tokens "
                               "+ --max-new-tokens)", ErrorCode.TOO_LARGE)
        stop = set(request.stop_tokens)
        for i in range(request.max_new_tokens):
            if self._cancel.is_set():
                raise Cancelled()
            t0 = time.perf_counter()
            logits = self._verifier.logits(self._kv, self._committed, len(self._committed) - 1)[-1]
            if self._grammar is not None:
                logits = mask_logits(logits, self._grammar.mask())
            token, _ = choose(logits, self._sampling, self._rng, Stream.TARGET, len(self._committed))
            self._compute.wait_for_layer(t0, 1, 1, self._cancel)
            self._commit([token])
            final = token in stop or i == request.max_new_tokens - 1
            emit(Tokens(tokens=np.asarray([token], dtype=np.int32), is_final=final,
                        compute_s=time.perf_counter() - t0))
            if final:
                return
            yield


class VerifyJob:
    """A whole draft block's work, made by ``VerifySession.handle``: an iterator that verifies the block
    whole on its first step (one forward pass, not sliced: its layers run inside one
    ``torch.inference_mode`` block, which another session's work must not interleave with on the same
    thread). A batching scheduler (``cloud/batching.py``) instead runs its steps around one forward
    shared with other sessions' blocks: ``begin`` (the block's checks and state changes; the job is
    spent from then on) says which forward (``BlockForward``), the scheduler runs it, and ``exit`` takes
    each exit's logits, in layer order."""

    def __init__(self, begin: Callable[[], "VerifyPlan | None"],
                 verify_exit: Callable[["VerifyPlan", "ExitTally", ExitLogits], None],
                 forward: Callable[["VerifyPlan"], Iterator[ExitLogits]]) -> None:
        self._begin, self._verify_exit, self._forward = begin, verify_exit, forward
        self._tally = ExitTally()
        self._plan: VerifyPlan | None = None
        self.spent = False

    def begin(self) -> BlockForward | None:
        """Admit the block: the forward pass it needs, or None when it is answered already (a stale
        chained block). Raises ``RequestError`` for a block the session cannot verify."""
        self.spent = True
        self._plan = self._begin()
        return self._plan.forward if self._plan is not None else None

    def exit(self, out: ExitLogits) -> None:
        """One exit's logits over the block (after ``begin`` returned its forward): verify and emit."""
        self._verify_exit(self._plan, self._tally, out)

    def __iter__(self) -> "VerifyJob":
        return self

    def __next__(self) -> None:
        if not self.spent and self.begin() is not None:
            for out in self._forward(self._plan):
                self.exit(out)
        raise StopIteration


@dataclass
class ExitTally:
    """What one round's computed early exits gave and cost, filled in as they are verified: each exit's
    verdict tokens, its head + verify time (s), and the time spent in the compute emulation's waits."""

    outputs: dict[int, tuple[int, ...]] = field(default_factory=dict)
    heads: dict[int, float] = field(default_factory=dict)
    slept: float = 0.0


def _whole(work: Callable[[], None]) -> Iterator[None]:
    """A request's work that runs whole on its first step."""
    work()
    yield from ()


@dataclass(frozen=True)
class _Prepared:
    """A partial block's verifier work: its position, tokens, each exit's logits rows (m, V), start."""

    position: int
    tokens: tuple[int, ...]
    logits: dict[int, torch.Tensor]
    started: float


@dataclass(frozen=True)
class VerifyPlan:
    """A whole block admitted for verification (``VerifyJob.begin``): the draft, its tokens, the dense q
    (None for DSSD's split verification), its start time, a prepared partial block, whether early
    exits are wanted, the forward pass it needs (``forward``) and the grammar's masks. Read-only: what
    the exits give is tallied apart (``ExitTally``)."""

    draft: DraftBlock
    tokens: list[int]
    q: torch.Tensor | None
    t0: float
    prepared: _Prepared | None
    want_exits: bool
    split: bool
    forward: BlockForward
    masks: torch.Tensor | None = None  # (γ+1, V) bool: the grammar's m(s_i) for each row (None: unconstrained)
