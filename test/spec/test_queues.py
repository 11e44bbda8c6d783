"""Unit tests for edge_spec_ros.spec.queues.ExitQueue: priority, fifo and random policies, removal, clearing."""

from __future__ import annotations

import pytest

from edge_spec_ros.spec.queues import POLICIES, ExitQueue


def drain(q: ExitQueue) -> list:
    out = []
    while q:
        out.append(q.pop())
    return out


def filled(policy: str, items, seed: int = 0) -> ExitQueue:
    """A queue holding ``items``, a list of (item, confidence) pairs, pushed in order."""
    q = ExitQueue(policy, seed)
    for item, conf in items:
        q.push(item, conf)
    return q


ITEMS = [("a", 0.2), ("b", 0.9), ("c", 0.5), ("d", 0.9), ("e", 0.1), ("f", 0.5)]


def test_policies_constant():
    """The three policies of the FSD ablation are supported."""
    assert set(POLICIES) == {"priority", "fifo", "random"}


def test_default_policy_is_priority():
    """ExitQueue() pops by confidence."""
    q = ExitQueue()
    assert q.policy == "priority"
    q.push("low", 0.1)
    q.push("high", 0.8)
    assert q.pop() == "high"


def test_priority_highest_confidence_first_fifo_among_equals():
    """priority pops by descending confidence, ties in push order."""
    assert drain(filled("priority", ITEMS)) == ["b", "d", "c", "f", "a", "e"]


def test_priority_with_negative_and_extreme_confidences():
    """Negative and infinite confidences are ordered correctly too."""
    q = filled("priority", [("neg", -1.0), ("inf", float("inf")), ("zero", 0.0), ("-inf", float("-inf"))])
    assert drain(q) == ["inf", "zero", "neg", "-inf"]


def test_priority_interleaved_push_pop():
    """pop always returns the best item currently queued."""
    q = ExitQueue("priority")
    q.push("x", 0.3)
    q.push("y", 0.6)
    assert q.pop() == "y"
    q.push("z", 0.4)
    q.push("w", 0.1)
    assert q.pop() == "z"
    q.push("v", 0.35)
    assert drain(q) == ["v", "x", "w"]


def test_fifo_ignores_confidence():
    """fifo pops in push order regardless of confidence."""
    assert drain(filled("fifo", ITEMS)) == ["a", "b", "c", "d", "e", "f"]


def test_fifo_interleaved_push_pop():
    """Items pushed after some pops still come out after earlier ones."""
    q = ExitQueue("fifo")
    q.push(1, 0.9)
    q.push(2, 0.1)
    assert q.pop() == 1
    q.push(3, 1.0)
    assert drain(q) == [2, 3]


def test_random_is_a_permutation():
    """random pops every pushed item exactly once."""
    items = [(i, 0.5) for i in range(50)]
    out = drain(filled("random", items, seed=1))
    assert sorted(out) == list(range(50))


def test_random_is_seeded_and_actually_shuffles():
    """The same seed gives the same order; orders differ across seeds and from push order."""
    items = [(i, 0.0) for i in range(20)]
    orders = {seed: drain(filled("random", items, seed)) for seed in range(5)}
    assert drain(filled("random", items, 3)) == orders[3]
    assert len({tuple(o) for o in orders.values()}) > 1
    assert all(o != list(range(20)) for o in orders.values())


def test_random_ignores_confidence():
    """With the same seed, confidences do not change the random order."""
    plain = drain(filled("random", [(i, 0.0) for i in range(20)], seed=8))
    weighted = drain(filled("random", [(i, float(i)) for i in range(20)], seed=8))
    assert plain == weighted


def test_equal_keys_never_compare_items():
    """Uncomparable items (dicts) with equal confidence do not break the heap."""
    for policy in POLICIES:
        q = filled(policy, [({"n": i}, 0.5) for i in range(10)])
        assert sorted(d["n"] for d in drain(q)) == list(range(10))


def test_len_and_truthiness():
    """len counts queued items; an empty queue is falsy."""
    q = ExitQueue("fifo")
    assert len(q) == 0 and not q
    q.push("a", 0.0)
    q.push("b", 0.0)
    assert len(q) == 2 and q
    q.pop()
    assert len(q) == 1


def test_pop_empty_raises_index_error():
    """Popping an empty queue raises IndexError."""
    with pytest.raises(IndexError):
        ExitQueue("priority").pop()


@pytest.mark.parametrize("policy", POLICIES)
def test_remove_if_drops_matching_and_returns_count(policy):
    """remove_if drops exactly the matching items and reports how many."""
    q = filled(policy, ITEMS, seed=2)
    assert q.remove_if(lambda item: item in {"b", "e", "zz"}) == 2
    assert len(q) == 4
    assert sorted(drain(q)) == ["a", "c", "d", "f"]


@pytest.mark.parametrize("policy", POLICIES)
def test_remove_if_keeps_order_of_remaining_items(policy):
    """The remaining items pop in the same relative order as without the removal."""
    full = drain(filled(policy, ITEMS, seed=5))
    q = filled(policy, ITEMS, seed=5)
    q.remove_if(lambda item: item in {"c", "d"})
    assert drain(q) == [x for x in full if x not in {"c", "d"}]


def test_remove_if_of_the_best_item_restores_heap_order():
    """After removing the current best, the next pop is the best of the rest (the heap is rebuilt)."""
    q = filled("priority", [("a", 0.9), ("b", 0.1), ("c", 0.5)])
    assert q.remove_if(lambda item: item == "a") == 1
    assert q.pop() == "c"
    q.push("d", 0.3)
    assert drain(q) == ["d", "b"]


def test_remove_if_nothing_matches():
    """remove_if with no match returns 0 and leaves the queue intact."""
    q = filled("priority", ITEMS)
    assert q.remove_if(lambda item: False) == 0
    assert drain(q) == ["b", "d", "c", "f", "a", "e"]


def test_remove_if_everything_and_predicate_sees_items():
    """The predicate receives the items themselves; removing all empties the queue."""
    q = filled("fifo", [((r, layer), 0.0) for r in range(2) for layer in (7, 14)])
    seen = []
    assert q.remove_if(lambda item: seen.append(item) or True) == 4
    assert sorted(seen) == [(0, 7), (0, 14), (1, 7), (1, 14)]
    assert len(q) == 0


def test_queue_usable_after_remove_if():
    """Pushes after remove_if keep the heap invariant and FIFO order among equals."""
    q = filled("priority", [(i, 0.5) for i in range(6)])
    q.remove_if(lambda item: item % 2 == 0)
    q.push("hi", 0.9)
    q.push(99, 0.5)
    assert drain(q) == ["hi", 1, 3, 5, 99]


def test_clear_empties_and_queue_stays_usable():
    """clear drops everything; later pushes still pop in policy order."""
    q = filled("priority", ITEMS)
    q.clear()
    assert len(q) == 0 and not q
    q.push("x", 0.1)
    q.push("y", 0.7)
    q.push("z", 0.7)
    assert drain(q) == ["y", "z", "x"]


@pytest.mark.parametrize("policy", ["lifo", "", "PRIORITY", "Random", None])
def test_invalid_policy_raises_value_error(policy):
    """An unknown policy name is refused with a message naming it and the valid ones."""
    with pytest.raises(ValueError, match="queue policy") as info:
        ExitQueue(policy)
    assert repr(policy) in str(info.value) and "fifo" in str(info.value)
