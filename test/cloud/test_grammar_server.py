"""Grammar-constrained decoding against a real verifier process on 127.0.0.1 (the embedded pair): greedy
SD, FSD and DSSD under the grammar equal the constrained verifier's own greedy output; what the server
refuses (an unknown, too large or malformed grammar, a drafted token the grammar forbids) is an Error
with a code and a reason, and the server goes on serving (no exception in its worker)."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from edge_spec_ros.decoding.reference import DecodeConfig
from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.models.embedded import embedded_pair
from edge_spec_ros.models.grammar import book_for
from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.grammar import parse_action
from edge_spec_ros.wire.codec import encode
from edge_spec_ros.wire.messages import (
    DraftBlock, Envelope, Error, ErrorCode, ExitResult, Open, Opened, Stats, StatsReply,
)

from constrained_reference import constrained_autoregressive
from raw_peer import RawPeer

GRAMMAR = "action-brief"


@pytest.fixture(scope="module")
def pair():
    return embedded_pair()  # the same weights the server process builds


@pytest.fixture(scope="module")
def decision(pair):
    """(prompt, config, book, the constrained verifier's greedy reply)."""
    prompt = pair.prompt_encoder().encode("find the silver bottle", None)
    config = DecodeConfig(max_new_tokens=120, gamma=4, stop_tokens=(pair.tokenizer.eos_token_id,))
    book = book_for(pair.tokenizer, pair.verifier.stack.vocab_size)
    return prompt, config, book, constrained_autoregressive(pair.verifier, prompt, book.get(GRAMMAR), config)


@pytest.mark.parametrize("mode", ["ar", "sd", "fsd", "dssd"])
def test_greedy_over_the_network_equals_the_constrained_verifiers_greedy(server_endpoint, pair, decision, mode):
    prompt, config, book, greedy = decision
    assert parse_action(pair.tokenizer.decode(greedy), NavConfig()).ok
    with VerifierClient(ClientConfig(endpoint=server_endpoint)) as client:
        decoder = EdgeDecoder(client, pair.drafter, EdgeConfig(decode=config, threads=2, grammar=GRAMMAR),
                              grammars=book)
        assert decoder.decode(mode, prompt, b"").tokens == greedy


def request(peer: RawPeer, sid: bytes, msg) -> object:
    peer.send_raw(encode(Envelope(sid, msg)))
    return peer.receive()


def test_refusals_are_errors_with_a_code_and_a_reason_and_the_server_goes_on(server_endpoint, pair, decision):
    prompt, config, book, greedy = decision
    ids = prompt.input_ids.numpy().astype(np.int32)
    peer = RawPeer(server_endpoint)
    try:
        cases = [("walk", ErrorCode.GRAMMAR, "unknown grammar"),
                 ("root ::= " + "x" * 20000, ErrorCode.TOO_LARGE, "Open.grammar"),
                 ('root ::= ("a" | ', ErrorCode.GRAMMAR, "does not compile")]
        for grammar, code, words in cases:
            reply = request(peer, uuid.uuid4().bytes, Open(input_ids=ids, grammar=grammar))
            assert isinstance(reply, Error) and reply.code == code and words in reply.message, reply
        sid = uuid.uuid4().bytes
        assert isinstance(request(peer, sid, Open(input_ids=ids, grammar=GRAMMAR, want_exits=False)), Opened)
        colon = pair.tokenizer.convert_tokens_to_ids(":")
        assert pair.tokenizer.decode(greedy[:2]) == "Reasoning:"  # a colon is allowed there, not after the prefix
        bad = DraftBlock(round=0, position=len(ids), tokens=np.array([*greedy[:3], colon], dtype=np.int32))
        reply = request(peer, sid, bad)
        assert isinstance(reply, Error) and reply.code == ErrorCode.GRAMMAR and "draft token 3" in reply.message
        good = DraftBlock(round=1, position=len(ids), tokens=np.array(greedy[:2], dtype=np.int32))
        reply = request(peer, sid, good)
        assert isinstance(reply, ExitResult) and [int(t) for t in reply.tokens] == greedy[:3]
        stats = request(peer, uuid.uuid4().bytes, Stats())
        assert isinstance(stats, StatsReply)
        counters = json.loads(stats.counters)
        assert not any(v for k, v in counters.items() if "internal" in k.lower() and isinstance(v, (int, float)))
    finally:
        peer.close()


def test_batched_verification_under_the_grammar_equals_the_constrained_verifiers_greedy(pair, decision):
    """Robots of five modes at once against a server that batches their rounds into shared forwards
    (each session masks its own rows): each gets the constrained verifier's greedy reply."""
    import threading

    from edge_spec_ros.cloud.server import ServerConfig, VerifierServer

    prompt, config, book, greedy = decision
    server = VerifierServer(pair.verifier, pair.prompt_encoder(),
                            ServerConfig(bind="tcp://127.0.0.1:*", max_batch=8, emulate_tq_s=0.03))
    endpoint = server.start()
    outputs: dict[str, list[int]] = {}
    errors: list[str] = []

    def robot(mode: str) -> None:
        try:
            edge = EdgeConfig(decode=config, threads=1, grammar=GRAMMAR)
            with VerifierClient(ClientConfig(endpoint=endpoint, reply_timeout_s=60.0, open_timeout_s=60.0)) as c, \
                    EdgeDecoder(c, pair.drafter, edge, grammars=book) as decoder:
                outputs[mode] = decoder.decode(mode, prompt, b"").tokens
        except Exception as exc:  # reported below
            errors.append(f"{mode}: {exc!r}")

    try:
        threads = [threading.Thread(target=robot, args=(m,)) for m in ("sd", "fsd", "dssd", "tkslt", "pico")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        stats = server.stats()
    finally:
        server.stop()
    assert not errors, errors
    assert outputs == {m: greedy for m in ("sd", "fsd", "dssd", "tkslt", "pico")}
    assert stats["batches"] > 0 and stats["batched_rounds"] / stats["batches"] > 1.2, stats
    assert stats.get("internal_error", 0) == 0
