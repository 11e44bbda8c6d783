"""The verifier link's heartbeat as a pure state machine: when to ping, and when the link is alive or dead.

The robot's client (``edge/client.py``) pings the verifier every ``interval_s`` on a session id of its
own; the server's I/O thread answers each ``Ping`` with a ``Pong`` at once, beside whatever its workers
compute. Any frame from the verifier is a sign of life: a Pong, a reply of a decision, or the Error an
older server answers a Ping with. The link is

- **connecting** until the first sign of life,
- **alive** from then on,
- **dead** when a ping has gone unanswered for ``timeout_s`` (nothing at all heard since it left), or at
  once when the transport reports the connection closed (a SIGKILLed verifier's kernel closes its
  sockets; so does a listener that accepts and drops),

and alive again at the next sign of life. A dead link is therefore known within ``interval_s +
timeout_s`` of the verifier's last sign of life at worst, and at once when its connection drops.
Measuring from the first *unanswered ping* rather than from the last sign of life means a robot whose
own heartbeat thread was starved of the CPU (no ping sent) never takes a live verifier for dead.

Why an application-level ping rather than ZeroMQ's ZMTP heartbeats (``ZMQ_HEARTBEAT_IVL``): ZMTP
PINGs are answered by the peer's ZeroMQ I/O thread, which runs in C beside the interpreter, so a
verifier process whose Python is wedged (deadlocked, stuck in a GIL-holding loop, its I/O thread dead)
still answers them and looks alive; and ZeroMQ only drops the connection on a heartbeat timeout,
without telling the application, which would then still wait out its reply timeout. A Ping answered
by the server's own I/O thread (the one that would relay the results) proves the service is serving,
and its absence is seen by the robot's code directly. A slow verifier (a 5 s forward) still answers,
because the forward runs on a worker thread: slow and dead differ.

Pure: no sockets, no threads, no clock of its own (every call takes ``now``, monotonic seconds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HEARTBEAT_INTERVAL_S = 0.5  # a ping this often
HEARTBEAT_TIMEOUT_S = 1.5  # a ping unanswered this long: the link is dead
CONNECTING, ALIVE, DEAD = "connecting", "alive", "dead"


@dataclass(frozen=True)
class LinkState:
    """The link as the heartbeat knows it: ``state`` (connecting | alive | dead), why it is dead,
    seconds since the last sign of life (None: never heard), the last ping's round trip (None: none
    answered yet) and since when (monotonic s) the state holds."""

    state: str
    reason: str = ""
    since_heard_s: float | None = None
    rtt_s: float | None = None
    since: float = 0.0

    @property
    def alive(self) -> bool:
        return self.state == ALIVE

    @property
    def dead(self) -> bool:
        return self.state == DEAD


class Heartbeat:
    def __init__(self, now: float, interval_s: float = HEARTBEAT_INTERVAL_S,
                 timeout_s: float = HEARTBEAT_TIMEOUT_S) -> None:
        if not (math.isfinite(interval_s) and math.isfinite(timeout_s) and 0 < interval_s < timeout_s):
            raise ValueError(f"the heartbeat needs 0 < interval_s < timeout_s, got {interval_s} and {timeout_s}")
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.state, self.reason, self.since = CONNECTING, "", now
        self.heard_at: float | None = None
        self.rtt_s: float | None = None
        self.seq = 0
        self._sent: dict[int, float] = {}  # unanswered pings: seq -> when sent
        self._unanswered_since: float | None = None  # the first ping sent after the last sign of life
        self._next_ping = now

    def ping(self, now: float) -> int | None:
        """The sequence number of a ping to send now, or None when none is due."""
        if now < self._next_ping:
            return None
        self.seq += 1
        self._sent[self.seq] = now
        while len(self._sent) > 64:  # an outage's pings: only the recent ones can still measure a round trip
            del self._sent[min(self._sent)]
        self._next_ping = now + self.interval_s
        if self._unanswered_since is None:
            self._unanswered_since = now
        return self.seq

    def heard(self, now: float, seq: int | None = None) -> bool:
        """A sign of life (``seq``: a Pong's); True when the link has just come alive."""
        self.heard_at = now
        self._unanswered_since = None
        if seq is not None and seq in self._sent:
            self.rtt_s = now - self._sent[seq]
            for old in [s for s in self._sent if s <= seq]:
                del self._sent[old]
        return self._become(ALIVE, "", now)

    def lost(self, now: float, reason: str) -> bool:
        """The transport says the connection is gone; True when the link has just died."""
        return self._become(DEAD, reason, now)

    def check(self, now: float) -> bool:
        """True when the link has just died of a ping unanswered for ``timeout_s``."""
        if self._unanswered_since is not None and now - self._unanswered_since > self.timeout_s:
            silent = f"{now - self.heard_at:.1f} s" if self.heard_at is not None else "ever"
            return self._become(DEAD, f"no answer to the heartbeat within {self.timeout_s:.1f} s "
                                      f"(nothing heard for {silent})", now)
        return False

    def next_wake(self, now: float) -> float:
        """Seconds until the next ping is due or the oldest unanswered one times out."""
        due = [self._next_ping]
        if self._unanswered_since is not None and self.state != DEAD:
            due.append(self._unanswered_since + self.timeout_s + 1e-3)
        return max(0.0, min(due) - now)

    def snapshot(self, now: float) -> LinkState:
        return LinkState(self.state, self.reason, None if self.heard_at is None else now - self.heard_at,
                         self.rtt_s, self.since)

    def _become(self, state: str, reason: str, now: float) -> bool:
        if state == self.state:
            return False
        self.state, self.reason, self.since = state, reason, now
        return True
