"""The heartbeat's state machine (wire/heartbeat.py) on a hand-driven clock: pings every interval,
alive at the first sign of life, dead when a ping goes unanswered for the timeout or at once when the
connection closes, alive again at the next sign of life; a robot that sent no ping (its own thread
starved) never declares a live verifier dead."""

from __future__ import annotations

import pytest

from edge_spec_ros.wire.codec import decode, encode
from edge_spec_ros.wire.heartbeat import ALIVE, CONNECTING, DEAD, HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S, Heartbeat
from edge_spec_ros.wire.messages import PROTOCOL_REVISION, Envelope, MsgType, Ping, Pong


def test_the_defaults_notice_a_loss_within_a_second_or_two():
    assert HEARTBEAT_INTERVAL_S <= 0.5 and HEARTBEAT_TIMEOUT_S <= 1.5 and HEARTBEAT_INTERVAL_S < HEARTBEAT_TIMEOUT_S


def test_pings_alive_dead_and_alive_again():
    hb = Heartbeat(0.0, 0.5, 1.5)
    assert hb.state == CONNECTING and hb.ping(0.0) == 1 and hb.ping(0.2) is None and hb.ping(0.5) == 2
    assert hb.heard(0.55, seq=2) and hb.state == ALIVE and hb.rtt_s == pytest.approx(0.05)
    assert not hb.heard(0.6)  # already alive: no change
    assert hb.ping(1.0) == 3 and hb.ping(1.5) == 4 and hb.ping(2.0) == 5 and hb.ping(2.5) == 6
    assert not hb.check(2.5)  # ping 3 (sent at 1.0) unanswered for exactly 1.5 s: not yet
    assert hb.check(2.51) and hb.state == DEAD and "within 1.5 s" in hb.reason
    assert not hb.check(3.0)  # dead once
    snap = hb.snapshot(3.0)
    assert snap.dead and not snap.alive and snap.since_heard_s == pytest.approx(2.4)
    assert hb.heard(3.1, seq=6) and hb.state == ALIVE and hb.reason == ""


def test_a_closed_connection_is_dead_at_once():
    hb = Heartbeat(0.0)
    hb.ping(0.0)
    hb.heard(0.01, seq=1)
    assert hb.lost(0.2, "closed") and hb.snapshot(0.2).dead and hb.reason == "closed"
    assert not hb.lost(0.3, "again")


def test_no_ping_sent_no_death():
    """A verifier is declared dead for a ping it left unanswered, never for the robot's own silence."""
    hb = Heartbeat(0.0, 0.5, 1.5)
    hb.ping(0.0)
    hb.heard(0.01, seq=1)
    assert not hb.check(10.0)  # the heartbeat thread did not run for 10 s: nothing was asked
    hb.ping(10.0)
    assert not hb.check(11.4) and hb.check(11.6)


def test_never_heard_is_dead_after_the_timeout():
    hb = Heartbeat(0.0, 0.5, 1.5)
    hb.ping(0.0)
    assert hb.next_wake(0.0) == pytest.approx(0.5)
    hb.ping(0.5), hb.ping(1.0), hb.ping(1.5)
    assert hb.check(1.6) and "nothing heard for ever" in hb.reason


@pytest.mark.parametrize("interval,timeout", [(0.0, 1.0), (1.0, 1.0), (2.0, 1.0), (float("nan"), 1.0)])
def test_bad_settings_are_refused(interval, timeout):
    with pytest.raises(ValueError, match="0 < interval_s < timeout_s"):
        Heartbeat(0.0, interval, timeout)


def test_ping_and_pong_travel():
    for msg in (Ping(7), Pong(7, PROTOCOL_REVISION)):
        frames = encode(Envelope(bytes(16), msg))
        assert decode(frames).message == msg and frames[0][3] == int(msg.TYPE)
    assert {int(MsgType.PING), int(MsgType.PONG)} & {11, *range(32, 38)} == set()  # compact draft, DRAGON
