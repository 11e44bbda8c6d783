"""The verifier's per-decision session without sockets: PicoSpec's fast verification on a partial
block gives the same verdicts as verifying the whole block at once, and starts the clock earlier."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from edge_spec_ros.cloud.session import VerifySession
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.wire.messages import DraftBlock, Open


@pytest.fixture(scope="module")
def verifier(target_model):
    return EarlyExitVerifier(target_model)


def session(verifier, tokenizer, prompt, **open_args) -> VerifySession:
    s = VerifySession(verifier, PromptEncoder(tokenizer), Open(input_ids=prompt.input_ids.numpy().astype(np.int32),
                                                               **open_args))
    s.prefill()
    return s


def block(prompt, tokens, q=None, **kw) -> DraftBlock:
    return DraftBlock(round=0, position=len(prompt), tokens=np.asarray(tokens, np.int32), q=q, **kw)


@pytest.mark.parametrize("temperature,want_exits", [(0.0, True), (0.9, True), (0.9, False)])
def test_partial_block_gives_the_same_verdicts(verifier, tokenizer, text_prompt, temperature, want_exits):
    tokens = [30, 31, 32, 33]
    q = None
    if temperature:
        g = torch.Generator().manual_seed(0)
        q = torch.softmax(torch.randn(4, verifier.stack.vocab_size, generator=g), -1).numpy()
    args = dict(temperature=temperature, want_exits=want_exits, seed=3)
    whole, fast = [], []
    session(verifier, tokenizer, text_prompt, **args).verify(block(text_prompt, tokens, q), whole.append)
    s = session(verifier, tokenizer, text_prompt, **args)
    s.prepare(block(text_prompt, tokens[:2], None if q is None else q[:2], partial=True))
    assert s.prepared is not None and len(s.prepared.logits) == (verifier.num_layers if want_exits else 1)
    s.verify(block(text_prompt, tokens, q), fast.append)
    assert s.prepared is None
    assert [(r.layer, r.accepted, r.tokens.tolist()) for r in fast] == \
        [(r.layer, r.accepted, r.tokens.tolist()) for r in whole]
    for a, b in zip(fast, whole, strict=True):
        assert a.confidence == pytest.approx(b.confidence, abs=1e-5)


def test_a_partial_block_that_does_not_fit_is_ignored(verifier, tokenizer, text_prompt):
    s = session(verifier, tokenizer, text_prompt)
    s.prepare(DraftBlock(round=0, position=3, tokens=np.asarray([30], np.int32), partial=True))
    assert s.prepared is None
    s.prepare(block(text_prompt, [30, 31], partial=True))
    out = []
    s.verify(block(text_prompt, [40, 41, 42]), out.append)  # a different block: verified from scratch
    reference = []
    session(verifier, tokenizer, text_prompt).verify(block(text_prompt, [40, 41, 42]), reference.append)
    assert [r.tokens.tolist() for r in out] == [r.tokens.tolist() for r in reference]


def test_fast_verification_starts_the_emulated_clock_at_the_partial_block(verifier, tokenizer, text_prompt):
    """Under an emulated T_q the whole block's verdict comes T_q after the partial block arrived."""
    s = session(verifier, tokenizer, text_prompt, compute_tq_s=0.3, want_exits=False)
    s.prepare(block(text_prompt, [30, 31], partial=True))
    time.sleep(0.2)  # the robot drafts the rest meanwhile
    t = time.perf_counter()
    s.verify(block(text_prompt, [30, 31, 32, 33]), lambda r: None)
    assert time.perf_counter() - t < 0.2  # without the partial block it would take the full 0.3 s
