"""A round's wait for its verdict: serial (every mode but PicoSpec's) or pipelined (PicoSpec §3).

Pipelined round i: while the cloud verifies S_i, the robot drafts S_{i+1} — its guess of the cloud's
own token, then γ more — on a fork of its cache, as if S_i were fully accepted, and stops as soon as
the verdict arrives (latency-aware truncation). Finished first, S_{i+1} leaves at once, chained: the
cloud verifies it right after S_i if the assumption held and answers "stale" otherwise (overlapped
communication); either way it used a round number. Arriving with the verdict, it is kept if the
assumption held, dropped otherwise (its cache fork with it). Either way the block was drafted from
the same prefix, with the same position-indexed draws, as a fresh draft would be. Cut short, it is
the next round's block as it is: that round ends earlier than a fresh draft's of γ would, which moves
where the bonus token is drawn from p. A sampled decision's tokens depend on where its blocks end
(``DecodeStats.block_gammas``); their distribution does not: a block's length is fixed before any of
its verification draws is used.

Branch blocks (a departure from PicoSpec, which leaves the verifier idle after every rejection until
a block drafted after the verdict arrives, 2T_c + γT_p later): beside S_{i+1}, k more drafting
threads (``Pipeline.branches``, default ``BRANCHES``) each draft a block for one of the k likeliest
verdicts of S_i other than S_{i+1}'s assumption — x_1 … x_{j−1} accepted, then another token r at
position j of S_i or of the guess of x_t (γ + 1 candidates: each thread drafts the guess too, with
the same draw as S_{i+1}), ranked by Π_{i<j} q_i(x_i) · q_j(r) with the drafter's distributions
standing in for the verifier's, then γ tokens — and the blocks leave chained right behind S_{i+1},
in that order. The cloud verifies one right after S_i if the verdict committed exactly its token at
its j (a rejection there, or S_i fully accepted and r as x_t), and answers "stale" otherwise, by the
rule it applies to S_{i+1} (``cloud.session.VerifySession._unchain``); at most one can hold. Like
S_{i+1} each is drafted with the position-indexed draws of a fresh draft from the same prefix: it
changes when the verifier works, never the tokens. On the robot's GPU the drafts (γ + 1 steps each)
would run as one batch of a few sequences, about the time of one at these sizes (decoding is bound
by reading the weights); with an emulated T_p each thread's step lasts T_p, as the FSD pre-draft
threads' do. Where the verdict comes before the blocks could leave (``BranchGate``: a verifier next
door) none is drafted. S_i's branch blocks are drafted from when S_i left (as the previous
round's S_{i+1}), on a fork of its cache, and kept for round i if S_i becomes its block
(``Pipeline.next_branches``): drafted from the start of round i, a branch that held reached the cloud
(γ + 1)T_p + T_c after that start, while the cloud had finished S_i T_q − T_c after it: under
``go2-paper`` (γ = 7) 696 ms against 500, the cloud idle about 200 ms in each round whose block was a
branch. S_{i+1} leaves first so that each chained block can only be checked against
the verdict it was drafted for, or against a later one that has already committed past it (then it
is stale). Not drafted where the cloud could not check them: split verification with sampling (the
robot itself resamples the rejected position), or a block without the drafter's alternatives
(prompt-lookup tokens).

The block after next (a departure from PicoSpec, ``Pipeline.depth`` 2): once S_{i+1} has left, S_{i+2} is
drafted on a thread of its own, on a fork of S_{i+1}'s cache, as if S_i and S_{i+1} were both fully
accepted, while the robot waits for S_i's verdict as before (it notices the verdict at once, not after
a draft step); so is the block after each branch block that left, as if that branch held and was fully
accepted (else a round whose block is a branch waited for its S_{i+1} to be drafted: another 200 ms under
``go2-paper``). It stays on the robot (``Pipeline.held``): a full hit of S_i makes S_{i+1} the next
round's block, and that round takes S_{i+2} as its S_{i+1} — sent at once if finished, else drafted on
until finished (then sent) or until that round's verdict (then cut short there, as any S_{i+1}); any
other verdict drops it. With one block ahead the cloud waits, after each full hit, for the block after
next to be drafted and to travel (rounds of (T_q + T_RTT + (γ + 1)T_p) / 2,
``spec.pipeline.chained_cycle``); with S_{i+2} drafted during S_i's round it only travels, and reaches
the cloud before S_{i+1} is verified while 2T_c ≤ T_q, so the rounds are T_q long as long as a block is
drafted within one. Held back rather than sent before the verdict, it is never checked against a
verdict other than S_{i+1}'s (a branch block that held could commit the sequence it expects to follow,
but from another prefix). Like every block drafted ahead it uses the position-indexed draws of a fresh
draft from the same prefix: it changes when the verifier works, never the tokens.

Blocks sent ahead can outlive their round (a branch behind an S_{i+1} that held is answered stale a
round later), so a decision's pipelined rounds share a ``Pipeline``: the next free round number and
the blocks on the link in number order. After each verdict the robot applies the cloud's rule to them
in that order (``AheadBlock.holds``): each one that does not hold was answered stale; the first that
holds is the next round's block; those behind it wait for its verdict.

Legend: S_i — round i's block; γ — draft length; T_q — verification; T_c — one-way link delay; T_p —
draft step; x_t — the cloud's own token; j — a position in a block.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from edge_spec_ros.edge.draft_sources import SourcedDraft
from edge_spec_ros.edge.round_link import OnExit, RoundLink
from edge_spec_ros.models.drafter import Alternative, Draft, DraftCancelled, Drafter
from edge_spec_ros.models.kv_cache import KVCache
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.wire.messages import ExitResult

log = logging.getLogger(__name__)
BRANCH_POLL_S = 0.002  # how often the robot looks for the verdict while the branch block is drafted
BRANCH_SPARE_STEPS = 1  # a branch is drafted when the verdict is expected this many draft steps after both blocks
GATE_WEIGHT = 0.25  # weight of the newest round in the gate's moving averages
# branch blocks per round by default, for the likeliest verdicts: offline (greedy, docs/benchmarks.md) 1,
# 2, 3 and 4 would have held in 10, 11, 12 and 14 of the shipped pair's 15 rounds that S_{i+1} did not
# foresee, and in 15, 25, 32 and 34 of SmolLM2-135M's 125 with its 6-layer self-drafter; but each is a
# drafting thread, and where the drafts are not batched (this project's CPU) more than one cost more
# than they saved under real compute
BRANCHES = 1
MAX_BRANCHES = 8
# blocks drafted ahead of the one being verified: 1, S_{i+1} (PicoSpec); 2, S_{i+2} too, held back until S_i's
# verdict, which makes the rounds cloud-bound where drafting a block takes longer than the round trip
DEPTH = 2
MAX_DEPTH = 2
NO_ALTERNATIVE = Alternative(0.0)  # the guess's row of a branch block (the cloud checks the guess, never drafts it)


@dataclass(frozen=True)
class Settled:
    """What a round leaves to the next: the next round's number and (PicoSpec) its block when one
    drafted ahead holds; ``branch``: that block is a branch block."""

    next_number: int
    ahead: SourcedDraft | None = None
    branch: bool = False
    after_next: bool = False  # that block was drafted two rounds ahead (S_{i+2})


class SerialRound:
    """Send, then wait: the verdict of round ``number`` and nothing drafted ahead."""

    def __init__(self, number: int, link: RoundLink, on_exit: OnExit) -> None:
        self.number = number
        self.link = link
        self.on_exit = on_exit

    def verdict(self, seq: list[int], kv: KVCache, draft: Draft, gamma: int, remaining: int | None = None
                ) -> ExitResult:
        """The final exit of this round; early exits go to ``on_exit``. ``remaining``: the tokens the
        decision may still take (its budget; None: no limit); a block drafted ahead behind verdicts whose
        full hits end the decision could never be used."""
        return self.link.await_final(self.number, self.on_exit)

    def settle(self, draft: Draft, final: ExitResult, tokens: tuple[int, ...]) -> Settled:
        """The verdict ``final`` of ``draft`` committed ``tokens``."""
        return Settled(self.number + 1)

    def close(self) -> None:
        """The decision ends (or goes on without what this round drafted ahead): stop drafting it."""


@dataclass(frozen=True)
class AheadBlock:
    """A block drafted before the verdict it follows: ``draft`` is the guess the cloud checks (its
    first token, at ``draft.position``) and then the block proper, on its own cache fork ``kv``;
    ``number`` and ``sent_at`` (perf_counter): its round number and when it left, None if kept back;
    ``after_next``: drafted as S_{i+2}."""

    draft: Draft
    kv: KVCache
    t_token_s: float  # its measured draft time per token
    number: int | None = None
    sent_at: float | None = None
    branch: bool = False
    after_next: bool = False

    def holds(self, position: int, tokens: tuple[int, ...], resample: bool) -> bool:
        """The cloud's rule, after a verdict that committed ``tokens`` from ``position`` on: the
        committed sequence ends with this block's guess, at the guess's position, and no resample is
        owed (the cloud would not know the last token yet)."""
        return (not resample and self.draft.gamma >= 2 and self.draft.position == position + len(tokens) - 1
                and self.draft.tokens[0] == tokens[-1])

    def next_block(self) -> SourcedDraft:
        """The block proper, the next round's draft."""
        return SourcedDraft(self.draft.tail(1), self.kv, self.t_token_s, self.sent_at)


@dataclass
class BranchGate:
    """Whether a branch block can be on the link before the verdict it is for, from the measured time
    between a pipelined round's start and its verdict and the measured draft step (exponential moving
    averages, per mode over the decoder's life). Where the verdict comes within the γ + 1 steps of
    S_{i+1} (a verifier next door: the block drafted ahead is cut short), a branch could never leave
    in time and its thread would only take the cores the drafter needs."""

    wait_s: float | None = None
    step_s: float | None = None

    def observe(self, wait_s: float, step_s: float) -> None:
        def mean(old: float | None, new: float) -> float:
            return new if old is None else (1 - GATE_WEIGHT) * old + GATE_WEIGHT * new

        self.wait_s, self.step_s = mean(self.wait_s, wait_s), mean(self.step_s, step_s)

    def open(self, gamma: int) -> bool:
        """S_{i+1} and, beside it, the branch blocks (γ + 1 steps each) are expected to leave before the verdict."""
        return self.wait_s is not None and self.step_s is not None and \
            self.wait_s >= (gamma + 1 + BRANCH_SPARE_STEPS) * self.step_s


@dataclass
class Pipeline:
    """One decision's pipelined rounds: the first round number no block has used, the blocks on the
    link ahead of their verdicts (in number order), where branch blocks are drafted their gate, how many
    blocks are drafted ahead of the one being verified (``depth``), the blocks after next, drafted on
    the robot until the round they follow takes one (``held``: one behind S_{i+1}, one behind each branch
    block), and the branch blocks of S_{i+1}, drafted from when it left for the round whose block it
    becomes (``next_branches``)."""

    free: int
    gate: BranchGate | None = None  # None: no branch blocks
    branches: int = BRANCHES  # branch blocks per round, with a gate
    outstanding: list[AheadBlock] = field(default_factory=list)
    depth: int = DEPTH
    held: list[_AfterNext] = field(default_factory=list)
    next_branches: list[_BranchDraft] = field(default_factory=list)  # S_{i+1}'s, drafted since it left

    def take(self) -> int:
        """The next free round number, now used."""
        self.free += 1
        return self.free - 1


def branch_points(draft: Draft, k: int = BRANCHES) -> list[tuple[int, int]]:
    """[(j, r)]: the ``k`` likeliest verdicts of ``draft`` (S_i and the guess of x_t) other than all of
    it, most likely first, with the drafter's distributions standing in for the verifier's: x_1 …
    x_{j−1} accepted, then another token r at j, P = Π_{i<j} q_i(x_i) · q_j(r) (j = γ: S_i accepted,
    r as x_t), r among the drafter's likeliest others; [] when the draft carries no alternatives
    (e.g. prompt-lookup tokens)."""
    alts = draft.alternatives
    if not alts or len(alts) != draft.gamma:
        return []
    scored, accepted = [], 1.0
    for j, alt in enumerate(alts):
        scored += [(accepted * p, j, r) for r, p in alt.others]
        accepted *= alt.confidence
    scored.sort(key=lambda c: -c[0])
    return [(j, r) for _, j, r in scored[:k]]


class _DraftThread:
    """A block drafted ahead on a thread of its own, on the cache fork ``kv`` with the round's drafter,
    draws and link (``_work``): ``block`` once drafted (None before, and if cancelled, failed or not
    wanted), ``cancel`` stops it before its next draft step. Subclasses set their fields first."""

    NAME = "draft-ahead"

    def __init__(self, round_: PipelinedRound, kv: KVCache) -> None:
        self.round, self.kv = round_, kv
        self._cancelled = False
        self._done = threading.Event()
        self.block: AheadBlock | None = None
        threading.Thread(target=self._run, name=self.NAME, daemon=True).start()

    def _work(self) -> AheadBlock | None:
        raise NotImplementedError

    def _draft(self, prefix: list[int], gamma: int, truncate: Callable[[], bool] | None = None) -> Draft:
        r = self.round
        return r.drafter.draft(self.kv, prefix, gamma, r.sampling, r.rng, r.tp_s, cancelled=lambda: self._cancelled,
                               distribution=r.link.distribution, truncate=truncate)

    def _run(self) -> None:
        try:
            self.block = self._work()
        except DraftCancelled:
            pass
        except Exception:  # a block drafted ahead that fails only costs the time it would have saved
            log.exception("%s failed", self.NAME)
        finally:
            self._done.set()

    def cancel(self) -> None:
        self._cancelled = True


class _BranchDraft(_DraftThread):
    """A branch block (see the module docstring): for the ``rank``-th likeliest verdict of the block
    ``block`` that extends ``seq``, from a fork of ``kv``."""

    NAME = "branch-draft"

    def __init__(self, round_: PipelinedRound, kv: KVCache, seq: list[int], block: Draft, gamma: int,
                 rank: int, follows: int | None = None) -> None:
        self.seq, self.block_in, self.gamma, self.rank = seq, block, gamma, rank
        self.follows = follows  # the round number of ``block`` when it is drafted before its round begins
        self.prefix: list[int] = []
        super().__init__(round_, kv.fork())

    def _work(self) -> AheadBlock | None:
        t = time.perf_counter()
        s_i = self.block_in
        # S_i and the guess of x_t (S_{i+1}'s first token, the same draw as S_{i+1}'s): γ + 1 candidates
        guess = self._draft(self.seq + list(s_i.tokens), 1)
        points = branch_points(s_i.join(guess), self.rank + 1)
        if len(points) <= self.rank:
            return None
        j, token = points[self.rank]
        self.prefix = self.seq + list((s_i.tokens + guess.tokens)[:j])  # what the branch block follows
        rest = self._draft(self.prefix + [token], self.gamma)
        q = None if rest.q is None else torch.cat([rest.q[:1], rest.q])  # (1 + γ, V): the guess's row is unused
        wire = Draft((token, *rest.tokens), q, rest.position - 1, (NO_ALTERNATIVE, *rest.alternatives))
        return AheadBlock(wire, self.kv, (time.perf_counter() - t) / (1 + rest.gamma), branch=True)

    def wait(self, verdict_in: Callable[[], bool]) -> AheadBlock | None:
        """The branch block once drafted, or None if the verdict arrives first (it is then of no use)."""
        while not self._done.wait(BRANCH_POLL_S):
            if verdict_in():
                return None
        return None if verdict_in() else self.block


class _AfterNext(_DraftThread):
    """S_{i+2} (see the module docstring): ``length`` tokens after ``prefix`` on the cache fork ``kv``,
    for the round whose block is S_{i+1} (``follows``), which takes it (``take``); ``cancel`` drops it."""

    NAME = "after-next-draft"

    def __init__(self, round_: PipelinedRound, kv: KVCache, prefix: list[int], length: int, follows: int) -> None:
        self.prefix, self.length, self.follows = prefix, length, follows
        self._cut = False
        super().__init__(round_, kv)

    def _work(self) -> AheadBlock:
        t = time.perf_counter()
        draft = self._draft(self.prefix, self.length, truncate=lambda: self._cut)
        return AheadBlock(draft, self.kv, (time.perf_counter() - t) / draft.gamma, after_next=True)

    def take(self, verdict_in: Callable[[], bool]) -> AheadBlock | None:
        """The block once drafted, or cut short where the verdict ``verdict_in`` waits for arrives first
        (as far as it got after the draft step under way); None if its drafting failed."""
        while not self._done.wait(BRANCH_POLL_S):
            if verdict_in():
                self._cut = True
                self._done.wait()
        return self.block


def _keep_for(drafting: list, number: int | None) -> list:
    """Of the blocks being drafted ahead (``_AfterNext``, ``_BranchDraft``), those for round ``number``;
    the others are cancelled."""
    for thread in drafting:
        if thread.follows != number:
            thread.cancel()
    return [thread for thread in drafting if thread.follows == number]


class PipelinedRound(SerialRound):
    """PicoSpec's round: verify S_i while drafting S_{i+1} (unless it was drafted a round early), S_{i+2}
    and S_i's branch blocks (see the module docstring); those that leave take the pipeline's next free
    numbers, S_{i+1} first."""

    def __init__(self, number: int, link: RoundLink, on_exit: OnExit, drafter: Drafter,
                 sampling: SamplingConfig, rng: PositionalRNG, tp_s: float, pipeline: Pipeline,
                 split: bool = False) -> None:
        super().__init__(number, link, on_exit)
        self.drafter = drafter
        self.sampling = sampling
        self.rng = rng
        self.tp_s = tp_s
        self.pipeline = pipeline
        self.split = split
        self.ahead: AheadBlock | None = None

    def verdict(self, seq: list[int], kv: KVCache, draft: Draft, gamma: int, remaining: int | None = None
                ) -> ExitResult:
        arrived: list[ExitResult] = []

        def verdict_in() -> bool:  # polled after each token: truncate once the verdict is here
            if not arrived and (final := self.link.poll_final(self.number, self.on_exit)) is not None:
                arrived.append(final)
            return bool(arrived)

        started = time.perf_counter()
        branches = self._branches(seq, kv, draft, gamma)
        room = math.inf if remaining is None else remaining  # tokens the decision may still take
        if room <= draft.gamma + 1 and not branches:  # S_{i+1} would follow a full hit, which ends the decision
            return super().verdict(seq, kv, draft, gamma)
        try:
            prefix = seq + list(draft.tokens)
            self.ahead = self._next_block(prefix, kv, gamma, verdict_in)
            if self.ahead.sent_at is not None:  # overlapped: S_{i+1} left before S_i's verdict
                s1 = self.ahead
                after_next = self.pipeline.depth > 1 and room > draft.gamma + 1 + s1.draft.gamma
                if after_next:
                    self._hold_after(s1, prefix, gamma)
                self.pipeline.next_branches = self._start_branches(prefix + list(s1.draft.tokens[:1]), s1.kv,
                                                                   s1.draft.tail(1), gamma, s1.number)
                for branch in branches:  # in order: each leaves once drafted, none after the verdict
                    if (held := branch.wait(verdict_in)) is not None:
                        sent = self._send(held)
                        if after_next:
                            self._hold_after(sent, branch.prefix, gamma)
            final = arrived[0] if arrived else self.link.await_final(self.number, self.on_exit)
        except BaseException:
            self.close()  # a lost link ends the decision: nothing drafted ahead outlives it
            raise
        finally:
            for branch in branches:
                branch.cancel()
        if self.pipeline.gate is not None:
            self.pipeline.gate.observe(time.perf_counter() - started, self.ahead.t_token_s)
        return final

    def _next_block(self, prefix: list[int], kv: KVCache, gamma: int, verdict_in: Callable[[], bool]) -> AheadBlock:
        """S_{i+1} (its guess and γ more), drafted up to the verdict: by the previous round as its S_{i+2},
        or now on a fork of ``kv``; finished first, it leaves at once."""
        kept, self.pipeline.held = _keep_for(self.pipeline.held, self.number), []  # ``settle`` kept it for this round
        early = kept[0] if kept else None
        block = early.take(verdict_in) if early is not None else None
        if block is None:
            fork = kv.fork()
            t = time.perf_counter()
            draft = self.drafter.draft(fork, prefix, gamma + 1, self.sampling, self.rng, self.tp_s,
                                       distribution=self.link.distribution, truncate=verdict_in)
            block = AheadBlock(draft, fork, (time.perf_counter() - t) / draft.gamma)
        return self._send(block) if not verdict_in() and block.draft.gamma >= 2 else block

    def _hold_after(self, sent: AheadBlock, prefix: list[int], gamma: int) -> None:
        """Draft the block after ``sent`` (which follows ``prefix``) meanwhile, for the round whose block
        ``sent`` becomes on a full hit of this round's: its guess of the cloud's token and γ more."""
        self.pipeline.held.append(_AfterNext(self, sent.kv.fork(), prefix + list(sent.draft.tokens), gamma + 1,
                                             sent.number))

    def _branches(self, seq: list[int], kv: KVCache, draft: Draft, gamma: int) -> list[_BranchDraft]:
        """S_i's branch blocks: those drafted since S_i left as the previous round's S_{i+1} (they are
        the next round's block's ``tail``, on a fork of its cache, with its γ), else started now. Drafted
        from S_i's departure, they leave about a round trip before the verdict rather than (γ + 1)T_p after
        the round began, so a branch that holds is there when the cloud has verified S_i."""
        early, self.pipeline.next_branches = _keep_for(self.pipeline.next_branches, self.number), []
        return early or self._start_branches(seq, kv, draft, gamma)

    def _start_branches(self, seq: list[int], kv: KVCache, draft: Draft, gamma: int,
                        follows: int | None = None) -> list[_BranchDraft]:
        """Start drafting the branch blocks of ``draft`` (after ``seq``), where the cloud can check them and
        the gate is open; ``follows``: its round number when that round has not begun."""
        gate = self.pipeline.gate
        if gate is None or not gate.open(gamma) or (self.split and not self.sampling.greedy):
            return []
        if len(draft.alternatives) != draft.gamma:  # e.g. prompt-lookup tokens: nowhere to branch
            return []
        return [_BranchDraft(self, kv, seq, draft, gamma, rank, follows) for rank in range(self.pipeline.branches)]

    def close(self, keep: int | None = None) -> None:
        """Stop drafting what was drafted for a later round; ``keep``: except for the round of that
        number, which the verdict made the next."""
        self.pipeline.held = _keep_for(self.pipeline.held, keep)
        self.pipeline.next_branches = _keep_for(self.pipeline.next_branches, keep)

    def _send(self, block: AheadBlock) -> AheadBlock:
        number = self.pipeline.take()
        sent = replace(block, number=number, sent_at=self.link.send(number, block.draft, -1, chained=True))
        self.pipeline.outstanding.append(sent)
        return sent

    def settle(self, draft: Draft, final: ExitResult, tokens: tuple[int, ...]) -> Settled:
        """The verdict of ``draft`` committed ``tokens``: the blocks on the link that do not hold were
        answered stale and spent their numbers; the first that holds is the next round's block (on the
        link already; those behind it stay there); else S_{i+1} kept back, if it holds, is the next block
        (it leaves unchained); else the next round drafts. The block held back and S_{i+1}'s branch
        blocks are kept only for the round they follow."""
        outstanding = self.pipeline.outstanding
        while outstanding:
            block = outstanding.pop(0)
            if block.holds(draft.position, tokens, final.resample):
                self.close(keep=block.number)
                return Settled(block.number, block.next_block(), block.branch, block.after_next)
        self.close()
        kept = self.ahead
        if kept is not None and kept.sent_at is None and kept.holds(draft.position, tokens, final.resample):
            return Settled(self.pipeline.take(), kept.next_block())
        return Settled(self.pipeline.take())
