"""``serve --dragon-model SOURCE``: DRAGON decisions answered by another LM than the verifier's. The
server's caps are sized by the verifier's vocabulary; a DragonService the server hosts
(``dragon_sessions``) makes the cap on DRAGON's ``probs`` one float32 distribution over the
service's vocabulary (checked before decompression) and leaves every other field's cap as it was.
(Through a real ``serve`` process with SmolLM2: test/nodes/test_dragon_smollm2.py, slow.)"""

from __future__ import annotations

from types import SimpleNamespace

from edge_spec_ros import cli
from edge_spec_ros.cloud.server import ServerConfig, VerifierServer
from edge_spec_ros.dragon.session import dragon_caps, dragon_sessions
from edge_spec_ros.dragon.wire import DragonOpen
from edge_spec_ros.models.verifier import EarlyExitVerifier


def test_the_probs_cap_follows_the_service_vocabulary(target_model, encoder):
    verifier = EarlyExitVerifier(target_model)
    plain = VerifierServer(verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*"))
    before = dict(plain.decode_limits.field_bytes)
    assert before["probs"] == 4 * plain.vocab
    assert dragon_sessions(None)[DragonOpen].caps(plain.decode_limits, plain.max_message_bytes) == \
        (plain.decode_limits, plain.max_message_bytes)  # refusing DRAGON changes no cap
    service = SimpleNamespace(stack=SimpleNamespace(vocab_size=49152))
    server = VerifierServer(verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*"), dragon_sessions(service))
    after = server.decode_limits
    assert server.kinds[DragonOpen].service is service
    assert after.for_field("probs") == 4 * 49152 and server.max_message_bytes >= 4 * 49152
    assert {k: v for k, v in after.field_bytes.items() if k != "probs"} == \
        {k: v for k, v in before.items() if k != "probs"}
    assert after.max_total_bytes >= 4 * 49152
    # a smaller vocabulary never lowers a cap
    assert dragon_caps(after, server.max_message_bytes, 8) == (after, server.max_message_bytes)


def test_serve_refuses_a_dragon_model_without_documents(capsys):
    assert cli.main(["serve", "--dragon-model", "smollm2"]) == 2
    assert "--dragon-model answers DRAGON decisions over --documents DIR" in capsys.readouterr().err
