"""Batched verification (cloud/batching.py, DecoderStack.run_batch): the pending rounds of different
sessions in one forward of the verifier change nothing a robot receives.

- the batched forward's hidden states and logits equal each session's solo forward within float
  rounding, with the same argmax, and each session's cache ends up as the solo one's;
- 10 robots of mixed modes, greedy and sampled (own seeds), decoding at once against a server with
  ``max_batch = 8`` get, token for token, what each gets alone from a server without batching, and
  the server did batch (mean batch size > 1).
"""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest
import torch

from edge_spec_ros.bench.runner import bench_prompts
from edge_spec_ros.cloud.server import ServerConfig, VerifierServer
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.spec.sampling import SamplingConfig

HIDDEN_TOL = 1e-4  # measured about 6e-6 on the embedded pair (float32, CPU)
# (mode, temperature): every exact mode of the registry but AR, greedy and sampled
ROBOTS = [("sd", 0.0), ("fsd", 0.0), ("dssd", 0.0), ("tkslt", 0.0), ("pico", 0.0), ("sd", 1.0), ("fsd", 1.0),
          ("dssd", 1.0), ("lowpay", 1.0), ("pico-fsd", 0.7)]


@pytest.fixture(scope="module")
def pair():
    return load_pair("embedded")


@pytest.fixture(scope="module")
def work(pair):
    return bench_prompts(pair.prompt_encoder(), 3)


def _items(stack, prompts, rng):
    """Per prompt a cache advanced by a few tokens (different prefix lengths) and a draft of its own length."""
    out = []
    for prompt in prompts:
        ids = prompt.input_ids.tolist()
        kv = stack.prefill(prompt)
        seq = ids + [rng.randrange(100, 400) for _ in range(rng.randrange(0, 6))]
        list(stack.run(kv, seq, len(ids) - 1))
        out.append((kv, seq + [rng.randrange(100, 400) for _ in range(rng.randrange(1, 6))], len(seq) - 1))
    return out


def test_batched_forward_equals_each_solo_forward(pair, work):
    stack = pair.verifier.stack
    prompts = [p for p, _ in work] + [PromptEncoder(pair.tokenizer).encode("stop")]  # images and text only
    solo_items, batch_items = _items(stack, prompts, random.Random(0)), _items(stack, prompts, random.Random(0))
    solo = [[out.hidden for out in stack.run(*item)] for item in solo_items]
    batched = list(stack.run_batch(batch_items))
    assert len(batched) == stack.num_layers
    for layer, outputs in enumerate(batched):
        for b, out in enumerate(outputs):
            assert out.layer == layer + 1 and out.hidden.shape == solo[b][layer].shape
            assert torch.allclose(out.hidden, solo[b][layer], atol=HIDDEN_TOL, rtol=0)
    for b, out in enumerate(batched[-1]):
        a, s = stack.logits(out.hidden), stack.logits(solo[b][-1])
        assert torch.allclose(a, s, atol=HIDDEN_TOL * 10, rtol=0)
        assert torch.equal(a.argmax(-1), s.argmax(-1))
    for (kv_s, _, _), (kv_b, _, _) in zip(solo_items, batch_items):
        assert kv_s.tokens == kv_b.tokens
        for ls, lb in zip(kv_s.layers, kv_b.layers):
            assert ls.keys.shape == lb.keys.shape and torch.allclose(ls.keys, lb.keys, atol=HIDDEN_TOL)
            assert torch.allclose(ls.values, lb.values, atol=HIDDEN_TOL)


def test_an_interrupted_batched_forward_leaves_every_cache_as_before(pair, work):
    stack = pair.verifier.stack
    items = _items(stack, [p for p, _ in work], random.Random(1))
    before = [(list(kv.tokens), [layer.keys.shape[-2] for layer in kv.layers]) for kv, _, _ in items]
    run = stack.run_batch([(kv, seq, first) for kv, seq, first in items])
    next(run), next(run)
    run.close()  # the consumer stopped after two layers
    for (kv, seq, first), (tokens, lengths) in zip(items, before):
        assert kv.length == min(len(tokens), first) and all(layer.keys.shape[-2] == kv.length
                                                             for layer in kv.layers)


def _decide(endpoint, pair, work, robots, results, errors):
    def robot(i: int, mode: str, temperature: float) -> None:
        config = DecodeConfig(max_new_tokens=16, gamma=3, sampling=SamplingConfig(temperature), seed=100 + i,
                              stop_tokens=(pair.tokenizer.eos_token_id,))
        try:
            with VerifierClient(ClientConfig(endpoint=endpoint, reply_timeout_s=60.0, open_timeout_s=60.0)) as c, \
                    EdgeDecoder(c, pair.drafter, EdgeConfig(decode=config, threads=1)) as decoder:
                prompt, jpg = work[i % len(work)]
                results[i] = [decoder.decode(mode, prompt, jpg).tokens for _ in range(2)]
        except Exception as exc:  # reported by the test
            errors.append(f"robot {i} {mode}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=robot, args=(i, m, t), daemon=True) for i, (m, t) in robots]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)


def test_ten_robots_of_mixed_modes_get_their_solo_outputs_from_a_batching_server(pair, work):
    encoder = pair.prompt_encoder()
    robots = list(enumerate(ROBOTS))
    solo: dict[int, list[list[int]]] = {}
    errors: list[str] = []
    server = VerifierServer(pair.verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*"))
    endpoint = server.start()
    try:
        for robot in robots:  # one robot at a time: its solo output
            _decide(endpoint, pair, work, [robot], solo, errors)
    finally:
        server.stop()
    assert not errors, errors
    # the exact modes' greedy outputs are the verifier's own
    for i, (mode, temperature) in robots:
        if temperature == 0:
            prompt, _ = work[i % len(work)]
            expected = autoregressive(pair.verifier, prompt, DecodeConfig(max_new_tokens=16, gamma=3,
                                                                           stop_tokens=(pair.tokenizer.eos_token_id,)))
            assert solo[i][0] == expected.tokens, mode
        assert solo[i][0] == solo[i][1]

    # emulated T_q: rounds arrive while a forward is under way, so the next forward has several to take
    batched: dict[int, list[list[int]]] = {}
    server = VerifierServer(pair.verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*", max_batch=8,
                                                                 emulate_tq_s=0.03))
    endpoint = server.start()
    try:
        _decide(endpoint, pair, work, robots, batched, errors)
        stats = server.stats()
    finally:
        server.stop()
    assert not errors, errors
    for i, (mode, temperature) in robots:
        assert batched[i] == solo[i], (mode, temperature)
    print(f"{stats['batched_rounds']} rounds in {stats['batches']} forwards")
    assert stats["batches"] > 0 and stats["batched_rounds"] / stats["batches"] > 1.5, stats
    assert stats.get("internal_error", 0) == 0


def test_a_refused_or_cancelled_session_in_a_batch_leaves_the_others_exact(pair, work, monkeypatch):
    """verify_batch: one session's bad draft (wrong position) is answered with its error and left out
    of the forward, one cancelled part-way stops receiving results, the others get what they get alone.
    Every exit in every round (no planner), so that each session streams exits before its final one."""
    monkeypatch.setattr(pair.verifier, "exit_planner", None)
    import threading as _threading

    from edge_spec_ros.cloud.batching import verify_batch
    from edge_spec_ros.cloud.limits import RequestError
    from edge_spec_ros.cloud.session import Cancelled, VerifySession
    from edge_spec_ros.wire.messages import DraftBlock, Open

    encoder = pair.prompt_encoder()

    def opened(i: int, cancel=None):
        prompt, jpg = work[i % len(work)]
        request = Open(input_ids=prompt.input_ids.numpy().astype(np.int32), image=jpg, want_exits=True)
        session = VerifySession(pair.verifier, encoder, request, cancel=cancel)
        for _ in session.handle(request, lambda reply: None):
            pass
        return session, len(prompt.input_ids)

    def draft(n: int, shift: int = 0) -> DraftBlock:
        return DraftBlock(round=0, position=n + shift, tokens=np.array([300, 301, 302], np.int32))

    solo = []
    for i in range(4):
        session, n = opened(i)
        replies: list = []
        for _ in session.handle(draft(n), replies.append):
            pass
        solo.append([(r.layer, r.accepted, r.tokens.tolist(), r.is_final) for r in replies])

    cancel = _threading.Event()
    sessions = [opened(0), opened(1), opened(2), opened(3, cancel)]
    replies = [[] for _ in sessions]

    def emit_and_cancel(reply):  # session 3 is closed after its first exit
        replies[3].append(reply)
        cancel.set()

    emits = [replies[0].append, replies[1].append, replies[2].append, emit_and_cancel]
    jobs = [s.handle(draft(n, shift=1 if i == 1 else 0), emits[i]) for i, (s, n) in enumerate(sessions)]
    errors = verify_batch(pair.verifier, jobs)
    assert errors[0] is None and errors[2] is None
    assert isinstance(errors[1], RequestError) and not replies[1]
    assert isinstance(errors[3], Cancelled) and len(replies[3]) == 1
    for i in (0, 2):
        assert [(r.layer, r.accepted, r.tokens.tolist(), r.is_final) for r in replies[i]] == solo[i]
    assert replies[0][-1].is_final and len(replies[0]) == pair.verifier.num_layers  # every exit streamed


def test_fuzzed_requests_beside_robots_never_reach_a_batch_as_an_internal_error(pair, work):
    """Mutated requests (wire/fuzz.py) on a few session ids, valid opens and drafts among them, while 4
    robots decode against a batching server: the robots get the verifier's greedy output, the server
    answers no INTERNAL error and did batch."""
    import zmq

    from edge_spec_ros.wire import fuzz

    encoder = pair.prompt_encoder()
    text = PromptEncoder(pair.tokenizer).encode("stop").input_ids.numpy().astype(np.int32)
    server = VerifierServer(pair.verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*", max_batch=8,
                                                                 emulate_tq_s=0.02))
    endpoint = server.start()
    robots = list(enumerate([("sd", 0.0), ("fsd", 0.0), ("dssd", 0.0), ("pico", 0.0)]))
    results, errors = {}, []
    stop = threading.Event()

    def fuzzer() -> None:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        rng = random.Random(3)
        sessions = [bytes([i]) * 16 for i in range(1, 4)]
        for frames in fuzz.cases(5, 600, vocab=pair.verifier.stack.vocab_size, prompt=text, requests_only=True):
            if stop.is_set():
                break
            if len(frames[0]) >= 20:
                frames[0] = frames[0][:4] + rng.choice(sessions) + frames[0][20:]
            sock.send_multipart(frames)
            while sock.poll(0):
                sock.recv_multipart()
            time.sleep(0.002)
        sock.close()
        ctx.term()

    hostile = threading.Thread(target=fuzzer, daemon=True)
    try:
        hostile.start()
        _decide(endpoint, pair, work, robots, results, errors)
        stop.set()
        hostile.join(30)
        stats = server.stats()
    finally:
        server.stop()
    assert not errors, errors
    config = DecodeConfig(max_new_tokens=16, gamma=3, stop_tokens=(pair.tokenizer.eos_token_id,))
    for i, (mode, _) in robots:
        expected = autoregressive(pair.verifier, work[i % len(work)][0], config).tokens
        assert results[i] == [expected, expected], mode
    assert stats.get("internal_error", 0) == 0, stats
    assert stats["batches"] > 0, stats
