"""PreDrafter (FSD Algorithm 1's Q_p, PREDRAFT and cache C) on its own: a pre-draft is bit-identical to
the draft the robot would compute after the final result; a result never offered is a miss; stale
rounds and results are ignored; take() waits for a pre-draft in progress; a later decision reuses the
workers with its own draws; close() joins the workers."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from edge_spec_ros.edge.predraft import PreDrafter
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig

T = SamplingConfig(temperature=0.9)
WAIT_S = 30.0


def wait_until(predicate) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)
GAMMA = 3


@pytest.fixture(scope="module")
def drafter(target_model):
    return Drafter(truncated_copy(target_model, 2))


@pytest.fixture
def round_(drafter, prompts):
    """A pre-drafter in round 0 of a decision whose draft left; yields (predrafter, kv, prefix, rng)."""
    prompt = prompts[0]
    rng = PositionalRNG(5)
    kv = drafter.start(prompt)
    prefix = prompt.input_ids.tolist()
    predrafter = PreDrafter(drafter, threads=2, policy="priority", gamma=GAMMA, sampling=T, rng=rng)
    predrafter.begin_round(0, prefix, kv.fork())
    yield predrafter, kv, prefix, rng
    predrafter.close()
    assert not any(w.is_alive() for w in predrafter._workers)


def test_a_hit_is_the_draft_the_robot_would_compute(drafter, round_):
    predrafter, kv, prefix, rng = round_
    exit_tokens = (11, 12)  # an early exit's δ accepted tokens plus its own token
    predrafter.offer(0, exit_tokens, confidence=0.9, layer=2)
    wait_until(lambda: exit_tokens in predrafter._running or exit_tokens in predrafter._cache)
    hit = predrafter.take(exit_tokens)  # a pre-draft in progress is awaited
    assert hit is not None and hit.layer == 2
    fresh = drafter.draft(kv, prefix + list(exit_tokens), GAMMA, T, rng)
    assert hit.draft.tokens == fresh.tokens and torch.equal(hit.draft.q, fresh.q)
    assert hit.draft.position == len(prefix) + len(exit_tokens)


def test_a_result_never_offered_is_a_miss_and_take_ends_the_round(round_):
    predrafter, _, _, _ = round_
    predrafter.offer(0, (11,), confidence=0.5, layer=1)
    assert predrafter.take((12,)) is None  # the final exit disagreed with every early one
    assert predrafter.take((11,)) is None  # the round is over: its cache is gone


def test_results_of_another_round_are_ignored(round_):
    predrafter, _, _, _ = round_
    predrafter.offer(1, (11,), confidence=0.9, layer=1)  # a late result of a round not begun
    assert predrafter.take((11,)) is None


def test_offers_from_many_threads_each_draft_once(round_):
    predrafter, _, _, _ = round_
    offers = [threading.Thread(target=predrafter.offer, args=(0, (20 + i % 3,), 0.1 * i, 1)) for i in range(9)]
    for t in offers:
        t.start()
    for t in offers:
        t.join()
    wait_until(lambda: not predrafter._queue and not predrafter._running)
    assert set(predrafter._cache) == {(20,), (21,), (22,)}  # nine offers, three distinct results
    assert predrafter.take((20,)) is not None


def test_at_least_one_thread():
    with pytest.raises(ValueError, match="at least one"):
        PreDrafter(None, threads=0, policy="priority", gamma=1, sampling=T, rng=PositionalRNG())


def test_a_later_decision_reuses_the_workers_with_its_own_draws(drafter, prompts):
    """begin() opens a decision on the same threads: its pre-drafts use its seed's draws, and one
    still running from the earlier decision's round 0 never lands in the later decision's round 0."""
    prompt = prompts[0]
    kv = drafter.start(prompt)
    prefix = prompt.input_ids.tolist()
    predrafter = PreDrafter(drafter, threads=1, policy="priority", gamma=GAMMA, sampling=T, rng=PositionalRNG(5),
                            min_step_s=0.2)
    try:
        workers = list(predrafter._workers)
        predrafter.begin_round(0, prefix, kv.fork())
        predrafter.offer(0, (11,), confidence=0.9, layer=1)
        wait_until(lambda: (11,) in predrafter._running)  # slow: each step lasts 0.2 s
        rng = PositionalRNG(6)
        predrafter.end()
        predrafter.begin(rng, T, GAMMA, min_step_s=0.05)
        predrafter.begin_round(0, prefix, kv.fork())
        assert predrafter.take((11,)) is None  # the earlier decision's draft is not awaited, nor taken
        predrafter.begin_round(0, prefix, kv.fork())
        predrafter.offer(0, (11,), confidence=0.9, layer=1)
        wait_until(lambda: (11,) in predrafter._cache)
        hit = predrafter.take((11,))
        fresh = drafter.draft(kv, prefix + [11], GAMMA, T, rng)
        assert hit.draft.tokens == fresh.tokens and torch.equal(hit.draft.q, fresh.q)
        assert hit.draft_s >= GAMMA * 0.05  # the worker's own measured draft time (this decision's T_p)
        assert predrafter._workers == workers and all(w.is_alive() for w in workers)
    finally:
        predrafter.close()
    assert not any(w.is_alive() for w in workers)
