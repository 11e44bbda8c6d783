"""In-process Speculative Aggregation (DRAGON, Liu et al. 2025, §4.2 and Algorithm 1): the tests'
reference for the package's engine over the link (edge_spec_ros/dragon/peer.py).

Legend: l ≡ robot, r ≡ cloud (fixed, see dragon/aggregation.py); x^s_t — side s's draft at position t;
p^s_t, log h̃^s_t — its locally aggregated distribution and weight; x_t — target token; S^s — acceptance.

Two sides (dragon/side.DraftingSide), each a next-token function over its *own* context, keep drafting
into their Draft Queues; the Aggregator (on either side — in-process it only matters for the record)
waits until both queues are non-empty, pops the fronts, runs Algorithm 1, and broadcasts x_t with S^l,
S^r. A side whose draft was accepted just dequeues it (its context already ends in x_t); a rejected
side clears its queue, rolls its state back to the committed prefix (the per-side ``rollback(n)``
hook: a KV cache truncate, see models/kv_cache.py) and re-drafts from x_t (§4.2 steps 1-5).

Because every draw is indexed by (seed, position) and a draft at position t is only ever aggregated
when it was drafted over the committed prefix x_<t (an accepted draft equals x_t; after a rejection
the side restarts from x_t), the output equals DRDG/TW (dragon/aggregation.drdg_tw) token for token for
every interleaving of drafting and aggregation: the tests drive it with random event orders.

No I/O: the package's DRAGON over the link (dragon/peer.py, dragon/wire.py) is checked against it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from edge_spec_ros.dragon.aggregation import (
    CLOUD,
    ROBOT,
    AggregationResult,
    SideFunction,
    SideName,
    speculative_aggregate,
)
from edge_spec_ros.dragon.side import DraftingSide
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig

Event = Literal["draft_robot", "draft_cloud", "aggregate"]


@dataclass(frozen=True)
class SpeculativeAggregationResult:
    """Tokens x_1.., per-position S^l, S^r, η^l and aggregator side, and per-side drafting counts."""

    tokens: tuple[int, ...]
    accept_robot: tuple[bool, ...]
    accept_cloud: tuple[bool, ...]
    eta_robot: tuple[float, ...]
    aggregator: tuple[SideName, ...]
    drafted: dict[str, int]
    discarded: dict[str, int]
    rollbacks: dict[str, int]


EventPolicy = Callable[[Sequence[Event]], Event]  # picks the next event among the enabled ones


def round_robin_events() -> EventPolicy:
    """Cycle draft_robot → draft_cloud → aggregate, skipping whatever is not enabled."""
    order: list[Event] = ["draft_robot", "draft_cloud", "aggregate"]
    state = {"i": 0}

    def pick(enabled: Sequence[Event]) -> Event:
        for _ in range(len(order)):
            event = order[state["i"] % len(order)]
            state["i"] += 1
            if event in enabled:
                return event
        raise RuntimeError("no event enabled")

    return pick


def random_events(seed: int) -> EventPolicy:
    """A uniformly random enabled event each time: arbitrary relative speeds of the two sides."""
    gen = np.random.default_rng(seed)
    return lambda enabled: enabled[int(gen.integers(len(enabled)))]


def speculative_aggregation(robot: SideFunction, cloud: SideFunction, prompt: Sequence[int],
                            max_new_tokens: int, rng: PositionalRNG, sampling: SamplingConfig, *,
                            rollback_robot: Callable[[int], None] | None = None,
                            rollback_cloud: Callable[[int], None] | None = None,
                            max_queue: int = 4, events: EventPolicy | None = None,
                            placement: Callable[[int, AggregationResult], SideName] | None = None,
                            first_aggregator: SideName = ROBOT, eos: int | None = None,
                            ) -> SpeculativeAggregationResult:
    """Decode up to ``max_new_tokens`` with Speculative Aggregation (Algorithm 1 per position).

    max_queue bounds each Draft Queue (in-process stand-in for the sides' relative speeds; the paper's
    queues are unbounded, which only matters for wasted work, never for the output);
    events picks the interleaving (default round robin); placement(t, result) names the side that
    aggregates position t+1 (e.g. dragon/scheduler.choose_aggregator); it changes no token.
    """
    if max_queue < 1:
        raise ValueError("max_queue must be >= 1")
    sides = {ROBOT: DraftingSide(ROBOT, robot, prompt, rng, sampling, rollback_robot),
             CLOUD: DraftingSide(CLOUD, cloud, prompt, rng, sampling, rollback_cloud)}
    pick = events or round_robin_events()
    tokens: list[int] = []
    acc_l: list[bool] = []
    acc_r: list[bool] = []
    etas: list[float] = []
    where: list[SideName] = []
    aggregator: SideName = first_aggregator
    while len(tokens) < max_new_tokens:
        enabled: list[Event] = []
        for name, event in ((ROBOT, "draft_robot"), (CLOUD, "draft_cloud")):
            side = sides[name]
            if len(side.queue) < max_queue and side.next_position < max_new_tokens:
                enabled.append(event)  # type: ignore[arg-type]
        if sides[ROBOT].queue and sides[CLOUD].queue:
            enabled.append("aggregate")
        event = pick(enabled)
        if event == "draft_robot":
            sides[ROBOT].draft()
            continue
        if event == "draft_cloud":
            sides[CLOUD].draft()
            continue
        t = len(tokens)
        d_l, d_r = sides[ROBOT].queue[0], sides[CLOUD].queue[0]
        assert d_l.position == d_r.position == t
        result = speculative_aggregate(d_l.token, d_l.dist, d_r.token, d_r.dist, rng, t, sampling)
        sides[ROBOT].settle(result.token, result.accept_robot)
        sides[CLOUD].settle(result.token, result.accept_cloud)
        tokens.append(result.token)
        acc_l.append(result.accept_robot)
        acc_r.append(result.accept_cloud)
        etas.append(result.eta_robot)
        where.append(aggregator)
        if placement is not None:
            aggregator = placement(t, result)
        if eos is not None and result.token == eos:
            break
    return SpeculativeAggregationResult(
        tuple(tokens), tuple(acc_l), tuple(acc_r), tuple(etas), tuple(where),
        drafted={n: s.drafted for n, s in sides.items()}, discarded={n: s.discarded for n, s in sides.items()},
        rollbacks={n: s.rollbacks for n, s in sides.items()})
