"""The verifier's memory per open session at the published widths: a server process (``edge-spec-ros serve``
on 127.0.0.1) and robots' sessions held open at once, each with a camera frame + instruction prefilled and
one sampled FSD round verified (γ draft tokens with their dense q of γ x V up, every exit's verdict down).

    .venv/bin/python scripts/verifier_sessions_memory.py                  # 7B shape at 2 layers: 1, 4, 16 sessions
    .venv/bin/python scripts/verifier_sessions_memory.py --verifier qwen2-vl-7b-shape:layers=1 --sessions 1,2

Prints Markdown: the server's RSS (VmRSS) and peak (VmHWM) before any session and once each count of
sessions is open and has verified its round, the RSS each session added on average, and the KV cache a
session holds by arithmetic (layers x 2 x KV heads x head width x 4 bytes x tokens) for comparison.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.models.prompt import decode_image, encode_image
from edge_spec_ros.server_process import verifier_server
from edge_spec_ros.wire.messages import DraftBlock, ExitResult, Open

GAMMA = 4
IDLE_EXIT_S = 600.0  # the server stops by itself this long after its last request
REPLY_TIMEOUT_S = 300.0  # a prefill or a round at 7B width on two CPU cores takes seconds


def text_config(source: str):
    """The text model's configuration of a shape source (models/real_shapes.py)."""
    from edge_spec_ros.models.real_shapes import parse_shape, shape_config

    return shape_config(parse_shape(source)).text_config


def kv_bytes_per_token(text) -> int:
    """Float32 KV bytes per token: layers x 2 (keys, values) x KV heads x head width x 4."""
    return text.num_hidden_layers * 2 * text.num_key_value_heads * (text.hidden_size // text.num_attention_heads) * 4


def open_and_verify(client: VerifierClient, request: Open, vocab: int, rng: np.random.Generator) -> bytes:
    """One session: the Open (prefill), then a sampled round of γ tokens with their q; the session stays open."""
    sid, _ = client.open(request)
    q = rng.random((GAMMA, vocab), dtype=np.float32)
    q /= q.sum(-1, keepdims=True)
    tokens = rng.integers(1000, 2000, GAMMA).astype(np.int32)
    client.send(sid, DraftBlock(round=0, position=len(request.input_ids), tokens=tokens, q=q))
    while not (isinstance(msg := client.receive(sid, REPLY_TIMEOUT_S), ExitResult) and msg.is_final):
        pass
    return sid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="qwen2-vl-7b-shape:layers=2",
                        help="a shape source (models/real_shapes.py) the server loads")
    parser.add_argument("--sessions", default="1,4,16", help="counts of open sessions to measure at, increasing")
    args = parser.parse_args()
    counts = [int(n) for n in args.sessions.split(",")]
    text = text_config(args.verifier)
    vocab = text.vocab_size
    pair = load_pair(args.verifier, parts=())  # the tokenizer and the prompt encoder only
    jpg = encode_image(synthetic_camera_image(seed=0))
    prompt = pair.prompt_encoder().encode("find the silver bottle", decode_image(jpg))
    request = Open(input_ids=prompt.input_ids.numpy().astype(np.int32), image=jpg, temperature=1.0, want_exits=True)
    rng = np.random.default_rng(0)
    serve = ("--verifier", args.verifier, "--device", "cpu", "--dtype", "float32", "--max-sessions", str(max(counts)),
             "--max-sessions-per-client", str(max(counts)))
    with verifier_server(*serve, idle_exit_s=IDLE_EXIT_S) as server, \
            VerifierClient(ClientConfig(endpoint=server.endpoint)) as client:
        rows = [(0, server.memory_kib(), 0.0)]
        sids: list[bytes] = []
        for count in counts:
            started = time.perf_counter()
            while len(sids) < count:
                sids.append(open_and_verify(client, request, vocab, rng))
            rows.append((count, server.memory_kib(), time.perf_counter() - started))
    base = rows[0][1]["VmRSS"]
    per_token = kv_bytes_per_token(text)
    print(f"verifier {args.verifier}, prompt {len(prompt)} tokens + γ = {GAMMA}, sampled FSD round, float32 on the CPU")
    print("| open sessions | server RSS MiB | peak MiB | added per session MiB | KV per session MiB (arithmetic) | s |")
    print("|---|---|---|---|---|---|")
    for count, memory, took in rows:
        added = (memory["VmRSS"] - base) / 1024 / count if count else 0.0
        kv = per_token * (len(prompt) + GAMMA + 1) / 2**20
        print(f"| {count} | {memory['VmRSS'] / 1024:,.0f} | {memory['VmHWM'] / 1024:,.0f} | {added:.1f} | {kv:.2f} "
              f"| {took:.0f} |")


if __name__ == "__main__":
    main()
