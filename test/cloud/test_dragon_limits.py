"""DRAGON's ``probs`` arrays are capped per field like the verifier's q: at most one float32
distribution over the session's vocabulary V, checked from the descriptor before anything is
decompressed. A hostile oversized ``probs`` (an LZ4 frame of a few KB declaring megabytes) gets a
clear TOO_LARGE Error from a real server, which keeps serving."""

from __future__ import annotations

import numpy as np
import pytest

from edge_spec_ros.cloud.limits import Limits
from edge_spec_ros.cloud.server import ServerConfig, VerifierServer
from edge_spec_ros.dragon.session import DragonService, dragon_sessions
from edge_spec_ros.dragon.wire import DragonDist, DragonDraft, DragonOpen, DragonOpened
from edge_spec_ros.models.tokenizer import tokenizer_fingerprint
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.wire.codec import WireError, decode, encode
from edge_spec_ros.wire.messages import Envelope, Error, ErrorCode

from raw_peer import RawPeer

SID = bytes(range(16))


def test_the_cap_is_one_distribution_over_the_vocabulary():
    vocab = 1000
    limits = Limits().decode_limits(vocab)
    assert limits.for_field("probs") == 4 * vocab
    ok = decode(encode(Envelope(SID, DragonDraft(0, 0, 1, 0.0, probs=np.full(vocab, 1e-3, np.float32)))), limits)
    assert ok.message.probs.shape == (vocab,)
    for message in (DragonDraft(0, 0, 1, 0.0, probs=np.zeros(vocab + 1, np.float32)),
                    DragonDist(0, 0, np.zeros(vocab + 1, np.float32))):
        with pytest.raises(WireError, match="'probs'.*exceeds the limit of 4000") as info:
            decode(encode(Envelope(SID, message)), limits)
        assert info.value.code == ErrorCode.TOO_LARGE
    with pytest.raises(WireError, match="must be float32"):  # the dtype is the protocol's
        decode(encode(Envelope(SID, DragonDist(0, 0, np.zeros(8, np.float16)))), limits)


def test_a_hostile_oversized_probs_gets_a_clear_error_and_the_server_keeps_serving(target_model, encoder,
                                                                                    tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "room.md").write_text("The red chair stands by the window.")
    verifier = EarlyExitVerifier(target_model)
    vocab = verifier.stack.vocab_size
    server = VerifierServer(verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*", idle_exit_s=60.0,
                                                            max_requests=200),
                            dragon_sessions(DragonService(verifier.stack, encoder, docs)))
    endpoint = server.start()
    peer = RawPeer(endpoint)
    try:
        fingerprint = tokenizer_fingerprint(encoder.tokenizer)
        opened = peer.request(encode(Envelope(SID, DragonOpen(query="where is the red chair", max_new_tokens=2,
                                                              tokenizer_fingerprint=fingerprint,
                                                              aggregator="cloud", policy="cloud"))))
        assert isinstance(opened, DragonOpened) and opened.vocab_size == vocab
        declared = 16 * 1024 * 1024 // 4  # 16 MB of zeros: a few KB once LZ4-compressed
        for message in (DragonDraft(0, 0, 1, 0.0, probs=np.zeros(declared, np.float32)),
                        DragonDist(0, 0, np.zeros(declared, np.float32)),
                        DragonDraft(0, 0, 1, 0.0, probs=np.zeros(vocab + 1, np.float32))):
            frames = encode(Envelope(SID, message))
            assert sum(map(len, frames)) < 200_000 or message.probs.size == vocab + 1
            reply = peer.request(frames)
            assert isinstance(reply, Error) and reply.code == ErrorCode.TOO_LARGE, reply
            assert "'probs'" in reply.message and f"limit of {4 * vocab}" in reply.message, reply.message
        assert server.stats()["too_large"] >= 3
        # the server keeps serving: a new decision opens
        again = peer.request(encode(Envelope(bytes(16), DragonOpen(query="where is the door", max_new_tokens=2,
                                                                   tokenizer_fingerprint=fingerprint))))
        assert isinstance(again, DragonOpened)
    finally:
        peer.close()
        server.stop()
