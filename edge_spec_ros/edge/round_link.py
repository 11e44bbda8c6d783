"""One decision's rounds on the verifier link: draft blocks up, exit results down, and the robot's
side of split verification (DSSD).

What a block carries depends on the mode (``edge.registry``): the ids always; q whole (SD, FSD),
its top K (TK-SLT, the low-payload mode) or only the drafted values q_i(x_i) (DSSD, PicoSpec). Down
come the round's exit results: early ones (FSD) feed the pre-draft cache, the final one is the verdict.

Legend: γ — draft length; V — vocabulary; K — kept entries; δ — accepted draft tokens; p_δ — the
target's distribution at the first rejected position.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from edge_spec_ros.edge.registry import Mode
from edge_spec_ros.models.drafter import Draft
from edge_spec_ros.spec.sampling import PositionalRNG
from edge_spec_ros.spec.sparse import DraftDistribution, densify, to_sparse
from edge_spec_ros.spec.verify import SplitVerdict, split_verify_device
from edge_spec_ros.wire.messages import DraftBlock, ExitResult
from edge_spec_ros.wire.verifier_link import VerifierError, VerifierLink, VerifierTimeout

OnExit = Callable[[ExitResult], None]  # an early exit of the round awaited


def draft_block(round_: int, draft: Draft, mode: Mode, distribution: DraftDistribution | None,
                resampled: int) -> DraftBlock:
    """What ``mode`` sends of a draft: the ids always, and q whole, sparse, or its drafted values only."""
    tokens = np.asarray(draft.tokens, dtype=np.int32)  # (γ,)
    block = DraftBlock(round=round_, position=draft.position, tokens=tokens, resampled=resampled)
    if draft.q is None:  # greedy: nothing to send about q
        return block
    if mode.split:
        values = draft.q[torch.arange(draft.gamma), torch.from_numpy(tokens).long()]  # (γ,) q_i(x_i)
        return replace(block, q_draft=values.float().numpy())
    if distribution is not None and distribution.sparse:
        ids, values = to_sparse(draft.q, distribution.top_k)  # (γ, K), (γ, K)
        return replace(block, q_ids=ids.numpy(), q_values=values.numpy())
    return replace(block, q=draft.q.numpy())  # (γ, V)


def final_p_row(final: ExitResult, vocab_size: int) -> torch.Tensor:
    """p_δ from a DSSD verdict: sent whole (V_p,), or (LOSSY) its top K, spread over the drafter's
    V_q = ``vocab_size`` ids or up to the largest id sent when the verifier's vocabulary is larger
    (p_δ is zero beyond it, as q_δ is beyond V_q: ``split_verify_device`` pads q to p_δ's width)."""
    if final.p is None:
        raise VerifierError(0, "a resample verdict without p")
    p = torch.from_numpy(np.array(final.p, dtype=np.float32))
    if final.p_ids is None:
        return p
    ids = torch.from_numpy(np.array(final.p_ids))
    width = max(vocab_size, int(ids.max()) + 1) if ids.numel() else vocab_size
    return densify(ids[None], p[None], width)[0]


def verdict_tokens(final: ExitResult, draft: Draft, rng: PositionalRNG, vocab_size: int) -> tuple[int, ...]:
    """The tokens a verdict commits: as sent, or (DSSD, split verification) the δ accepted drafts
    followed by the robot's own resample from norm(max(0, p_δ − q_δ)) with draw u(TARGET, position).
    q_δ (V_q,) is padded with zeros to p_δ's V_p ids (``spec.vocab``); ValueError if V_q > V_p."""
    tokens = tuple(int(t) for t in final.tokens)
    if not final.resample:
        return tokens
    split = SplitVerdict(final.accepted, tokens, final_p_row(final, vocab_size))
    return split_verify_device(split, draft.q, rng, draft.position).tokens


@dataclass
class RoundLink:
    """The link as one decision's rounds see it: session ``sid`` in ``mode``. ``sent_bytes(round)``:
    the uplink bytes of that round's blocks (partial and whole), as the link counted them."""

    client: VerifierLink
    sid: bytes
    mode: Mode
    distribution: DraftDistribution | None
    _bytes: dict[int, int] = field(default_factory=dict, init=False, repr=False)

    def send(self, round_: int, draft: Draft, resampled: int, *, partial: bool = False,
             chained: bool = False) -> float:
        """Send ``draft`` as round ``round_``'s block; returns when it started leaving (perf_counter)."""
        block = replace(draft_block(round_, draft, self.mode, self.distribution, resampled),
                        partial=partial, chained=chained)
        before = self._up_bytes()
        sent = time.perf_counter()
        self.client.send(self.sid, block)
        after = self._up_bytes()
        if before is not None and after is not None:
            self._bytes[round_] = self._bytes.get(round_, 0) + after - before
        return sent

    def sent_bytes(self, round_: int) -> int | None:
        """The bytes round ``round_``'s blocks took on the uplink (None: the link does not count them,
        or counted nothing); forgets that round and every earlier one."""
        n = self._bytes.get(round_)
        for r in [r for r in self._bytes if r <= round_]:
            del self._bytes[r]
        return n if n else None

    def _up_bytes(self) -> int | None:
        traffic = getattr(self.client, "traffic", None)
        t = traffic.get(self.sid) if isinstance(traffic, dict) else None
        return getattr(t, "up_bytes", None)

    def await_final(self, round_: int, on_exit: OnExit | None) -> ExitResult:
        """Receive until round ``round_``'s final exit; its early exits go to ``on_exit``. Results of
        earlier rounds (late exits, the stale answer to a dropped pipelined block) are skipped."""
        while True:
            msg = self.client.receive(self.sid)
            if not isinstance(msg, ExitResult):
                raise VerifierError(0, f"expected ExitResult, got {type(msg).__name__}")
            if msg.round != round_:
                continue
            if msg.is_final:
                return msg
            if on_exit is not None:
                on_exit(msg)

    def poll_final(self, round_: int, on_exit: OnExit | None) -> ExitResult | None:
        """What has arrived without waiting: round ``round_``'s final exit, or None (early exits go to
        ``on_exit`` meanwhile)."""
        while True:
            try:
                msg = self.client.receive(self.sid, 0.0)
            except VerifierTimeout:
                return None
            if not isinstance(msg, ExitResult) or msg.round > round_:
                raise VerifierError(0, f"unexpected {type(msg).__name__} while pipelining round {round_}")
            if msg.round < round_:
                continue  # the stale answer to a dropped pipelined block, or a late early exit
            if msg.is_final:
                return msg
            if on_exit is not None:
                on_exit(msg)
