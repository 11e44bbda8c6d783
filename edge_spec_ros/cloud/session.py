"""One decision on the verifier: the committed sequence, its KV cache and the verification rounds.

No sockets here: the server hands in decoded messages and an ``emit`` callback. Algorithm 2 of the
FSD paper (LISTENER): verify the draft at every exit (eq. 5), emit each exit's output with its
confidence (eq. 4) as soon as its layer is done, and the final exit marked final.

Legend: γ — draft length; δ^(l) — accepted by exit l; L — final layer; T_q — verification time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch

from edge_spec_ros.cloud import limits as request_limits
from edge_spec_ros.cloud.limits import RequestError
from edge_spec_ros.models.prompt import PromptEncoder, decode_image
from edge_spec_ros.models.verifier import EarlyExitVerifier, ExitLogits
from edge_spec_ros.spec.exits import exit_confidence, verify_exit
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig, Stream, choose, probs_from_logits
from edge_spec_ros.spec.sparse import densify, prune_topk
from edge_spec_ros.spec.verify import split_verify_server
from edge_spec_ros.wire.messages import DraftBlock, ErrorCode, ExitResult, Generate, Open, Opened, Tokens


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
    """State of one open decision. ``request`` has passed ``limits.check_open``; building the session
    decodes the image (JPEG/PNG) and may take a while: a worker does it, not the I/O thread.
    ``compute``: emulated compute (None: the request's own ``compute_tq_s``, which only the in-process
    link honours; the server always passes its operator's profile); ``max_tokens``: the longest
    committed sequence (prompt + decoded) the session may reach."""

    def __init__(self, verifier: EarlyExitVerifier, encoder: PromptEncoder, request: Open,
                 compute: ComputeProfile | None = None, cancel: threading.Event | None = None,
                 max_tokens: int = 1 << 30) -> None:
        ids = np.asarray(request.input_ids)
        vocab = verifier.stack.vocab_size
        if ids.ndim != 1 or ids.size < 2 or ids.min() < 0 or ids.max() >= vocab:
            raise RequestError(f"the prompt must be at least 2 ids in [0, {vocab})")
        try:
            image = decode_image(request.image) if request.image else None
            self.prompt = encoder.from_ids(ids, image)
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        self.verifier = verifier
        self.sampling = SamplingConfig(request.temperature)
        self.rng = PositionalRNG(request.seed)
        self.want_exits = request.want_exits
        self.request = request
        self.compute = compute if compute is not None else ComputeProfile(request.compute_tq_s)
        self.cancel = cancel if cancel is not None else threading.Event()
        self.max_tokens = max_tokens
        self.p_top_k = request.p_top_k
        self.awaiting_resample = False  # DSSD: the robot owes the token it resampled last round
        self.prepared: _Prepared | None = None  # PicoSpec fast verification: a partial block's work
        self.committed: list[int] = self.prompt.input_ids.tolist()
        self.next_round = 0
        self.kv = None

    def prefill(self) -> Opened:
        t0 = time.perf_counter()
        self.kv = self.verifier.start(self.prompt)
        return Opened(self.verifier.num_layers, self.verifier.exit_layers, time.perf_counter() - t0)

    def check_draft(self, draft: DraftBlock) -> None:
        """Validate a draft block before queueing it (cheap): ``limits.check_draft``."""
        request_limits.check_draft(draft, self.request, request_limits.Limits(max_gamma=request_limits.MAX_GAMMA),
                                   self.verifier.stack.vocab_size)

    def verify(self, draft: DraftBlock, emit: Callable[[ExitResult], None]) -> None:
        """Verify at every exit, streaming results; the final exit commits its tokens. One block is one
        forward pass, not sliced: the layers run inside one ``torch.inference_mode`` block, which
        another session's work must not interleave with on the same thread."""
        if draft.chained:
            draft = self._unchain(draft, emit)
            if draft is None:
                return
        if self.awaiting_resample != (draft.resampled >= 0):
            raise RequestError("after a DSSD rejection the next draft must carry the resampled token, and only then")
        if draft.resampled >= 0:
            self.committed.append(draft.resampled)
            self.awaiting_resample = False
        if draft.position != len(self.committed):
            raise RequestError(f"draft at position {draft.position}, the committed prefix has {len(self.committed)}")
        if draft.position + len(draft.tokens) + 1 > self.max_tokens:
            raise RequestError(f"the decision would pass {self.max_tokens} tokens (serve --max-prompt-tokens "
                               "+ --max-new-tokens)", ErrorCode.TOO_LARGE)
        t0 = time.perf_counter()
        tokens = [int(t) for t in draft.tokens]
        prepared, self.prepared = self.prepared, None
        if prepared is not None and (prepared.position != draft.position
                                     or tuple(tokens[:len(prepared.tokens)]) != prepared.tokens):
            prepared = None  # the whole block does not extend the partial one: start afresh
        if prepared is not None:
            t0 = prepared.started  # the verification began with the partial block
        if draft.q_draft is not None:
            self._verify_split(draft, tokens, t0, emit, prepared)
            return
        q = self._dense_q(draft)
        L = self.verifier.num_layers
        outputs = self._forward(tokens, self.want_exits, prepared)
        for out in outputs:
            result = verify_exit(out.layer, out.logits, tokens, q, self.sampling, self.rng, draft.position,
                                 out.is_final)
            self.compute.wait_for_layer(t0, out.layer, L, self.cancel)
            if self.cancel.is_set():
                raise Cancelled()
            if out.is_final:
                self.committed.extend(result.verdict.tokens)
            emit(ExitResult(round=draft.round, layer=out.layer, accepted=result.verdict.accepted,
                            tokens=np.asarray(result.verdict.tokens, dtype=np.int32),
                            confidence=result.confidence, is_final=out.is_final,
                            compute_s=time.perf_counter() - t0))

    def prepare(self, partial: DraftBlock) -> None:
        """PicoSpec's fast verification: run the verifier over the first tokens of the next block as
        soon as they arrive, keeping every exit's logits, so only the rest is computed when the whole
        block comes. A partial block that does not fit the committed prefix is ignored."""
        if partial.chained or partial.position != len(self.committed) or self.awaiting_resample \
                or partial.resampled >= 0:
            self.prepared = None
            return
        started = time.perf_counter()
        tokens = tuple(int(t) for t in partial.tokens)
        seq = self.committed + list(tokens)
        first = len(self.committed) - 1
        if self.want_exits:
            logits = {out.layer: out.logits[: len(tokens)] for out in self.verifier.exits(self.kv, seq, first)}
        else:
            logits = {self.verifier.num_layers: self.verifier.logits(self.kv, seq, first)[: len(tokens)]}
        self.prepared = _Prepared(partial.position, tokens, logits, started)

    def _forward(self, tokens: list[int], want_exits: bool, prepared: "_Prepared | None"):
        """Exit logits (γ+1, V) over the block, layer by layer: all computed now, or the rows after a
        prepared partial block computed now and joined to the prepared ones."""
        done = 0 if prepared is None else len(prepared.tokens)
        seq = self.committed + tokens
        first = len(self.committed) - 1 + done
        L = self.verifier.num_layers
        if want_exits:
            outputs = self.verifier.exits(self.kv, seq, first)
        else:
            outputs = iter([ExitLogits(L, self.verifier.logits(self.kv, seq, first), True)])
        for out in outputs:
            if prepared is not None:
                out = ExitLogits(out.layer, torch.cat([prepared.logits[out.layer], out.logits]), out.is_final)
            yield out

    def _unchain(self, draft: DraftBlock, emit: Callable[[ExitResult], None]) -> DraftBlock | None:
        """PicoSpec's overlapped round: a block drafted (and sent) before the previous verdict, as if
        that verdict accepted everything and produced tokens[0]. If so, verify the rest at once;
        otherwise answer stale and change nothing."""
        guess = int(draft.tokens[0])
        if self.awaiting_resample or len(draft.tokens) < 2 or len(self.committed) != draft.position + 1 \
                or self.committed[draft.position] != guess:
            emit(ExitResult(round=draft.round, layer=self.verifier.num_layers, accepted=0,
                            tokens=np.zeros(0, dtype=np.int32), confidence=0.0, is_final=True, stale=True))
            return None
        rows = {name: (None if getattr(draft, name) is None else getattr(draft, name)[1:])
                for name in ("q", "q_ids", "q_values", "q_draft")}
        return replace(draft, position=draft.position + 1, tokens=draft.tokens[1:], chained=False, **rows)

    def _dense_q(self, draft: DraftBlock) -> torch.Tensor | None:
        """The draft distributions as (γ, V): sent whole, or rebuilt exactly from TK-SLT's sparse form."""
        if draft.q is not None:
            return torch.from_numpy(np.array(draft.q))
        if draft.q_ids is not None:
            return densify(torch.from_numpy(np.array(draft.q_ids)), torch.from_numpy(np.array(draft.q_values)),
                           self.verifier.stack.vocab_size)
        return None

    def _verify_split(self, draft: DraftBlock, tokens: list[int], t0: float,
                      emit: Callable[[ExitResult], None], prepared: "_Prepared | None" = None) -> None:
        """DSSD (Algorithm 2): accept/reject here from q_i(x_i); on a rejection send p_δ down (whole, or
        pruned to its top K, which is LOSSY) and let the robot resample."""
        *_, final = self._forward(tokens, False, prepared)
        logits = final.logits  # (γ+1, V)
        p = probs_from_logits(logits, self.sampling)
        split = split_verify_server(tokens, p, torch.from_numpy(np.array(draft.q_draft)), self.rng, draft.position)
        self.compute.wait_for_layer(t0, 1, 1, self.cancel)
        self.committed.extend(split.tokens)
        row = p_ids = None
        tv = 0.0
        if split.resample_p is not None:
            self.awaiting_resample = True
            row = split.resample_p
            if self.p_top_k:
                pruned, tv = prune_topk(row, self.p_top_k)
                values, ids = torch.topk(pruned, min(self.p_top_k, row.shape[0]))
                row, p_ids = values, ids.to(torch.int32).numpy()
        emit(ExitResult(round=draft.round, layer=self.verifier.num_layers, accepted=split.accepted,
                        tokens=np.asarray(split.tokens, dtype=np.int32),
                        confidence=float(exit_confidence(logits[split.accepted])), is_final=True,
                        compute_s=time.perf_counter() - t0, resample=split.resample_p is not None,
                        p=None if row is None else row.float().numpy(), p_ids=p_ids, p_tv=tv))

    def generate(self, request: Generate, emit: Callable[[Tokens], None]) -> None:
        """Cloud-only autoregressive decoding (the baseline): one target forward per token, each token
        streamed as soon as it exists."""
        for _ in self.generate_steps(request, emit):
            pass

    def generate_steps(self, request: Generate, emit: Callable[[Tokens], None]) -> Iterator[None]:
        """``generate``, yielding after each token (between whole forward passes) so that a scheduler
        may run other sessions' work in between."""
        if self.awaiting_resample != (request.resampled >= 0):
            raise RequestError("after a DSSD rejection cloud-only decoding must start with the resampled token")
        if request.resampled >= 0:
            self.committed.append(request.resampled)
            self.awaiting_resample = False
        if len(self.committed) + request.max_new_tokens > self.max_tokens:
            raise RequestError(f"the decision would pass {self.max_tokens} tokens (serve --max-prompt-tokens "
                               "+ --max-new-tokens)", ErrorCode.TOO_LARGE)
        stop = set(request.stop_tokens)
        for i in range(request.max_new_tokens):
            if self.cancel.is_set():
                raise Cancelled()
            t0 = time.perf_counter()
            logits = self.verifier.logits(self.kv, self.committed, len(self.committed) - 1)[-1]
            token, _ = choose(logits, self.sampling, self.rng, Stream.TARGET, len(self.committed))
            self.compute.wait_for_layer(t0, 1, 1, self.cancel)
            self.committed.append(token)
            final = token in stop or i == request.max_new_tokens - 1
            emit(Tokens(tokens=np.asarray([token], dtype=np.int32), is_final=final,
                        compute_s=time.perf_counter() - t0))
            if final:
                return
            yield


@dataclass(frozen=True)
class _Prepared:
    """A partial block's verifier work: its position, tokens, each exit's logits rows (m, V), start."""

    position: int
    tokens: tuple[int, ...]
    logits: dict[int, torch.Tensor]
    started: float
