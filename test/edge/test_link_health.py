"""Link health over ZeroMQ with real processes: the client's heartbeat (edge/client.py) tells a dead
verifier from a slow one within a second or two, decisions or none.

- SIGKILL mid-decision, then a restart: test/edge/test_reconnect.py;
- a verifier killed between decisions is known dead without any decision;
- a peer that never answers (a bare ROUTER that reads and never replies), a port nobody listens on, a
  listener that accepts and drops and a black-holed port (its SYNs dropped: no connection, no refusal):
  dead, and a decision opened there fails at once;
- a server that predates Ping (it answers every frame with an Error, as revision 1 answers an unknown
  type): alive;
- a slow verifier (an emulated 5 s forward): alive throughout, its decision finishes.

Bounds on elapsed time are generous functional checks (far below the 30 s / 10 s timeouts the waits
would otherwise wait out), not benchmarks."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
import zmq

from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.wire.verifier_link import VerifierAuthError, VerifierLost
from edge_spec_ros.server_process import verifier_server
from edge_spec_ros.wire.codec import decode, encode
from edge_spec_ros.wire.messages import Envelope, Error, ErrorCode, Generate, Open, Tokens
from waiting import free_port, wait_until

SLOW_TQ_S = "5.0"  # a slow verifier: every forward takes 5 s
LONG_TIMEOUT_S = 30.0  # the waits' own timeouts: a loss must be known long before them
LOST_WITHIN_S = 5.0  # a generous functional bound: the heartbeat's is 0.5 + 1.5 s
WAIT_S = 60.0  # conditions on a loaded 2-core machine


def client_at(endpoint: str) -> VerifierClient:
    return VerifierClient(ClientConfig(endpoint=endpoint, open_timeout_s=LONG_TIMEOUT_S,
                                       reply_timeout_s=LONG_TIMEOUT_S))


def test_a_verifier_killed_between_decisions_is_known_dead_without_a_decision():
    with verifier_server() as server, client_at(server.endpoint) as client:
        wait_until(lambda: client.link_state().alive, WAIT_S, "the link to come alive")
        killed = time.monotonic()
        server.proc.kill()
        server.proc.wait()
        wait_until(lambda: client.link_state().dead, WAIT_S, "the link to be known dead")
        assert time.monotonic() - killed < LOST_WITHIN_S
        started = time.monotonic()
        with pytest.raises(VerifierLost, match="connection .* was closed|heartbeat"):
            client.open(Open(input_ids=np.arange(3, dtype=np.int32)))
        assert time.monotonic() - started < 1.0  # nothing waited for


class SilentRouter:
    """A bare ROUTER on 127.0.0.1 that reads every frame and never replies (``answer``: replies every
    frame with an Error, as a server of protocol revision 1 answers a Ping)."""

    def __init__(self, answer: bool = False) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.answer, self.received = answer, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.sock.poll(50):
                continue
            identity, *body = self.sock.recv_multipart()
            self.received += 1
            if self.answer:
                env = decode(body)
                self.sock.send_multipart([identity, *encode(Envelope(env.session, Error(
                    int(ErrorCode.MALFORMED), f"unknown message type {body[0][3]}")))])

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        self.ctx.term()


def assert_dead_and_refusing(client: VerifierClient, error: type | tuple = VerifierLost) -> None:
    wait_until(lambda: client.link_state().dead, WAIT_S, "the link to be known dead")
    state = client.link_state()
    assert state.reason and state.since_heard_s is None  # never heard
    started = time.monotonic()
    with pytest.raises(error):
        client.open(Open(input_ids=np.arange(3, dtype=np.int32)))
    assert time.monotonic() - started < 1.0


def test_a_peer_that_never_answers_is_dead_and_a_waiting_open_fails_at_once():
    router = SilentRouter()
    try:
        with client_at(router.endpoint) as client:
            outcome: dict = {}
            started = time.monotonic()
            opening = threading.Thread(target=lambda: outcome.update(
                error=_raised(client.open, Open(input_ids=np.arange(3, dtype=np.int32)))))
            opening.start()  # before the link is known dead: the open waits, then fails with it
            opening.join(LOST_WITHIN_S + 5)
            assert isinstance(outcome.get("error"), VerifierLost) and time.monotonic() - started < LOST_WITHIN_S
            assert router.received > 0  # it did read the pings and the Open
            assert_dead_and_refusing(client)
    finally:
        router.close()


def test_nothing_listening_is_dead():
    with client_at(f"tcp://127.0.0.1:{free_port()}") as client:
        assert_dead_and_refusing(client)


def test_a_listener_that_accepts_and_drops_is_dead():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    stop = threading.Event()

    def drop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.close()

    dropper = threading.Thread(target=drop, daemon=True)
    dropper.start()
    try:
        with client_at(f"tcp://127.0.0.1:{listener.getsockname()[1]}") as client:
            # a reset during ZeroMQ's greeting is reported as a handshake failed "with no detail", as a
            # CURVE verifier refusing a plain robot is: ZeroMQ cannot tell the two apart
            assert_dead_and_refusing(client, (VerifierLost, VerifierAuthError))
    finally:
        stop.set()
        dropper.join()
        listener.close()


def test_a_black_holed_port_is_dead():
    """A port whose SYNs are dropped, as a firewall or a lost route drops them: the listener's accept
    queue (backlog 0) is full and never taken from, so Linux drops every further SYN; the connection
    neither opens nor is refused, and only the heartbeat's timeout tells."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    fillers = []
    for _ in range(3):  # more than the queue holds: the first take its places, the rest wait on SYNs
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(address)
        fillers.append(filler)
    probe = socket.socket()
    probe.settimeout(0.5)
    try:
        wait_until(lambda: _connected(fillers[0]), WAIT_S, "the accept queue to fill")
        with pytest.raises(TimeoutError):  # black-holed: neither accepted nor refused
            probe.connect(address)
        with client_at(f"tcp://127.0.0.1:{address[1]}") as client:
            started = time.monotonic()
            assert_dead_and_refusing(client)
            assert "heartbeat" in client.link_state().reason and time.monotonic() - started < LOST_WITHIN_S
    finally:
        for sock in (probe, *fillers, listener):
            sock.close()


def test_a_server_that_predates_ping_is_alive():
    router = SilentRouter(answer=True)
    try:
        with client_at(router.endpoint) as client:
            wait_until(lambda: client.counters["ping_errors"] >= 4, WAIT_S, "several pings answered with an Error")
            assert client.link_state().alive and client.counters["link_lost"] == 0
    finally:
        router.close()


def test_a_slow_verifier_is_not_taken_for_dead(text_prompt):
    """A generated token's forward takes 5 s: pings are answered meanwhile by
    the server's I/O thread, the link stays alive and the decision finishes."""
    with verifier_server("--emulate-tq-s", SLOW_TQ_S) as server, client_at(server.endpoint) as client:
        wait_until(lambda: client.link_state().alive, WAIT_S, "the link to come alive")
        sid, _ = client.open(Open(input_ids=text_prompt.input_ids.numpy().astype("int32")))
        started, pongs = time.monotonic(), client.counters["pongs"]
        client.send(sid, Generate(max_new_tokens=1))
        reply = client.receive(sid)
        assert isinstance(reply, Tokens) and reply.is_final
        client.end(sid)
        assert time.monotonic() - started >= float(SLOW_TQ_S) - 0.1  # it was slow
        assert client.counters["pongs"] - pongs >= 4  # answered during the 5 s forward
        assert client.counters["link_lost"] == 0 and client.link_state().alive


def _connected(sock: socket.socket) -> bool:
    try:
        sock.getpeername()
    except OSError:
        return False
    return True


def _raised(fn, *args):
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - returned to the caller
        return exc
    return None
