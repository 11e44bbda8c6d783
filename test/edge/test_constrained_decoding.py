"""Grammar-constrained decoding through the robot's decoder and an in-process verifier session: in every
speculative mode greedy output equals the constrained verifier's own greedy output (argmax over the
target's logits masked by the automaton's state) token for token, and parses; what the verifier
refuses (an unknown or malformed grammar, a drafted or resampled token the grammar forbids) comes back
as an Error with the GRAMMAR code, never an exception in its worker."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.cloud.session import VerifySession
from edge_spec_ros.decoding.reference import DecodeConfig
from edge_spec_ros.edge.draft_sources import fresh_drafter
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.edge.registry import MODES, get_mode
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.grammar import book_for
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.grammar import parse_action
from edge_spec_ros.spec.sampling import SamplingConfig
from edge_spec_ros.wire.messages import DraftBlock, ErrorCode, ExitResult, Generate, Open, Opened, Tokens

from constrained_reference import constrained_autoregressive

GRAMMAR = "action-brief"  # at most 120 characters of reasoning: the untrained pair's replies end too
EXACT = [m for m in MODES if get_mode(m).exact]
SPECULATIVE = [m for m in EXACT if get_mode(m).speculative]


@pytest.fixture(scope="module")
def setup(target_model, encoder, tokenizer):
    verifier = EarlyExitVerifier(target_model)
    book = book_for(tokenizer, verifier.stack.vocab_size)
    prompt = encoder.encode("find the silver bottle")
    config = DecodeConfig(max_new_tokens=120, gamma=3, stop_tokens=(tokenizer.eos_token_id,))
    greedy = constrained_autoregressive(verifier, prompt, book.get(GRAMMAR), config)
    return verifier, encoder, Drafter(truncated_copy(target_model, 2)), prompt, book, config, greedy


def test_the_untrained_pair_writes_a_decision_that_parses_only_with_the_grammar(setup, tokenizer):
    verifier, encoder, drafter, prompt, book, config, greedy = setup
    assert greedy[-1] == tokenizer.eos_token_id, "the constrained verifier ends its reply within the budget"
    assert parse_action(tokenizer.decode(greedy), NavConfig()).ok
    free = EdgeDecoder(LocalVerifierLink(verifier, encoder), drafter, EdgeConfig(decode=config))
    free = free.decode("ar", prompt, b"")
    assert not parse_action(tokenizer.decode(free.tokens), NavConfig()).ok  # random weights: no format of its own


@pytest.mark.parametrize("mode", EXACT)
def test_greedy_equals_the_constrained_verifiers_greedy(setup, mode):
    verifier, encoder, drafter, prompt, book, config, greedy = setup
    edge = EdgeConfig(decode=config, threads=2, grammar=GRAMMAR)
    with EdgeDecoder(LocalVerifierLink(verifier, encoder), drafter, edge, grammars=book) as decoder:
        assert decoder.decode(mode, prompt, b"").tokens == greedy
        assert decoder.drafter is drafter  # the masked view is the decision's only


@pytest.mark.parametrize("mode", ["sd", "pico"])
def test_greedy_with_prompt_lookup_drafts_equals_the_constrained_verifiers_greedy(setup, mode):
    """Prompt lookup proposes tokens the grammar may forbid: they are cut at the first such token."""
    verifier, encoder, drafter, prompt, book, config, greedy = setup
    lookup = fresh_drafter("lookup", drafter)
    edge = EdgeConfig(decode=config, threads=2, grammar=GRAMMAR)
    with EdgeDecoder(LocalVerifierLink(verifier, encoder), lookup, edge, grammars=book) as decoder:
        assert decoder.decode(mode, prompt, b"").tokens == greedy


def test_a_speculative_decision_under_a_grammar_needs_the_book(setup):
    verifier, encoder, drafter, prompt, book, config, greedy = setup
    decoder = EdgeDecoder(LocalVerifierLink(verifier, encoder), drafter, EdgeConfig(decode=config, grammar=GRAMMAR))
    with pytest.raises(ValueError, match="GrammarBook"):
        decoder.decode("sd", prompt, b"")


def session_replies(verifier, encoder, prompt, grammar: str, *requests, temperature: float = 0.0) -> list:
    """The replies of a session to its Open and ``requests``, each request's work run to its end; a
    refusal at admission or in the work comes back as the Error the server would send."""
    from edge_spec_ros.cloud.limits import RequestError
    from edge_spec_ros.wire.messages import Error

    open_ = Open(input_ids=prompt.input_ids.numpy().astype(np.int32), grammar=grammar, temperature=temperature,
                 want_exits=False)
    session, out = VerifySession(verifier, encoder, open_), []
    for request in (open_, *requests):
        try:
            for _ in session.handle(request, out.append):
                pass
        except RequestError as exc:
            out.append(Error(int(exc.code), str(exc)))
    return out


@pytest.mark.parametrize("grammar,code,words", [
    ("walk", ErrorCode.GRAMMAR, "unknown grammar"),
    ('root ::= ("a" | ', ErrorCode.GRAMMAR, "does not compile"),
])
def test_an_unusable_grammar_is_refused_with_its_reason(setup, grammar, code, words):
    verifier, encoder, drafter, prompt, book, config, greedy = setup
    replies = session_replies(verifier, encoder, prompt, grammar)
    assert replies[-1].code == code and words in replies[-1].message


def test_a_drafted_token_the_grammar_forbids_is_refused_and_the_session_goes_on(setup, tokenizer):
    verifier, encoder, drafter, prompt, book, config, greedy = setup
    n = len(prompt.input_ids)
    colon = tokenizer.convert_tokens_to_ids(":")
    bad = DraftBlock(round=0, position=n, tokens=np.array([greedy[0], colon, colon], dtype=np.int32))
    good = DraftBlock(round=1, position=n, tokens=np.array(greedy[:2], dtype=np.int32))
    replies = session_replies(verifier, encoder, prompt, GRAMMAR, bad, good, Generate(3))
    assert isinstance(replies[0], Opened)
    assert replies[1].code == ErrorCode.GRAMMAR and "draft token 1" in replies[1].message
    final = [r for r in replies if isinstance(r, ExitResult) and r.is_final]  # the session went on
    assert len(final) == 1 and [int(t) for t in final[0].tokens] == greedy[:3]
    assert [int(r.tokens[0]) for r in replies if isinstance(r, Tokens)] == greedy[3:6]


def test_a_resampled_token_the_grammar_forbids_is_refused(setup, tokenizer):
    """DSSD: a draft token the target all but excludes is rejected, the robot owes its resampled token;
    one the grammar forbids is refused, in a draft block as ahead of cloud-only decoding."""
    verifier, encoder, drafter, prompt, book, config, greedy = setup
    n, colon = len(prompt.input_ids), tokenizer.convert_tokens_to_ids(":")
    row = book.get(GRAMMAR).start().mask()
    p = verifier.logits(verifier.start(prompt), prompt.input_ids.tolist(), n - 1)[-1]
    unlikely = int(torch.where(row, p, torch.inf).argmin())
    split = DraftBlock(round=0, position=n, tokens=np.array([unlikely], dtype=np.int32),
                       q_draft=np.array([1.0], dtype=np.float32))
    for then in (DraftBlock(round=1, position=n + 1, tokens=np.array([greedy[0]], dtype=np.int32),
                            q_draft=np.array([1.0], dtype=np.float32), resampled=colon),
                 Generate(2, resampled=colon)):
        replies = session_replies(verifier, encoder, prompt, GRAMMAR, split, then, temperature=1.0)
        assert replies[1].resample and replies[1].accepted == 0
        assert replies[-1].code == ErrorCode.GRAMMAR and "resampled" in replies[-1].message


def test_sampled_cloud_only_decoding_under_the_grammar_parses(setup, tokenizer):
    verifier, encoder, drafter, prompt, book, config, greedy = setup
    for seed in range(3):
        edge = EdgeConfig(decode=DecodeConfig(max_new_tokens=120, sampling=SamplingConfig(1.0), seed=seed,
                                              stop_tokens=config.stop_tokens), grammar=GRAMMAR)
        out = EdgeDecoder(LocalVerifierLink(verifier, encoder), None, edge, grammars=book).decode("ar", prompt, b"")
        assert out.tokens[-1] == tokenizer.eos_token_id
        assert parse_action(tokenizer.decode(out.tokens), NavConfig()).ok
