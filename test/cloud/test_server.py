"""The verifier server process survives bad input, answers with clear errors and counts everything."""

from __future__ import annotations

import json
import time
import uuid

import numpy as np
import pytest
import zmq

from edge_spec_ros.edge.client import (
    ClientConfig, VerifierAuthError, VerifierClient, VerifierError, VerifierTimeout,
)
from edge_spec_ros.wire.codec import HEADER, MAGIC, encode
from edge_spec_ros.wire.curve import client_keys, make_keys
from edge_spec_ros.wire.messages import (
    DraftBlock, Envelope, Error, ErrorCode, ExitResult, Open, Opened, Stats, StatsReply,
)

from raw_peer import RawPeer

AUTH_TIMEOUT_S = 8.0  # a refused handshake must be reported well before this


class RawRobot(RawPeer):
    def stats(self) -> dict:
        reply = self.request(encode(Envelope(bytes(16), Stats())))
        assert isinstance(reply, StatsReply)
        return json.loads(reply.counters)


@pytest.fixture
def robot(server_endpoint):
    r = RawRobot(server_endpoint)
    yield r
    r.close()


def test_garbage_never_crashes_the_server(robot, server_endpoint, text_prompt):
    before = robot.stats()
    rng = np.random.default_rng(0)
    garbage = [[b""], [b"hello"], [rng.bytes(100)], [MAGIC + b"\x01\x03" + bytes(16) + b"{not json"],
               [MAGIC + b"\x01\x63" + bytes(16) + b"{}"], [rng.bytes(40), rng.bytes(2000)]]
    for frames in garbage * 20:
        robot.send_raw(frames)
    # every frame set is answered with an error reply
    for _ in range(len(garbage) * 20):
        msg = robot.receive()
        assert isinstance(msg, Error) and msg.code == ErrorCode.MALFORMED and msg.message
    after = robot.stats()
    assert after["malformed"] - before.get("malformed", 0) == len(garbage) * 20
    # and it still serves a real decision
    with VerifierClient(ClientConfig(endpoint=server_endpoint)) as client:
        _, opened = client.open(Open(input_ids=text_prompt.input_ids.numpy().astype(np.int32)))
        assert isinstance(opened, Opened) and opened.num_layers == 6


def test_unknown_version_gets_a_clear_error(robot):
    frames = encode(Envelope(uuid.uuid4().bytes, Stats()))
    magic, _, mtype, session = HEADER.unpack_from(frames[0])
    frames[0] = HEADER.pack(magic, 9, mtype, session) + frames[0][HEADER.size:]
    reply = robot.request(frames)
    assert isinstance(reply, Error) and reply.code == ErrorCode.UNSUPPORTED_VERSION
    assert "version 9" in reply.message
    assert robot.stats()["unsupported_version"] >= 1


def test_protocol_errors(robot, prompts, text_prompt):
    sid = uuid.uuid4().bytes
    draft = DraftBlock(round=0, position=len(text_prompt), tokens=np.array([20, 21], np.int32))
    reply = robot.request(encode(Envelope(sid, draft)))
    assert isinstance(reply, Error) and reply.code == ErrorCode.UNKNOWN_SESSION

    ids = text_prompt.input_ids.numpy().astype(np.int32)
    assert isinstance(robot.request(encode(Envelope(sid, Open(input_ids=ids)))), Opened)
    late = DraftBlock(round=3, position=len(ids), tokens=np.array([20, 21], np.int32))
    reply = robot.request(encode(Envelope(sid, late)))
    assert isinstance(reply, Error) and reply.code == ErrorCode.OUT_OF_ORDER and reply.round == 3

    out_of_vocab = DraftBlock(round=0, position=len(ids), tokens=np.array([20, 10**6], np.int32))
    reply = robot.request(encode(Envelope(sid, out_of_vocab)))
    assert isinstance(reply, Error) and reply.code == ErrorCode.BAD_REQUEST and "DraftBlock.tokens" in reply.message

    wrong_position = DraftBlock(round=0, position=5, tokens=np.array([20, 21], np.int32))
    reply = robot.request(encode(Envelope(sid, wrong_position)))
    assert isinstance(reply, Error) and reply.code == ErrorCode.BAD_REQUEST and "position" in reply.message

    # the session is still usable: round 1 is next (round 0 was consumed by the bad position)
    good = DraftBlock(round=1, position=len(ids), tokens=np.array([20, 21], np.int32))
    robot.send_raw(encode(Envelope(sid, good)))
    final = None
    while final is None:
        msg = robot.receive()
        assert isinstance(msg, ExitResult) and msg.round == 1
        final = msg if msg.is_final else None
    assert final.layer == 6 and len(final.tokens) == final.accepted + 1

    bad_image = Open(input_ids=prompts[0].input_ids.numpy().astype(np.int32), image=b"not an image")
    reply = robot.request(encode(Envelope(uuid.uuid4().bytes, bad_image)))
    assert isinstance(reply, Error) and reply.code == ErrorCode.BAD_REQUEST and "image" in reply.message
    counters = robot.stats()
    assert counters["unknown_session"] >= 1 and counters["out_of_order"] >= 1 and counters["bad_request"] >= 3


def test_sampled_draft_without_q_is_refused(server_endpoint, text_prompt):
    with VerifierClient(ClientConfig(endpoint=server_endpoint)) as client:
        ids = text_prompt.input_ids.numpy().astype(np.int32)
        sid, _ = client.open(Open(input_ids=ids, temperature=0.8))
        client.send(sid, DraftBlock(round=0, position=len(ids), tokens=np.array([20], np.int32)))
        with pytest.raises(VerifierError, match="BAD_REQUEST.*needs exactly one of q"):
            client.receive(sid)


def test_dead_server_gives_a_clear_error_within_the_timeout(text_prompt):
    with zmq.Context() as ctx, ctx.socket(zmq.REP) as silent:
        port = silent.bind_to_random_port("tcp://127.0.0.1")  # accepts connections, never answers
        config = ClientConfig(endpoint=f"tcp://127.0.0.1:{port}", open_timeout_s=1.0)
        with VerifierClient(config) as client:
            t0 = time.monotonic()
            with pytest.raises(VerifierTimeout, match="no reply from the verifier"):
                client.open(Open(input_ids=text_prompt.input_ids.numpy().astype(np.int32)))
            assert time.monotonic() - t0 < 3.0


def test_curve_rejects_an_unauthorised_robot(tmp_path, start_server, text_prompt):
    make_keys(tmp_path / "keys", ["robot"])
    make_keys(tmp_path / "intruder", ["robot"])  # a valid key pair the server never authorised
    ids = text_prompt.input_ids.numpy().astype(np.int32)
    with start_server("--curve-keys", str(tmp_path / "keys")) as endpoint:
        good = client_keys(tmp_path / "keys" / "robot.key_secret", tmp_path / "keys" / "server.key")
        with VerifierClient(ClientConfig(endpoint=endpoint, curve=good)) as client:
            assert isinstance(client.open(Open(input_ids=ids))[1], Opened)
        # refused handshakes are reported as such, well before the open timeout
        bad = client_keys(tmp_path / "intruder" / "robot.key_secret", tmp_path / "keys" / "server.key")
        with VerifierClient(ClientConfig(endpoint=endpoint, curve=bad, open_timeout_s=AUTH_TIMEOUT_S)) as client:
            t0 = time.monotonic()
            with pytest.raises(VerifierAuthError, match="refused this robot's CURVE key"):
                client.open(Open(input_ids=ids))
            assert time.monotonic() - t0 < AUTH_TIMEOUT_S
        # the robot holds another server's public key: reported as a failed authentication of the verifier
        wrong = client_keys(tmp_path / "keys" / "robot.key_secret", tmp_path / "intruder" / "server.key")
        with VerifierClient(ClientConfig(endpoint=endpoint, curve=wrong, open_timeout_s=AUTH_TIMEOUT_S)) as client:
            t0 = time.monotonic()
            with pytest.raises(VerifierAuthError, match="verifier could not be authenticated"):
                client.open(Open(input_ids=ids))
            assert time.monotonic() - t0 < AUTH_TIMEOUT_S
        plain = ClientConfig(endpoint=endpoint, open_timeout_s=AUTH_TIMEOUT_S)  # no encryption at all
        with VerifierClient(plain) as client:
            with pytest.raises(VerifierAuthError, match="handshake failed"):
                client.open(Open(input_ids=ids))


def test_idle_sessions_expire(start_server, text_prompt):
    """A session idle past --session-timeout is dropped; its next draft is an unknown session."""
    ids = text_prompt.input_ids.numpy().astype(np.int32)
    with start_server("--session-timeout", "1") as endpoint, \
            VerifierClient(ClientConfig(endpoint=endpoint)) as client:
        sid, _ = client.open(Open(input_ids=ids))
        time.sleep(2.5)  # timeout 1 s, housekeeping every 0.5 s
        client.send(sid, DraftBlock(round=0, position=len(ids), tokens=np.array([20], np.int32)))
        with pytest.raises(VerifierError, match="UNKNOWN_SESSION"):
            client.receive(sid)
