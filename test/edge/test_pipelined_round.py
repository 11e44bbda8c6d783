"""PicoSpec's round bookkeeping: which block the next round uses and which number it takes, and where
a branch block is drafted."""

from __future__ import annotations

import time

import numpy as np

from edge_spec_ros.edge.pipeline import AheadBlock, BranchGate, Pipeline, PipelinedRound, SerialRound, branch_points
from edge_spec_ros.models.drafter import Alternative, Draft, DraftCancelled
from edge_spec_ros.wire.messages import ExitResult

DRAFT = Draft((5, 6, 7), None, 10)  # S_i: γ = 3 at positions 10..12
KV = object()


def verdict(accepted: int, tokens: tuple[int, ...], resample: bool = False) -> ExitResult:
    return ExitResult(round=4, layer=2, accepted=accepted, tokens=np.array(tokens, dtype=np.int32), confidence=1.0,
                      is_final=True, resample=resample)


def pipelined(ahead: AheadBlock | None, *outstanding: AheadBlock) -> PipelinedRound:
    """Round 4, whose S_{i+1} (and branch) took numbers 5 (and 6) when sent."""
    pipeline = Pipeline(5 + len(outstanding), outstanding=list(outstanding))
    round_ = PipelinedRound(4, None, None, None, None, None, 0.0, pipeline)
    round_.ahead = ahead
    return round_


def ahead(sent_at: float | None, tokens=(8, 9, 1), number: int | None = 5) -> AheadBlock:
    # S_{i+1}: the guess of x_13, then γ'
    return AheadBlock(Draft(tokens, None, 13), KV, 0.01, number if sent_at is not None else None, sent_at)


def branch(number: int = 6) -> AheadBlock:
    # S_i rejected at position 11 in favour of 3: the guess of x_11, then γ
    return AheadBlock(Draft((3, 4, 4, 2), None, 11), KV, 0.01, number, 1.6, branch=True)


def test_a_serial_round_is_followed_by_the_next_number():
    settled = SerialRound(4, None, None).settle(DRAFT, verdict(1, (5, 3)), (5, 3))
    assert settled.next_number == 5 and settled.ahead is None


def test_a_chained_block_that_held_is_the_next_round_and_on_the_link_already():
    all_accepted = verdict(3, (5, 6, 7, 8))  # the cloud's own token is the guess, 8
    a = ahead(sent_at=1.5)
    settled = pipelined(a, a).settle(DRAFT, all_accepted, (5, 6, 7, 8))
    assert settled.next_number == 5 and not settled.branch
    assert settled.ahead.draft == Draft((9, 1), None, 14) and settled.ahead.sent_at == 1.5
    assert settled.ahead.kv is KV and settled.ahead.t_token_s == 0.01


def test_a_chained_block_that_failed_spent_its_number():
    rejected = verdict(1, (5, 2))
    a = ahead(sent_at=1.5)
    assert pipelined(a, a).settle(DRAFT, rejected, (5, 2)).next_number == 6
    wrong_guess = verdict(3, (5, 6, 7, 4))
    settled = pipelined(a, a).settle(DRAFT, wrong_guess, (5, 6, 7, 4))
    assert settled.next_number == 6 and settled.ahead is None


def test_a_block_kept_back_is_used_unsent_or_dropped():
    held = pipelined(ahead(sent_at=None)).settle(DRAFT, verdict(3, (5, 6, 7, 8)), (5, 6, 7, 8))
    assert held.next_number == 5 and held.ahead.sent_at is None
    resampled = pipelined(ahead(sent_at=None)).settle(DRAFT, verdict(3, (5, 6, 7), resample=True), (5, 6, 7, 8))
    assert resampled.next_number == 5 and resampled.ahead is None
    too_short = pipelined(ahead(sent_at=None, tokens=(8,))).settle(DRAFT, verdict(3, (5, 6, 7, 8)), (5, 6, 7, 8))
    assert too_short.ahead is None


def test_a_branch_block_holds_after_the_rejection_it_was_drafted_for():
    a, b = ahead(sent_at=1.5), branch()
    settled = pipelined(a, a, b).settle(DRAFT, verdict(1, (5, 3)), (5, 3))  # rejected at 11, the cloud's token 3
    assert settled.next_number == 6 and settled.branch
    assert settled.ahead.draft == Draft((4, 4, 2), None, 12) and settled.ahead.sent_at == 1.6


def test_a_branch_behind_the_block_that_held_is_answered_stale_a_round_later():
    a, b = ahead(sent_at=1.5), branch()
    round_ = pipelined(a, a, b)
    settled = round_.settle(DRAFT, verdict(3, (5, 6, 7, 8)), (5, 6, 7, 8))
    assert settled.next_number == 5 and round_.pipeline.outstanding == [b]
    # S_{i+1}'s verdict: the branch (at 11) cannot hold against a sequence committed past it
    nxt = PipelinedRound(5, None, None, None, None, None, 0.0, round_.pipeline)
    assert nxt.settle(Draft((9, 1), None, 14), verdict(0, (2,)), (2,)).next_number == 7
    assert round_.pipeline.outstanding == []


def test_a_branch_for_another_rejection_does_not_hold():
    a, b = ahead(sent_at=1.5), branch()
    for tokens in ((5, 6, 2), (5, 9), (1,)):  # rejected elsewhere, or at 11 for another token
        settled = pipelined(a, a, b).settle(DRAFT, verdict(len(tokens) - 1, tokens), tokens)
        assert settled.next_number == 7 and settled.ahead is None


def test_the_branch_points_are_the_likeliest_verdicts_other_than_all_accepted():
    # P(x_1 … x_{j−1} accepted, then r at j) = Π_{i<j} q_i(x_i) · q_j(r)
    alts = (Alternative(0.9, ((11, 0.05), (14, 0.03))), Alternative(0.4, ((12, 0.5), (15, 0.1))),
            Alternative(0.7, ((13, 0.2),)))
    # 0.9·0.5 = 0.45, 0.9·0.4·0.2 = 0.072, 0.9·0.1 = 0.09, 0.05, 0.03
    assert branch_points(Draft((5, 6, 7), None, 10, alts), 3) == [(1, 12), (1, 15), (2, 13)]
    assert branch_points(Draft((5, 6, 7), None, 10, alts), 1) == [(1, 12)]
    # a weak drafter: mostly the first token's others (0.25, then 0.3·0.7 = 0.21, 0.2, 0.3·0.2·0.1)
    weak = (Alternative(0.3, ((21, 0.25), (24, 0.2))), Alternative(0.2, ((22, 0.7),)), Alternative(0.9, ((23, 0.1),)))
    assert branch_points(Draft((5, 6, 7), None, 10, weak), 4) == [(0, 21), (1, 22), (0, 24), (2, 23)]
    assert branch_points(Draft((5, 6, 7), None, 10)) == []  # e.g. prompt-lookup tokens
    assert branch_points(Draft((5,), None, 10, (Alternative(1.0),))) == []  # a one-token vocabulary
    # a draft's tail keeps its tokens' alternatives; a join keeps them only when both parts have them
    assert Draft((5, 6, 7), None, 10, alts).tail(1).alternatives == alts[1:]
    assert Draft((5,), None, 10, alts[:1]).join(Draft((6, 7), None, 11)).alternatives == ()


def test_the_branch_gate_opens_only_when_both_blocks_can_leave_before_the_verdict():
    gate = BranchGate()
    assert not gate.open(4)  # nothing measured yet
    gate.observe(wait_s=0.62, step_s=0.072)  # go2-paper: T_q = 620 ms, T_p = 72 ms
    assert gate.open(4) and not gate.open(8)  # 6 steps of 72 ms fit in 620 ms, 10 do not
    loopback = BranchGate()
    loopback.observe(wait_s=0.002, step_s=0.001)  # the verdict cuts S_{i+1} short: no branch
    assert not loopback.open(4)
    for _ in range(20):  # the verifier moved far away: the moving averages follow
        loopback.observe(wait_s=0.3, step_s=0.001)
    assert loopback.open(4)


SEQ = list(range(10))  # S_i (DRAFT, at 10) follows these
FULL_HIT = verdict(3, (5, 6, 7, 113))  # S_i accepted, the cloud's own token 113: S_{i+1}'s guess


class StandInKV:
    """A drafter cache that only forks (the stand-in drafter keeps nothing in it)."""

    def fork(self) -> StandInKV:
        return StandInKV()


class StandInDrafter:
    """Drafts the token 100 + its position, each step ``step_s`` long, as the real one polls
    ``cancelled`` before each step and ``truncate`` after each token; records each call's prefix
    length and γ; ``alternative``: every token's, as the drafter model reports them."""

    def __init__(self, step_s: float = 0.0, alternative: Alternative | None = None) -> None:
        self.step_s = step_s
        self.alternative = alternative  # each token's, where the drafts carry the drafter's alternatives
        self.calls: list[tuple[int, int]] = []

    def draft(self, kv, prefix, gamma, sampling, rng, tp_s, distribution=None, truncate=None, cancelled=None):
        self.calls.append((len(prefix), gamma))
        tokens: list[int] = []
        for j in range(gamma):
            if cancelled is not None and cancelled():
                raise DraftCancelled()
            if tokens and truncate is not None and truncate():
                break
            time.sleep(self.step_s)
            tokens.append(100 + len(prefix) + j)
        alternatives = () if self.alternative is None else (self.alternative,) * len(tokens)
        return Draft(tuple(tokens), None, len(prefix), alternatives)


class FinalOnly:
    """A link whose verdict comes only when awaited (``polled``: also when polled); records what was
    sent ahead."""

    distribution = None

    def __init__(self, final: ExitResult = verdict(3, (5, 6, 7, 113)), polled: bool = False) -> None:  # noqa: B008
        self.final, self.polled = final, polled
        self.sent: list[tuple[int, Draft]] = []

    def poll_final(self, number: int, on_exit) -> ExitResult | None:
        return self.final if self.polled else None

    def await_final(self, number: int, on_exit) -> ExitResult:
        return self.final

    def send(self, number: int, draft: Draft, resampled: int, chained: bool = False) -> float:
        self.sent.append((number, draft))
        return 1.5


def test_the_last_block_of_a_decision_has_nothing_drafted_ahead():
    """A full hit of S_i would end the decision (4 tokens left): S_{i+1} is not drafted, the round
    waits for its verdict, and nothing is held for a next round. Not last, the same round drafts
    S_{i+1} (its guess and γ) after S_i and sends it chained."""
    seq = SEQ
    drafter, link = StandInDrafter(), FinalOnly()
    round_ = PipelinedRound(4, link, None, drafter, None, None, 0.0, Pipeline(5))
    final = round_.verdict(seq, StandInKV(), DRAFT, 3, remaining=4)
    assert final.accepted == 3 and round_.ahead is None and drafter.calls == [] and link.sent == []
    assert round_.settle(DRAFT, final, (5, 6, 7, 113)).ahead is None
    round_ = PipelinedRound(4, link, None, drafter, None, None, 0.0, Pipeline(5, depth=1))
    round_.verdict(seq, StandInKV(), DRAFT, 3)
    assert drafter.calls == [(13, 4)] and link.sent == [(5, Draft((113, 114, 115, 116), None, 13))]
    assert round_.settle(DRAFT, final, (5, 6, 7, 113)).ahead.draft.tokens == (114, 115, 116)


def round_at(number: int, link: FinalOnly, pipeline: Pipeline, drafter: StandInDrafter) -> PipelinedRound:
    return PipelinedRound(number, link, None, drafter, None, None, 0.0, pipeline)


def end_round_4(round_: PipelinedRound, end: str) -> None:
    """Round 4 ends in a miss of S_i (its second token rejected) or with the decision (``close``)."""
    if end == "miss":
        assert round_.settle(DRAFT, verdict(1, (5, 2)), (5, 2)).next_number == 6
    else:
        round_.close()


def test_the_block_after_next_is_drafted_meanwhile_and_leaves_first_in_the_round_it_follows():
    """Depth 2: S_{i+1} (its guess and γ) leaves chained; S_{i+2}, drafted as if both blocks were fully
    accepted, stays on the robot. After a full hit S_{i+1} is the next round's block, which sends
    S_{i+2} at once and drafts S_{i+3} meanwhile. A budget that a full hit of both would exhaust drafts
    no S_{i+2}; neither does depth 1."""
    drafter, link = StandInDrafter(), FinalOnly()
    pipeline = Pipeline(5)
    round_ = round_at(4, link, pipeline, drafter)
    round_.verdict(SEQ, StandInKV(), DRAFT, 3)
    assert [(n, d.position, d.tokens) for n, d in link.sent] == [(5, 13, (113, 114, 115, 116))]
    (held,) = pipeline.held
    assert held.follows == 5 and held.take(lambda: False).draft == Draft((117, 118, 119, 120), None, 17)
    settled = round_.settle(DRAFT, FULL_HIT, (5, 6, 7, 113))
    assert settled.next_number == 5 and settled.ahead.draft.tokens == (114, 115, 116) and not settled.after_next
    assert pipeline.held == [held]
    nxt = round_at(5, link, pipeline, drafter)
    nxt.verdict(SEQ + [5, 6, 7, 113], StandInKV(), settled.ahead.draft, 3)
    assert [(n, d.position) for n, d in link.sent[1:]] == [(6, 17)]
    (held,) = pipeline.held
    assert held.follows == 6 and held.take(lambda: False).draft.position == 21
    s2 = nxt.settle(settled.ahead.draft, verdict(3, (114, 115, 116, 117)), (114, 115, 116, 117))
    assert s2.next_number == 6 and s2.after_next and s2.ahead.draft.tokens == (118, 119, 120)
    for pipeline, remaining in ((Pipeline(5), 8), (Pipeline(5, depth=1), None)):
        round_at(4, FinalOnly(), pipeline, StandInDrafter()).verdict(SEQ, StandInKV(), DRAFT, 3, remaining)
        assert pipeline.held == []


def test_the_block_after_next_is_cut_short_by_the_verdict_of_the_round_it_follows_or_dropped():
    """Still being drafted when the round it follows has its own verdict, S_{i+2} stops after the step
    under way and is kept back as any S_{i+1} cut short; after a miss of S_i, or when the decision
    ends, its drafting stops."""
    drafter = StandInDrafter(step_s=0.25)  # S_{i+2} takes 1 s
    pipeline = Pipeline(5)
    round_ = round_at(4, FinalOnly(), pipeline, drafter)
    round_.verdict(SEQ, StandInKV(), DRAFT, 3)  # S_{i+1} drafted first (1 s), then S_{i+2} starts
    settled = round_.settle(DRAFT, FULL_HIT, (5, 6, 7, 113))
    in_at_once = FinalOnly(verdict(0, (9,)), polled=True)  # S_{i+1}'s verdict is here before S_{i+2} is done
    nxt = round_at(5, in_at_once, pipeline, drafter)
    nxt.verdict(SEQ + [5, 6, 7, 113], StandInKV(), settled.ahead.draft, 3)
    assert 1 <= nxt.ahead.draft.gamma < 4 and nxt.ahead.sent_at is None and in_at_once.sent == []
    assert nxt.ahead.draft.position == 17 and pipeline.held == []
    for end in ("miss", "close"):
        pipeline = Pipeline(5)
        round_ = round_at(4, FinalOnly(), pipeline, StandInDrafter(step_s=0.25))
        round_.verdict(SEQ, StandInKV(), DRAFT, 3)
        (held,) = pipeline.held
        end_round_4(round_, end)
        assert pipeline.held == [] and held.take(lambda: False) is None  # cancelled before its next step


def test_the_branch_blocks_of_the_next_block_are_drafted_from_when_it_leaves():
    """S_{i+1}'s branch blocks start when S_{i+1} leaves, a round before its verdict is awaited: after a
    full hit its round sends them right behind its own S_{i+1} (S_{i+2}) and drafts none anew; after
    a miss of S_i, or when the decision ends, their drafting stops."""
    open_gate = BranchGate()
    open_gate.observe(wait_s=10.0, step_s=0.001)
    rejected_first = Alternative(0.9, ((7, 0.05),))  # rank 0: the block's first token rejected for 7
    drafter, link = StandInDrafter(alternative=rejected_first), FinalOnly()
    pipeline = Pipeline(5, gate=open_gate)
    round_ = round_at(4, link, pipeline, drafter)
    round_.verdict(SEQ, StandInKV(), DRAFT, 3)  # S_i (DRAFT) carries no alternatives: no branch of its own
    (early,) = pipeline.next_branches
    assert [n for n, _ in link.sent] == [5] and early.follows == 5
    settled = round_.settle(DRAFT, FULL_HIT, (5, 6, 7, 113))
    assert pipeline.next_branches == [early]
    block = early.wait(lambda: False)  # drafted before S_{i+1}'s round begins: the guess of x_17, then 7 at 14
    assert block.draft.tokens == (7, 115, 116, 117) and block.draft.position == 14
    nxt = round_at(5, link, pipeline, drafter)
    nxt.verdict(SEQ + [5, 6, 7, 113], StandInKV(), settled.ahead.draft, 3)
    assert [(n, d.position) for n, d in link.sent[1:]] == [(6, 17), (7, 14)] and link.sent[2][1] is block.draft
    assert drafter.calls.count((15, 3)) == 1  # S_{i+1}'s branch was drafted once, in round 4
    # the block after each block sent ahead is drafted meanwhile: S_{i+2}'s (number 6) and the branch's (7)
    assert sorted(after.follows for after in pipeline.held) == [6, 7]
    s2 = nxt.settle(settled.ahead.draft, verdict(0, (7,)), (7,))  # S_{i+1}'s first token rejected for 7
    assert s2.next_number == 7 and s2.branch and s2.ahead.draft.tokens == (115, 116, 117)
    (after_branch,) = pipeline.held
    drafted = after_branch.take(lambda: False).draft
    assert (drafted.tokens, drafted.position) == ((118, 119, 120, 121), 18)
    nxt.close()
    for end in ("miss", "close"):
        pipeline = Pipeline(5, gate=open_gate)
        round_ = round_at(4, FinalOnly(), pipeline, StandInDrafter(step_s=0.25, alternative=rejected_first))
        round_.verdict(SEQ, StandInKV(), DRAFT, 3)
        (early,) = pipeline.next_branches
        end_round_4(round_, end)
        assert pipeline.next_branches == [] and early.wait(lambda: False) is None  # cancelled before its next step
