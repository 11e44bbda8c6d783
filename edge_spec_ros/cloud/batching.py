"""Batched verification: the pending rounds of different sessions in one forward of the verifier.

A cloud GPU serving a fleet earns its cost by batching (SpecEdge; every LLM server): rounds of
different robots that are waiting at the same moment go through the verifier together. Each session
keeps its own KV cache (``models/kv_cache.py``); ``DecoderStack.run_batch`` pads the sessions'
uncached parts (different prefix and draft lengths) into one batch with a per-row attention mask and
each session's own M-RoPE positions, and writes each session's new keys and values back to its own
cache. After every layer each session's exit logits are computed from its own rows and handed to its
job (``VerifyJob.exit``), so every exit's result is still streamed per session as soon as its layer
is done, the final exit first in each session's outbox (the server's SENDER rules are unchanged).

Exactness: each session's acceptance/resampling runs exactly as alone (its own q, seed and
position-indexed draws); the logits come from batched kernels, which equal the solo ones up to float
rounding (about 1e-5 on the embedded pair; padding is masked out, never mixed in). A draft token whose
target logits are tied to within that rounding could be decided differently than alone; the tests
check logits within tolerance and outputs token for token on their prompts (docs/fleet.md).

Legend: γ — draft length; L — final layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from edge_spec_ros.cloud.session import VerifyJob
from edge_spec_ros.models.verifier import BlockForward, EarlyExitVerifier, ExitLogits

DEFAULT_MAX_BATCH = 8


class BatchJob(Protocol):
    """What a batch runs (``VerifyJob`` is one): ``begin`` admits the block and names its forward (None:
    nothing to compute), ``exit`` takes each exit's logits over the block's rows, in layer order."""

    def begin(self) -> BlockForward | None: ...

    def exit(self, out: ExitLogits) -> None: ...


@dataclass
class _Entry:
    job: BatchJob
    forward: BlockForward | None = None
    error: BaseException | None = None


def batchable(job: object) -> bool:
    """A job a batch may take: a whole draft block's verification, not started yet."""
    return isinstance(job, VerifyJob) and not job.spent


def verify_batch(verifier: EarlyExitVerifier, jobs: list[BatchJob]) -> list[BaseException | None]:
    """Run ``jobs`` (different sessions' whole blocks) with one forward of the verifier per layer; per
    job, None or the exception its session's work raised (the server answers it as it would a solo
    job's). A job whose admission checks fail is left out of the forward; a job that fails part-way
    (its session cancelled) stops receiving results while the others go on."""
    entries = [_Entry(job) for job in jobs]
    for entry in entries:
        try:
            entry.forward = entry.job.begin()
        except Exception as exc:  # noqa: BLE001 - handed back to the scheduler, per session
            entry.error = exc
    live = [e for e in entries if e.forward is not None and e.error is None]
    if not live:
        return [e.error for e in entries]
    L = verifier.num_layers
    items = [(e.forward.kv, e.forward.sequence, e.forward.first) for e in live]
    for outputs in verifier.stack.run_batch(items):
        for entry, out in zip(live, outputs):
            forward = entry.forward
            if entry.error is not None:
                continue
            if out.layer == L:
                logits = ExitLogits(L, verifier.stack.logits(out.hidden), True)
            elif out.layer in forward.exits:  # the planner's choice (spec/exits.py)
                logits = ExitLogits(out.layer, verifier.exit_logits(out.layer, out.hidden, forward.shortlist), False)
            else:
                continue
            try:
                entry.job.exit(logits)
            except Exception as exc:  # noqa: BLE001
                entry.error = exc
    return [e.error for e in entries]
