"""Unit tests for edge_spec_ros.wire.link.Outbox: policy order, emulated arrival times, bandwidth, drop, idle;
and a shared egress across outboxes (``pump_egress``)."""

from __future__ import annotations

import math

import pytest

from edge_spec_ros.wire.emulator import LinkEmulator, LinkShape
from edge_spec_ros.wire.link import Egress, Outbox, pump_egress


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


# --------------------------------------------------------------------------- shared egress


def shared(policy: str = "priority", bps: float = 8000, lead_s: float = 0.05) -> tuple[Egress, LinkEmulator]:
    egress = Egress(bps, policy, lead_s)
    return egress, LinkEmulator(LinkShape(bandwidth_bps=bps))


def test_egress_sends_one_message_at_a_time_across_destinations_in_key_order():
    """At 8,000 bit/s a 1,000-byte message holds the shared link 1 s: three robots' messages leave one per
    second, finals first, then the early exit of the robot in motion, then the higher confidence."""
    egress, link = shared()
    still, moving, other = Outbox(policy="priority"), Outbox(policy="priority"), Outbox(policy="priority")
    still.put(msg("still early 0.9", 1000), 0.9, now=0.0)
    moving.put(msg("moving early 0.3", 1000), 0.3, priority=1, now=0.0)
    other.put(msg("other final", 1000), math.inf, now=0.0)
    still.put(msg("still early 0.95", 1000), 0.95, now=0.0)
    boxes = [still, moving, other]
    arrived = []
    for t in (0.0, 1.0, 2.0, 3.0, 4.0):
        assert pump_egress(egress, link, boxes, t) == (1 if t < 4.0 else 0)
        arrived += [(t, name) for box in boxes for name in names(box.pump(t, shared=True))]
    assert arrived == [(1.0, "other final"), (2.0, "moving early 0.3"), (3.0, "still early 0.95"),
                       (4.0, "still early 0.9")]
    assert all(box.idle for box in boxes)


def test_egress_fifo_policy_keeps_queuing_order():
    """fifo: in queuing order across destinations, whatever the confidence or priority."""
    egress, link = shared("fifo")
    a, b = Outbox(policy="priority"), Outbox(policy="priority")
    a.put(msg("a early", 1000), 0.1, now=0.0)
    b.put(msg("b final", 1000), math.inf, priority=1, now=0.1)
    pump_egress(egress, link, [a, b], 0.2)
    assert names(a.pump(1.2, shared=True)) == ["a early"] and b.pump(1.2, shared=True) == []
    pump_egress(egress, link, [a, b], 1.2)
    assert names(b.pump(2.2, shared=True)) == ["b final"]


def test_egress_then_destination_link():
    """A message crosses the shared link, then its destination's own (store and forward); a destination
    whose link is busy is passed over and the next one's message goes."""
    egress, link = shared(bps=80_000)  # 1,000 bytes: 0.1 s
    slow = Outbox(LinkShape(delay_s=0.5, bandwidth_bps=8000))  # 1,000 bytes: 1 s, then 0.5 s
    fast = Outbox()
    slow.put(msg("slow 1", 1000), math.inf, now=0.0)
    slow.put(msg("slow 2", 1000), math.inf, now=0.0)
    fast.put(msg("fast", 1000), 0.5, now=0.0)
    assert pump_egress(egress, link, [slow, fast], 0.0) == 1  # slow 1 leaves the egress at 0.1 ...
    assert slow.in_flight[0][0] == pytest.approx(0.1 + 1.0 + 0.5)  # ... and arrives after its own link
    assert pump_egress(egress, link, [slow, fast], 0.1) == 1  # slow's link is busy: fast goes
    assert names(fast.pump(0.2, shared=True)) == ["fast"]
    assert pump_egress(egress, link, [slow, fast], 0.2) == 0  # slow's link still busy until 1.1
    assert pump_egress(egress, link, [slow, fast], 1.1) == 1
    assert names(slow.pump(1.6, shared=True)) == ["slow 1"] and names(slow.pump(2.7, shared=True)) == ["slow 2"]


def test_egress_dropped_early_exits_never_leave():
    """An early exit dropped (its round's final has been queued) before the shared link takes it is not sent."""
    egress, link = shared()
    busy, box = Outbox(), Outbox(policy="priority")
    busy.put(msg("other final", 1000), math.inf, now=0.0)
    pump_egress(egress, link, [busy, box], 0.0)  # the link is busy until 1.0
    box.put(msg("early", 1000), 0.9, tag=("early", 3), now=0.1)
    box.put(msg("final", 1000), math.inf, now=0.2)
    assert box.drop(lambda tag: tag == ("early", 3)) == 1
    pump_egress(egress, link, [busy, box], 1.0)
    pump_egress(egress, link, [busy, box], 2.0)
    assert names(box.pump(5.0, shared=True)) == ["final"] and box.idle


@pytest.mark.parametrize("bad", [dict(bandwidth_bps=0), dict(bandwidth_bps=math.inf), dict(policy="random"),
                                 dict(lead_s=-1.0)])
def test_egress_rejects_bad_settings(bad):
    with pytest.raises(ValueError, match="egress"):
        Egress(**{"bandwidth_bps": 8000, **bad})
