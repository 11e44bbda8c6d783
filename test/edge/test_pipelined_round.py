"""PicoSpec's round bookkeeping: which block the next round uses and which number it takes."""

from __future__ import annotations

import numpy as np

from edge_spec_ros.edge.pipeline import Ahead, PipelinedRound, SerialRound
from edge_spec_ros.models.drafter import Draft
from edge_spec_ros.wire.messages import ExitResult

DRAFT = Draft((5, 6, 7), None, 10)  # S_i: γ = 3 at positions 10..12
KV = object()


def verdict(accepted: int, tokens: tuple[int, ...], resample: bool = False) -> ExitResult:
    return ExitResult(round=4, layer=2, accepted=accepted, tokens=np.array(tokens, dtype=np.int32), confidence=1.0,
                      is_final=True, resample=resample)


def pipelined(ahead: Ahead | None) -> PipelinedRound:
    round_ = PipelinedRound(4, None, None, None, None, None, 0.0)
    round_.ahead = ahead
    return round_


def ahead(chained_at: float | None, tokens=(8, 9, 1)) -> Ahead:
    return Ahead(Draft(tokens, None, 13), KV, 0.01, chained_at)  # S_{i+1}: the guess of x_13, then γ'


def test_a_serial_round_is_followed_by_the_next_number():
    settled = SerialRound(4, None, None).settle(DRAFT, verdict(1, (5, 3)), (5, 3))
    assert settled.next_number == 5 and settled.ahead is None


def test_a_chained_block_that_held_is_the_next_round_and_on_the_link_already():
    all_accepted = verdict(3, (5, 6, 7, 8))  # the cloud's own token is the guess, 8
    settled = pipelined(ahead(chained_at=1.5)).settle(DRAFT, all_accepted, (5, 6, 7, 8))
    assert settled.next_number == 5
    assert settled.ahead.draft == Draft((9, 1), None, 14) and settled.ahead.sent_at == 1.5
    assert settled.ahead.kv is KV and settled.ahead.t_token_s == 0.01


def test_a_chained_block_that_failed_spent_its_number():
    rejected = verdict(1, (5, 2))
    assert pipelined(ahead(chained_at=1.5)).settle(DRAFT, rejected, (5, 2)).next_number == 6
    wrong_guess = verdict(3, (5, 6, 7, 4))
    settled = pipelined(ahead(chained_at=1.5)).settle(DRAFT, wrong_guess, (5, 6, 7, 4))
    assert settled.next_number == 6 and settled.ahead is None


def test_a_block_kept_back_is_used_unsent_or_dropped():
    held = pipelined(ahead(chained_at=None)).settle(DRAFT, verdict(3, (5, 6, 7, 8)), (5, 6, 7, 8))
    assert held.next_number == 5 and held.ahead.sent_at is None
    resampled = pipelined(ahead(chained_at=None)).settle(DRAFT, verdict(3, (5, 6, 7), resample=True), (5, 6, 7, 8))
    assert resampled.next_number == 5 and resampled.ahead is None
    too_short = pipelined(ahead(chained_at=None, tokens=(8,))).settle(DRAFT, verdict(3, (5, 6, 7, 8)), (5, 6, 7, 8))
    assert too_short.ahead is None
