"""DRAGON through the real verifier server (cloud/server.py routing to dragon/session.DragonSession) over
ZeroMQ on 127.0.0.1: the robot's RobotDragon with dragon/robot.ZmqDragonLink gives DRDG/TW's tokens
(greedy and sampled, either first aggregator, both payloads); refusals come back as clear errors,
among them a cloud whose tokenizer differs from the robot's at the same vocabulary size. Small models
with the project's tokenizer; servers stop by themselves (idle exit, request cap)."""

from __future__ import annotations

import contextlib

import pytest

from edge_spec_ros import warm_start
from edge_spec_ros.cloud.server import ServerConfig, VerifierServer
from edge_spec_ros.dragon.aggregation import drdg_tw
from edge_spec_ros.dragon.document_lm import build_side, chat_prompt_ids
from edge_spec_ros.dragon.peer import wire_precision
from edge_spec_ros.dragon.robot import DragonConfig, DragonLinkError, RobotDragon, ZmqDragonLink
from edge_spec_ros.dragon.session import DragonService, dragon_sessions
from edge_spec_ros.dragon.stores import DocumentStore, RobotMemory
from edge_spec_ros.dragon.wire import DragonOpen
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.models.tiny import DRAFTER_SPEC, build_tiny_qwen2vl
from edge_spec_ros.models.tokenizer import tokenizer_fingerprint
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.wire.messages import ErrorCode

from tokenizer_variants import swapped_tokenizer

QUERY = "where is the red chair"


@contextlib.contextmanager
def server(verifier, encoder, documents=""):
    service = DragonService(verifier.stack, encoder, documents) if documents else None  # none: DRAGON refused
    srv = VerifierServer(verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*", idle_exit_s=60.0,
                                                         max_requests=5000), dragon_sessions(service))
    endpoint = srv.start()
    try:
        yield endpoint
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def setup(target_model, tokenizer, encoder, tmp_path_factory):
    root = tmp_path_factory.mktemp("dragon_server")
    (root / "docs").mkdir()
    (root / "docs" / "house.md").write_text("The red chair is a classic piece of furniture.\n\n"
                                            "Chairs stand near tables; a red chair is easy to see.\n\n"
                                            "Windows let light in.")
    memory = RobotMemory(root / "memory")
    memory.add("observation", "I saw the red chair in the kitchen", (1.0, 2.0, 0.0), time=1.0)
    memory.add("note", "the chair in the hall is blue", (4.0, 0.0, 0.0), time=2.0)
    verifier = EarlyExitVerifier(target_model)
    robot_stack = DecoderStack(build_tiny_qwen2vl(DRAFTER_SPEC, tokenizer, seed=1))
    assert robot_stack.vocab_size == verifier.stack.vocab_size
    return {"root": root, "memory": memory, "verifier": verifier, "robot": robot_stack,
            "prompt_ids": chat_prompt_ids(encoder), "decode_text": tokenizer.decode,
            "fingerprint": tokenizer_fingerprint(tokenizer)}


def robot_dragon(s, config, memory=None):
    """The robot's decoder of ``s`` (the test's tokenizer on both sides unless a test says otherwise)."""
    return RobotDragon(s["robot"], s["memory"] if memory is None else memory, s["prompt_ids"], s["decode_text"],
                       config, tokenizer_fingerprint=s["fingerprint"])


def dragon_open(s, **kw) -> DragonOpen:
    return DragonOpen(query=QUERY, tokenizer_fingerprint=s["fingerprint"], **kw)


def reference(s, n, temperature, seed):
    sampling = SamplingConfig(temperature)
    store = DocumentStore(s["root"] / "docs")
    mem = s["memory"]
    rs = build_side(s["robot"], mem, mem.top_k(QUERY, 2), QUERY, s["prompt_ids"], s["decode_text"], sampling)
    cs = build_side(s["verifier"].stack, store, store.top_k(QUERY, 2), QUERY, s["prompt_ids"], s["decode_text"],
                    sampling)
    return drdg_tw(wire_precision(rs.next_distribution), wire_precision(cs.next_distribution), [], n,
                   PositionalRNG(seed), sampling)


def test_dragon_through_the_server_equals_drdg_tw(setup, encoder):
    s, n = setup, 12
    with server(s["verifier"], encoder, s["root"] / "docs") as endpoint:
        for case, (temperature, aggregator, payload) in enumerate(
                [(0.0, "robot", "full"), (0.0, "cloud", "on_demand"), (1.0, "cloud", "full"),
                 (1.0, "robot", "on_demand")]):
            config = DragonConfig(max_new_tokens=n, temperature=temperature, seed=case, aggregator=aggregator,
                                  payload=payload, policy="dragon", timeout_s=30.0)
            robot = robot_dragon(s, config)
            link = ZmqDragonLink(endpoint, open_timeout_s=60.0)
            out = robot.decode(QUERY, link)
            ref = reference(s, n, temperature, case)
            assert out.tokens == ref.tokens, (case, out.tokens, ref.tokens)
            assert out.trace.accept_robot == ref.accept_robot and out.trace.accept_cloud == ref.accept_cloud
            assert link.log.by_type.get("DragonTarget", 0) > 0 and link.log.by_type.get("DragonDraft", 0) > 0


def test_refusals(setup, encoder):
    s = setup
    with server(s["verifier"], encoder) as endpoint:  # no --documents
        link = ZmqDragonLink(endpoint, open_timeout_s=30.0)
        with pytest.raises(DragonLinkError, match="no DRAGON documents") as info:
            link.open(dragon_open(s, max_new_tokens=4))
        assert info.value.code == ErrorCode.BAD_REQUEST
        link.close()
    with server(s["verifier"], encoder, s["root"] / "docs") as endpoint:
        link = ZmqDragonLink(endpoint, open_timeout_s=30.0)
        with pytest.raises(DragonLinkError, match="top_k") as info:
            link.open(dragon_open(s, max_new_tokens=4, top_k=1000))
        assert info.value.code == ErrorCode.BAD_REQUEST
        link.close()


def test_a_cloud_with_another_tokenizer_of_the_same_size_refuses_the_open(setup, encoder, tmp_path):
    """The cloud's tokenizer is the robot's with two token strings swapped (same vocabulary size, same
    model): the server refuses the robot's DragonOpen with BAD_REQUEST naming both fingerprints and
    keeps serving; with the robot's tokenizer the same server's open succeeds and names it. An open
    without a fingerprint (empty, protocol 2) and a protocol-1 open are refused with their reasons;
    a fingerprint that is no string is MALFORMED naming the field."""
    import json
    import re

    from edge_spec_ros.dragon.wire import DragonOpened
    from edge_spec_ros.wire.codec import HEADER, encode
    from edge_spec_ros.wire.messages import Envelope, Error

    from raw_peer import RawPeer

    s = setup
    other = swapped_tokenizer(tmp_path / "swapped")
    assert len(other) == len(encoder.tokenizer) and s["verifier"].stack.vocab_size == s["robot"].vocab_size
    theirs = tokenizer_fingerprint(other)
    assert theirs != s["fingerprint"]
    with server(s["verifier"], PromptEncoder(other), s["root"] / "docs") as endpoint:
        link = ZmqDragonLink(endpoint, open_timeout_s=30.0)
        with pytest.raises(DragonLinkError, match=f"DRAGON: the tokenizers differ: the robot's tokenizer fingerprint "
                                                  f"{s['fingerprint']} is not the cloud's {theirs}") as info:
            robot_dragon(s, DragonConfig(max_new_tokens=4)).decode(QUERY, link)
        assert info.value.code == ErrorCode.BAD_REQUEST
        peer = RawPeer(endpoint)
        try:
            opened = peer.request(encode(Envelope(bytes(range(16)), DragonOpen(
                query=QUERY, max_new_tokens=2, aggregator="cloud", policy="cloud", tokenizer_fingerprint=theirs))))
            assert isinstance(opened, DragonOpened) and opened.tokenizer_fingerprint == theirs  # it keeps serving
        finally:
            peer.close()
    with server(s["verifier"], encoder, s["root"] / "docs") as endpoint:
        link = ZmqDragonLink(endpoint, open_timeout_s=30.0)
        try:
            opened = link.open(dragon_open(s, max_new_tokens=2))
            assert opened.tokenizer_fingerprint == s["fingerprint"] and opened.vocab_size == s["robot"].vocab_size
        finally:
            link.close()
        peer = RawPeer(endpoint)
        try:
            for sid, (msg, code, reason) in enumerate([
                    (DragonOpen(query=QUERY, max_new_tokens=2), ErrorCode.BAD_REQUEST,
                     "DRAGON: DragonOpen.tokenizer_fingerprint must be 32 lowercase hex digits"),
                    (DragonOpen(query=QUERY, max_new_tokens=2, protocol=1), ErrorCode.BAD_REQUEST,
                     r"DRAGON: DRAGON protocol 1 \(this side speaks 2\)"),
                    (dragon_open(s, max_new_tokens=2), ErrorCode.MALFORMED,
                     "DragonOpen.tokenizer_fingerprint: int does not fit")]):
                frames = encode(Envelope(bytes([sid + 1]) * 16, msg))
                if code == ErrorCode.MALFORMED:
                    meta = json.loads(frames[0][HEADER.size:])
                    meta["tokenizer_fingerprint"] = 7
                    frames[0] = frames[0][:HEADER.size] + json.dumps(meta).encode()
                reply = peer.request(frames)
                assert isinstance(reply, Error) and reply.code == code, reply
                assert re.search(reason, reply.message), reply.message
        finally:
            peer.close()


def test_misplaced_dragon_messages_get_errors_and_the_server_keeps_serving(setup, encoder):
    """A DRAGON draft with no session: UNKNOWN_SESSION; a verifier request on a DRAGON session and a
    target sent to the cloud while the cloud aggregates: BAD_REQUEST; a later decision still decodes."""
    import numpy as np

    from edge_spec_ros.dragon.wire import DragonOpened, DragonTarget
    from edge_spec_ros.wire.codec import encode
    from edge_spec_ros.wire.messages import DraftBlock, Envelope, Error

    from raw_peer import RawPeer

    s = setup
    sid = bytes(range(16))
    with server(s["verifier"], encoder, s["root"] / "docs") as endpoint:
        peer = RawPeer(endpoint)
        try:
            reply = peer.request(encode(Envelope(sid, DragonTarget(0, 1, True, True))))
            assert isinstance(reply, Error) and reply.code == ErrorCode.UNKNOWN_SESSION
            opened = peer.request(encode(Envelope(sid, dragon_open(s, max_new_tokens=3, aggregator="cloud",
                                                                   policy="cloud"))))
            assert isinstance(opened, DragonOpened)
            peer.send_raw(encode(Envelope(sid, DraftBlock(0, 0, np.array([1], dtype=np.int32)))))
            peer.send_raw(encode(Envelope(sid, DragonTarget(0, 1, True, True))))  # the cloud aggregates
            errors = []
            for _ in range(20):
                msg = peer.receive()
                if isinstance(msg, Error):
                    errors.append(msg)
                    if len(errors) == 2:
                        break
            assert [e.code for e in errors] == [ErrorCode.BAD_REQUEST] * 2
            assert "does not belong" in errors[0].message and "sent to the aggregator" in errors[1].message
        finally:
            peer.close()
        out = robot_dragon(s, DragonConfig(max_new_tokens=4)).decode(QUERY, ZmqDragonLink(endpoint))
        assert len(out.tokens) == 4


def test_serve_documents_option(start_server, tmp_path):
    """``edge-spec-ros serve --documents DIR`` (the shipped pair's verifier in its own process) serves a
    DRAGON decision of the shipped drafter over the robot's memory: DRDG/TW's greedy tokens; a
    missing folder stops serve at once with an error."""
    import sys

    from edge_spec_ros.models.pairs import load_pair

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "room.md").write_text("The red chair stands by the window.\n\nThe door is on the left of the chair.")
    memory = RobotMemory(tmp_path / "memory")
    memory.add("observation", "a red chair two metres ahead", (0.5, 0.0, 0.0), time=3.0)
    memory.add("instruction", "go to the red chair", (0.0, 0.0, 0.0), time=1.0)
    pair = load_pair("embedded")
    encoder = pair.prompt_encoder()
    s = {"root": tmp_path, "memory": memory, "verifier": pair.verifier, "robot": pair.drafter.stack,
         "prompt_ids": chat_prompt_ids(encoder), "decode_text": pair.tokenizer.decode,
         "fingerprint": tokenizer_fingerprint(pair.tokenizer)}
    n = 8
    with start_server("--documents", str(docs), "--max-requests", "2000") as endpoint:
        out = robot_dragon(s, DragonConfig(max_new_tokens=n, aggregator="cloud")).decode(QUERY,
                                                                                         ZmqDragonLink(endpoint))
    assert out.tokens == reference(s, n, 0.0, 0).tokens
    done = warm_start.run([sys.executable, "-m", "edge_spec_ros.cli", "serve", "--documents", str(tmp_path / "none"),
                           "--bind", "tcp://127.0.0.1:*", "--idle-exit", "5"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "is not a folder" in done.stderr + done.stdout


def test_fuzzed_dragon_frames_never_break_the_server(setup, encoder):
    """400 DRAGON frame sets (valid messages of every DRAGON type for a few session ids, mutated by
    wire/fuzz.mutate 0-3 times) on one server: no INTERNAL error, and a decision afterwards decodes."""
    import json
    import random
    import time

    import numpy as np

    from edge_spec_ros.dragon.wire import DragonDist, DragonDistRequest, DragonDraft, DragonTarget
    from edge_spec_ros.wire.codec import encode
    from edge_spec_ros.wire.fuzz import mutate
    from edge_spec_ros.wire.messages import Close, Envelope, Stats, StatsReply

    from raw_peer import RawPeer

    s = setup
    v = s["verifier"].stack.vocab_size
    rng = random.Random(7)
    probs = np.full(v, 1.0 / v, dtype=np.float32)
    sessions = [bytes([i]) * 16 for i in range(4)]

    def sample():
        t = rng.randrange(3)
        return rng.choice([
            dragon_open(s, max_new_tokens=rng.randint(1, 6), temperature=rng.choice([0.0, 1.0]),
                        aggregator=rng.choice(["robot", "cloud"]), payload=rng.choice(["full", "on_demand"]),
                       policy=rng.choice(["dragon", "robot", "cloud"]), max_queue=rng.randint(1, 3)),
            DragonDraft(t, 0, rng.randrange(v), 0.5, probs=probs, decode_s=0.01, echo_stamp=1.0),
            DragonDraft(t, 0, rng.randrange(v), 0.5, p_token=0.25),
            DragonTarget(t, rng.randrange(v), rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.3),
            DragonDistRequest(t, 0, rng.choice([-1, rng.randrange(v)])),
            DragonDist(t, 0, probs), Close()])

    with server(s["verifier"], encoder, s["root"] / "docs") as endpoint:
        peer = RawPeer(endpoint, linger_ms=10_000)
        for _ in range(400):
            frames = encode(Envelope(rng.choice(sessions), sample()))
            for _ in range(rng.choice([0, 1, 1, 2, 3])):
                frames = mutate(rng, frames) if frames else frames
            if frames:
                peer.send_raw(frames)
        # the server reads a connection in order: its answer to a last Stats says every frame before it was
        # read. Closing at once lost a varying share (frames the server had not read yet, beyond its
        # receive queue, go with the connection), and with them the counters' bounds below.
        peer.send_raw(encode(Envelope(bytes(16), Stats())))
        while not isinstance(peer.receive(), StatsReply):
            pass
        peer.close()
        time.sleep(1.0)  # the sessions' jobs run on the workers
        out = robot_dragon(s, DragonConfig(max_new_tokens=4)).decode(QUERY, ZmqDragonLink(endpoint))
        assert len(out.tokens) == 4
        stats = RawPeer(endpoint)
        try:
            reply = stats.request(encode(Envelope(bytes(16), Stats())))
        finally:
            stats.close()
        assert isinstance(reply, StatsReply)
        counters = json.loads(reply.counters)
        assert counters.get("internal_error", 0) == 0, counters
        assert counters.get("msg_DragonOpen", 0) > 10 and counters.get("malformed", 0) > 100, counters
        assert counters.get("sessions_opened", 0) > 5 and counters.get("bad_request", 0) > 0, counters


def test_an_emulated_link_both_ways_changes_timing_not_tokens(setup, encoder):
    """DragonOpen's emulated downlink (the server's outbox) and ZmqDragonLink's emulated uplink,
    15 ms ± 3 ms each way: the tokens of the plain link; the first token waits for the round trip."""
    import dataclasses

    from edge_spec_ros.wire.emulator import LinkShape

    s = setup
    config = DragonConfig(max_new_tokens=8, temperature=1.0, seed=3, aggregator="robot", policy="robot")
    slow = dataclasses.replace(config, down_delay_s=0.015, down_jitter_s=0.003)
    with server(s["verifier"], encoder, s["root"] / "docs") as endpoint:
        plain = robot_dragon(s, config).decode(QUERY, ZmqDragonLink(endpoint))
        shaped = robot_dragon(s, slow).decode(QUERY, ZmqDragonLink(endpoint, uplink=LinkShape(0.015, 0.003)))
    assert shaped.tokens == plain.tokens == reference(s, 8, 1.0, 3).tokens
    assert shaped.first_token_s >= 0.015 * 2  # the open's round trip alone takes 30 ms
