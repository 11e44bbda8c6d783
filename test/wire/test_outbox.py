"""Unit tests for edge_spec_ros.wire.link.Outbox: policy order, emulated arrival times, bandwidth, drop, idle."""

from __future__ import annotations

import pytest

from edge_spec_ros.wire.emulator import LinkShape
from edge_spec_ros.wire.link import Outbox


def msg(name: str, size: int = 10) -> list[bytes]:
    """A frame list identifiable by its first frame, ``size`` bytes in all (split over two frames)."""
    head = name.encode()
    return [head, b"\0" * (size - len(head))]


def names(out: list[list[bytes]]) -> list[str]:
    return [frames[0].decode() for frames in out]


# --------------------------------------------------------------------------- no shaping


def test_no_shape_priority_order():
    """Without a shape everything comes out at once, highest confidence first, FIFO among equals."""
    box = Outbox(policy="priority")
    for name, conf in [("a", 0.2), ("b", 0.9), ("c", 0.5), ("d", 0.9), ("e", 0.5)]:
        box.put(msg(name), conf)
    assert names(box.pump(0.0)) == ["b", "d", "c", "e", "a"]
    assert box.idle


def test_no_shape_fifo_order_is_default():
    """The default policy is fifo: push order regardless of confidence."""
    box = Outbox()
    for name, conf in [("a", 0.2), ("b", 0.9), ("c", 0.5)]:
        box.put(msg(name), conf)
    assert names(box.pump(0.0)) == ["a", "b", "c"]


def test_no_shape_random_is_seeded_permutation():
    """random releases every frame set once, in a seed-determined order that is not always push order."""
    labels = [str(i) for i in range(16)]

    def order(seed):
        box = Outbox(policy="random", seed=seed)
        for label in labels:
            box.put(msg(label), 0.5)
        return names(box.pump(0.0))
    orders = [order(seed) for seed in range(4)]
    assert all(sorted(o) == sorted(labels) for o in orders)
    assert order(2) == orders[2]
    assert any(o != labels for o in orders)


def test_no_shape_frames_are_passed_through_unchanged():
    """pump returns the very frame lists that were put."""
    box = Outbox()
    frames = [b"header", b"\x00\x01", b""]
    box.put(frames)
    assert box.pump(0.0) == [frames]


def test_no_shape_next_time_and_idle():
    """Without a shape there is nothing to wait for: next_time is None; idle tracks the queue."""
    box = Outbox()
    assert box.idle and box.next_time() is None
    box.put(msg("a"))
    assert not box.idle and box.next_time() is None
    box.pump(0.0)
    assert box.idle and box.pump(1.0) == []


def test_ideal_shape_behaves_like_no_shape():
    """An ideal LinkShape is not emulated: frames come out on the first pump."""
    box = Outbox(LinkShape(rto_s=1.0))
    box.put(msg("a"))
    assert names(box.pump(0.0)) == ["a"]
    assert box.link is None


# --------------------------------------------------------------------------- shaped link


def test_delay_holds_frames_until_arrival():
    """With a delay, frames come out only once pump's time reaches their arrival."""
    box = Outbox(LinkShape(delay_s=0.5))
    box.put(msg("a"))
    assert box.pump(1.0) == []
    assert not box.idle
    assert box.next_time() == pytest.approx(1.5)
    assert box.pump(1.49) == []
    assert names(box.pump(1.5)) == ["a"]
    assert box.idle and box.next_time() is None


def test_delay_without_bandwidth_sends_all_at_once():
    """With no bandwidth cap all queued frames start together and arrive together, in policy order."""
    box = Outbox(LinkShape(delay_s=0.2), policy="priority")
    box.put(msg("lo"), 0.1)
    box.put(msg("hi"), 0.9)
    assert box.pump(0.0) == []
    assert len(box.in_flight) == 2 and len(box.queue) == 0
    assert names(box.pump(0.2)) == ["hi", "lo"]


def test_bandwidth_second_message_waits_for_first():
    """At 8,000 bit/s two 1,000-byte messages arrive 1 s apart; the second starts when the first ends."""
    box = Outbox(LinkShape(delay_s=0.1, bandwidth_bps=8000))
    box.put(msg("a", 1000))
    box.put(msg("b", 1000))
    assert box.pump(0.0) == []
    assert len(box.in_flight) == 1 and len(box.queue) == 1  # b waits: link busy until 1.0
    assert box.next_time() == pytest.approx(1.0)  # link free before a arrives (1.1)
    assert box.pump(1.0) == []  # b starts transmitting
    assert len(box.in_flight) == 2 and len(box.queue) == 0
    assert box.next_time() == pytest.approx(1.1)
    assert names(box.pump(1.1)) == ["a"]
    assert box.next_time() == pytest.approx(2.1)
    assert box.pump(2.09) == []
    assert names(box.pump(2.1)) == ["b"]
    assert box.idle


def test_bandwidth_counts_all_frames_of_a_message():
    """Serialisation time uses the summed size of every frame of a message."""
    box = Outbox(LinkShape(bandwidth_bps=8000))
    box.put([b"x" * 300, b"y" * 700])  # 1,000 bytes: 1 s
    box.pump(0.0)
    assert box.link.free_at == pytest.approx(1.0)
    assert box.pump(0.99) == []
    assert len(box.pump(1.0)) == 1


def test_late_pump_delivers_everything_due():
    """A pump long after several arrivals returns every due frame set, in order."""
    box = Outbox(LinkShape(delay_s=0.1))
    for name in "abc":
        box.put(msg(name))
    box.pump(0.0)
    assert names(box.pump(10.0)) == ["a", "b", "c"]


def test_policy_applies_when_link_frees():
    """Frames queued while the link is busy are sent by policy once it frees (priority: best first)."""
    box = Outbox(LinkShape(bandwidth_bps=8000), policy="priority")
    box.put(msg("first", 1000), 0.0)
    box.pump(0.0)  # first occupies the link until 1.0
    box.put(msg("low", 1000), 0.1)
    box.put(msg("high", 1000), 0.9)
    assert names(box.pump(1.0)) == ["first"]
    assert names(box.pump(2.0)) == ["high"]
    assert names(box.pump(3.0)) == ["low"]


def test_next_time_reports_earliest_event():
    """next_time is the earliest of the head arrival and (with frames queued) the link's free time."""
    box = Outbox(LinkShape(delay_s=3.0, bandwidth_bps=8000))
    assert box.next_time() is None
    box.put(msg("a", 1000))
    assert box.next_time() == 0.0  # queued and the link is free from 0
    box.pump(0.0)
    assert box.next_time() == pytest.approx(4.0)  # only a in flight: its arrival
    box.put(msg("b", 1000))
    assert box.next_time() == pytest.approx(1.0)  # b can start when the link frees


def test_drop_removes_only_queued_frames_with_matching_tags():
    """drop removes matching queued frame sets, never one already in flight, and returns the count."""
    box = Outbox(LinkShape(bandwidth_bps=8000))
    box.put(msg("a", 1000), tag=("round", 1))
    box.pump(0.0)  # a in flight
    box.put(msg("b", 1000), tag=("round", 1))
    box.put(msg("c", 1000), tag=("round", 2))
    box.put(msg("d", 1000), tag=None)
    assert box.drop(lambda tag: tag == ("round", 1)) == 1  # b only; a is in flight
    assert box.drop(lambda tag: tag == ("round", 9)) == 0
    delivered = []
    for t in (1.0, 2.0, 3.0, 4.0):
        delivered += names(box.pump(t))
    assert delivered == ["a", "c", "d"]
    assert box.idle


def test_drop_without_shape_before_pump():
    """Without a shape, frames dropped before the pump are never released."""
    box = Outbox()
    for i in range(5):
        box.put(msg(str(i)), tag=i)
    assert box.drop(lambda tag: tag % 2 == 1) == 2
    assert names(box.pump(0.0)) == ["0", "2", "4"]


def test_drop_everything_queued_makes_box_idle():
    """Dropping all queued frames of an unshaped box leaves it idle."""
    box = Outbox()
    box.put(msg("a"), tag="x")
    assert not box.idle
    assert box.drop(lambda tag: True) == 1
    assert box.idle and box.pump(0.0) == []


def test_idle_false_while_in_flight():
    """A box with nothing queued but frames in flight is not idle."""
    box = Outbox(LinkShape(delay_s=1.0))
    box.put(msg("a"))
    box.pump(0.0)
    assert len(box.queue) == 0 and len(box.in_flight) == 1
    assert not box.idle
    box.pump(1.0)
    assert box.idle
