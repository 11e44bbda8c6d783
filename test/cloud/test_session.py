"""The verifier's per-decision session without sockets, driven through its one entry point
(``VerifySession.handle``): PicoSpec's fast verification on a partial block gives the same verdicts as
verifying the whole block at once, and starts the clock earlier; drafts must come in round order."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from edge_spec_ros.cloud.limits import RequestError
from edge_spec_ros.cloud.session import VerifySession
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.wire.messages import DraftBlock, ErrorCode, Open


@pytest.fixture(scope="module")
def verifier(target_model):
    v = EarlyExitVerifier(target_model)
    v.exit_planner = None  # every exit in every round: these tests compare sessions exit by exit
    return v


def handle(s: VerifySession, message, emit=lambda reply: None) -> None:
    """Admit a request and run its work to the end, as a worker does."""
    for _ in s.handle(message, emit):
        pass


def session(verifier, tokenizer, prompt, **open_args) -> VerifySession:
    request = Open(input_ids=prompt.input_ids.numpy().astype(np.int32), **open_args)
    s = VerifySession(verifier, PromptEncoder(tokenizer), request)
    handle(s, request)
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
    handle(session(verifier, tokenizer, text_prompt, **args), block(text_prompt, tokens, q), whole.append)
    s = session(verifier, tokenizer, text_prompt, **args)
    handle(s, block(text_prompt, tokens[:2], None if q is None else q[:2], partial=True))
    assert s.prepared is not None and len(s.prepared.logits) == (verifier.num_layers if want_exits else 1)
    handle(s, block(text_prompt, tokens, q), fast.append)
    assert s.prepared is None
    assert [(r.layer, r.accepted, r.tokens.tolist()) for r in fast] == \
        [(r.layer, r.accepted, r.tokens.tolist()) for r in whole]
    for a, b in zip(fast, whole, strict=True):
        assert a.confidence == pytest.approx(b.confidence, abs=1e-5)


def test_a_partial_block_that_does_not_fit_is_ignored(verifier, tokenizer, text_prompt):
    s = session(verifier, tokenizer, text_prompt)
    handle(s, DraftBlock(round=0, position=3, tokens=np.asarray([30], np.int32), partial=True))
    assert s.prepared is None
    handle(s, block(text_prompt, [30, 31], partial=True))
    out = []
    handle(s, block(text_prompt, [40, 41, 42]), out.append)  # a different block: verified from scratch
    reference = []
    handle(session(verifier, tokenizer, text_prompt), block(text_prompt, [40, 41, 42]), reference.append)
    assert [r.tokens.tolist() for r in out] == [r.tokens.tolist() for r in reference]


def test_fast_verification_starts_the_emulated_clock_at_the_partial_block(verifier, tokenizer, text_prompt):
    """Under an emulated T_q the whole block's verdict comes T_q after the partial block arrived."""
    s = session(verifier, tokenizer, text_prompt, compute_tq_s=0.3, want_exits=False)
    handle(s, block(text_prompt, [30, 31], partial=True))
    time.sleep(0.2)  # the robot drafts the rest meanwhile
    t = time.perf_counter()
    handle(s, block(text_prompt, [30, 31, 32, 33]))
    assert time.perf_counter() - t < 0.2  # without the partial block it would take the full 0.3 s


def test_drafts_come_in_round_order(verifier, tokenizer, text_prompt):
    """A draft for another round than the next is refused at once and changes nothing; a partial block
    keeps its round, a whole block uses it up even when its verification fails."""
    s = session(verifier, tokenizer, text_prompt)
    with pytest.raises(RequestError, match="draft for round 1, expected 0") as refused:
        handle(s, DraftBlock(round=1, position=len(text_prompt), tokens=np.asarray([30], np.int32)))
    assert refused.value.code == ErrorCode.OUT_OF_ORDER
    handle(s, block(text_prompt, [30, 31], partial=True))
    with pytest.raises(RequestError, match="position"):
        handle(s, DraftBlock(round=0, position=3, tokens=np.asarray([30], np.int32)))
    out = []
    handle(s, DraftBlock(round=1, position=len(text_prompt), tokens=np.asarray([30], np.int32)), out.append)
    assert out[-1].is_final and out[-1].round == 1
    with pytest.raises(RequestError, match="opened once"):
        handle(s, Open(input_ids=text_prompt.input_ids.numpy().astype(np.int32)))


def test_a_session_opens_before_anything_else(verifier, tokenizer, text_prompt):
    request = Open(input_ids=text_prompt.input_ids.numpy().astype(np.int32))
    s = VerifySession(verifier, PromptEncoder(tokenizer), request)
    with pytest.raises(RequestError, match="before the session's Open"):
        handle(s, block(text_prompt, [30]))
    opened = []
    handle(s, request, opened.append)
    assert [type(m).__name__ for m in opened] == ["Opened"]


def test_a_long_prompt_is_prefilled_in_slices_that_give_the_worker_back(verifier, tokenizer, text_prompt):
    """Chunked prefill: the Open's work yields after each layer of each slice, gives the same verdict
    as one prefill, and stops at the next step once the session is cancelled."""
    import threading

    from edge_spec_ros.cloud.session import Cancelled

    ids = np.resize(text_prompt.input_ids.numpy().astype(np.int32), 100)
    request = Open(input_ids=ids)
    draft = DraftBlock(round=0, position=len(ids), tokens=np.array([30, 31, 32], np.int32))
    verdicts = []
    for chunk in (16, 1 << 20):
        s = VerifySession(verifier, PromptEncoder(tokenizer), request, prefill_chunk_tokens=chunk)
        steps = sum(1 for _ in s.handle(request, lambda reply: None))
        assert steps == (-(-(len(ids) - 1) // chunk)) * verifier.num_layers - 1
        out = []
        handle(s, draft, out.append)
        verdicts.append([(r.layer, r.accepted, r.tokens.tolist()) for r in out])
    assert verdicts[0] == verdicts[1]
    cancel = threading.Event()
    s = VerifySession(verifier, PromptEncoder(tokenizer), request, cancel=cancel, prefill_chunk_tokens=16)
    work = s.handle(request, lambda reply: pytest.fail("a cancelled Open replied"))
    next(work)
    cancel.set()
    with pytest.raises(Cancelled):
        next(work)


@pytest.mark.parametrize("want_exits", [True, False])
def test_a_first_block_admitted_before_the_prefill_ran_gets_the_same_verdicts(verifier, tokenizer, text_prompt,
                                                                             want_exits):
    """The first block rides with the Open (edge/first_block.py): admitted right behind the Open, before
    the Open's work (the prefill) has run, it is verified right after it, by the forward that continues
    the prefill (the last prompt position and the draft's), with the exits and verdict of a block sent
    after ``Opened``, which come after ``Opened``."""
    request = Open(input_ids=text_prompt.input_ids.numpy().astype(np.int32), want_exits=want_exits)
    reference, late = session(verifier, tokenizer, text_prompt, want_exits=want_exits), []
    handle(reference, block(text_prompt, [30, 31, 32]), late.append)
    s = VerifySession(verifier, PromptEncoder(tokenizer), request)
    replies: list = []
    opening = s.handle(request, replies.append)
    verifying = s.handle(block(text_prompt, [30, 31, 32]), replies.append)  # admitted before the prefill ran
    for work in (opening, verifying):  # a worker runs them in admission order
        for _ in work:
            pass
    assert type(replies[0]).__name__ == "Opened"
    assert [(r.layer, r.accepted, r.tokens.tolist(), r.is_final) for r in replies[1:]] == \
        [(r.layer, r.accepted, r.tokens.tolist(), r.is_final) for r in late]
