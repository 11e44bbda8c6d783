"""Unit tests for edge_spec_ros.wire.emulator: LinkShape validation and LinkEmulator timing arithmetic."""

from __future__ import annotations

import random

import pytest

from edge_spec_ros.wire.emulator import LinkEmulator, LinkShape

# --------------------------------------------------------------------------- LinkShape


def test_default_shape_is_ideal():
    """LinkShape() has no delay, jitter, bandwidth cap or loss, and is ideal."""
    s = LinkShape()
    assert (s.delay_s, s.jitter_s, s.bandwidth_bps, s.loss) == (0.0, 0.0, 0.0, 0.0)
    assert s.ideal


@pytest.mark.parametrize("kwargs", [{"delay_s": 0.01}, {"jitter_s": 0.001}, {"bandwidth_bps": 1e6},
                                    {"loss": 0.1}])
def test_any_impairment_makes_shape_non_ideal(kwargs):
    """Each of delay, jitter, bandwidth and loss on its own makes the shape non-ideal."""
    assert not LinkShape(**kwargs).ideal


def test_rto_alone_keeps_shape_ideal():
    """The retransmission timeout only matters with loss, so it does not affect ideal."""
    assert LinkShape(rto_s=1.0).ideal


@pytest.mark.parametrize("kwargs", [{"delay_s": -0.001}, {"jitter_s": -1.0}, {"bandwidth_bps": -1.0},
                                    {"rto_s": -0.2}, {"loss": -0.01}, {"loss": 1.0}, {"loss": 1.5}])
def test_invalid_shape_raises_value_error(kwargs):
    """Negative times/bandwidth and loss outside [0, 1) are refused."""
    with pytest.raises(ValueError, match="invalid link shape"):
        LinkShape(**kwargs)


def test_boundary_values_are_valid():
    """Zero everywhere and loss just below 1 are accepted."""
    LinkShape(delay_s=0.0, jitter_s=0.0, bandwidth_bps=0.0, loss=0.0, rto_s=0.0)
    assert LinkShape(loss=0.999).loss == 0.999


def test_shape_is_frozen():
    """LinkShape is immutable."""
    with pytest.raises(AttributeError):
        LinkShape().delay_s = 1.0  # type: ignore[misc]


# --------------------------------------------------------------------------- transmit: delay and bandwidth


def test_ideal_link_arrives_immediately():
    """On an ideal link a message arrives when it is sent, whatever its size."""
    em = LinkEmulator(LinkShape())
    assert em.transmit(10_000_000, 3.5) == 3.5
    assert em.transmit(1, 4.0) == 4.0
    assert em.free_at == 4.0


def test_delay_only():
    """With only a one-way delay, arrival is send time + delay and the link is free at once."""
    em = LinkEmulator(LinkShape(delay_s=0.05))
    assert em.transmit(1000, 1.0) == pytest.approx(1.05)
    assert em.free_at == 1.0
    assert em.transmit(1000, 1.0) == pytest.approx(1.05)  # no serialisation: no queueing


def test_bandwidth_serialisation_time():
    """1,000 bytes at 8,000 bit/s take exactly 1 s to send, then the delay applies."""
    em = LinkEmulator(LinkShape(delay_s=0.25, bandwidth_bps=8000))
    assert em.transmit(1000, 2.0) == pytest.approx(3.25)
    assert em.free_at == pytest.approx(3.0)


def test_back_to_back_messages_queue_behind_each_other():
    """Messages offered together are serialised one after another."""
    em = LinkEmulator(LinkShape(delay_s=0.1, bandwidth_bps=8000))
    arrivals = [em.transmit(500, 0.0) for _ in range(3)]  # 0.5 s each
    assert arrivals == pytest.approx([0.6, 1.1, 1.6])
    assert em.free_at == pytest.approx(1.5)


def test_message_offered_while_link_busy_waits_for_free_at():
    """A message offered mid-transmission starts when the previous one finishes."""
    em = LinkEmulator(LinkShape(bandwidth_bps=8000))
    em.transmit(1000, 0.0)  # busy until 1.0
    assert em.transmit(1000, 0.4) == pytest.approx(2.0)
    assert em.free_at == pytest.approx(2.0)


def test_message_offered_after_link_free_starts_at_its_own_time():
    """A message offered after the link went idle starts at its offer time, not at free_at."""
    em = LinkEmulator(LinkShape(delay_s=0.01, bandwidth_bps=8000))
    em.transmit(1000, 0.0)  # free at 1.0
    assert em.transmit(1000, 5.0) == pytest.approx(6.01)
    assert em.free_at == pytest.approx(6.0)


def test_zero_byte_message_takes_no_link_time():
    """An empty message does not occupy the link."""
    em = LinkEmulator(LinkShape(delay_s=0.2, bandwidth_bps=8000))
    assert em.transmit(0, 1.0) == pytest.approx(1.2)
    assert em.free_at == 1.0


def test_initial_free_at_is_zero():
    """A fresh emulator's link is free from time 0."""
    assert LinkEmulator(LinkShape(bandwidth_bps=1.0)).free_at == 0.0


# --------------------------------------------------------------------------- jitter and loss


def test_jitter_within_bounds_and_varies():
    """Arrival - send time lies in [delay, delay + jitter] and is not constant."""
    em = LinkEmulator(LinkShape(delay_s=0.05, jitter_s=0.02), seed=3)
    extras = [em.transmit(100, float(t)) - t for t in range(500)]  # 1 s apart: no reorder clamping
    assert all(0.05 <= e <= 0.07 + 1e-12 for e in extras)
    assert max(extras) - min(extras) > 0.015  # spread over most of the jitter range
    assert len(set(extras)) > 400


def test_jitter_is_seeded_uniform():
    """Jitter draws are random.Random(seed).uniform(0, jitter), reproducible by seed."""
    shape = LinkShape(delay_s=0.1, jitter_s=0.05)
    em = LinkEmulator(shape, seed=11)
    ref = random.Random(11)
    for t in range(20):
        assert em.transmit(10, float(t)) == pytest.approx(t + 0.1 + ref.uniform(0.0, 0.05))


def test_same_seed_same_schedule_different_seed_differs():
    """Two emulators with the same seed give identical arrivals; another seed does not."""
    shape = LinkShape(delay_s=0.01, jitter_s=0.01, loss=0.3, bandwidth_bps=1e5)

    def run(seed):
        em = LinkEmulator(shape, seed=seed)
        return [em.transmit(200, t * 0.5) for t in range(50)]
    assert run(5) == run(5)
    assert run(5) != run(6)


def test_loss_adds_rto_exactly_when_seeded_draw_is_below_loss():
    """A message is late by exactly rto_s iff the seeded random() draw falls below the loss rate."""
    shape = LinkShape(delay_s=0.02, loss=0.5, rto_s=0.3)
    em = LinkEmulator(shape, seed=42)
    ref = random.Random(42)
    lost = 0
    for t in range(200):  # 1 s apart: no reorder clamping
        expected_lost = ref.random() < 0.5
        lost += expected_lost
        assert em.transmit(100, float(t)) - t == pytest.approx(0.02 + (0.3 if expected_lost else 0.0))
    assert 50 < lost < 150


def test_loss_with_jitter_uses_jitter_draw_then_loss_draw():
    """With jitter and loss, each message draws uniform jitter first, then the loss test."""
    shape = LinkShape(delay_s=0.01, jitter_s=0.04, loss=0.4, rto_s=0.25)
    em = LinkEmulator(shape, seed=9)
    ref = random.Random(9)
    for t in range(100):
        expected = t + 0.01 + ref.uniform(0.0, 0.04)
        if ref.random() < 0.4:
            expected += 0.25
        assert em.transmit(1, float(t)) == pytest.approx(expected)


def test_loss_does_not_occupy_the_link():
    """A retransmission delays arrival but not free_at (the next message's start)."""
    em = LinkEmulator(LinkShape(bandwidth_bps=8000, loss=0.999999, rto_s=5.0), seed=0)
    assert em.transmit(1000, 0.0) == pytest.approx(6.0)
    assert em.free_at == pytest.approx(1.0)


def test_zero_loss_never_adds_rto():
    """With loss 0 arrivals never include rto, however large rto is."""
    em = LinkEmulator(LinkShape(delay_s=0.1, rto_s=100.0), seed=1)
    assert all(em.transmit(10, float(t)) == pytest.approx(t + 0.1) for t in range(100))


# --------------------------------------------------------------------------- ordering


def _seed_where(first_lost: bool, second_lost: bool, loss: float) -> int:
    """A seed whose first two loss draws come out as requested (no jitter, so only loss draws)."""
    for seed in range(1000):
        r = random.Random(seed)
        if (r.random() < loss) == first_lost and (r.random() < loss) == second_lost:
            return seed
    raise AssertionError("no such seed")


def test_lost_message_holds_back_the_next_one():
    """A message sent after a lost one arrives no earlier than it (TCP does not reorder)."""
    seed = _seed_where(True, False, 0.5)
    em = LinkEmulator(LinkShape(delay_s=0.01, loss=0.5, rto_s=0.2), seed=seed)
    first = em.transmit(10, 0.0)
    second = em.transmit(10, 0.05)  # would arrive at 0.06 on its own
    assert first == pytest.approx(0.21)
    assert second == first


def test_arrivals_never_reorder_under_jitter_and_loss():
    """With jitter larger than the send spacing plus loss, arrival times are still non-decreasing."""
    em = LinkEmulator(LinkShape(delay_s=0.01, jitter_s=0.1, loss=0.2, rto_s=0.2, bandwidth_bps=1e6), seed=4)
    sends = [i * 0.005 for i in range(1000)]
    arrivals = [em.transmit(100, t) for t in sends]
    assert all(a <= b for a, b in zip(arrivals, arrivals[1:]))
    assert all(a >= t + 0.01 for a, t in zip(arrivals, sends))
    assert len(set(arrivals)) < len(arrivals)  # the clamp really was exercised


@pytest.mark.parametrize("field", ["delay_s", "jitter_s", "bandwidth_bps", "rto_s"])
def test_link_shape_rejects_nan_and_infinity(field):
    """NaN or infinite times and bandwidths are refused."""
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite"):
            LinkShape(**{field: bad})
