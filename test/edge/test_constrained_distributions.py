"""Grammar-constrained sampling follows the constrained verifier norm(p · m) in every exact mode
(vocabulary of 8, two tokens), through the robot's real decoders against an in-process verifier
session that compiles the same grammar. SD passes the chi-square test (1,000 decisions); FSD and DSSD
draw what SD draws, and AR what the constrained verifier alone draws (whose own draws pass the
chi-square test), seed by seed on 300 seeds: equal draws are equal distributions, and a mode off by δ
in total variation differs on a seed with probability at least δ (see test_protocol_distributions.py).
TK-SLT and the low-payload mode (another q), PicoSpec's modes (blocks cut by timing) and the runs without
the first block keep the chi-square test and are marked slow. Negative controls that must fail: the
mask on one side only (the drafter masks q, the verifier leaves p as it is), and the mask applied after
sampling (an unconstrained decision whose forbidden tokens are then replaced by the likeliest allowed
one)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_spec_ros.cloud import session as session_module
from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.edge import constrained
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.grammar import GrammarBook
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.constraint import ForbiddenToken, masked_probs

from constrained_reference import constrained_autoregressive
from first_block_link import OpenOnlyLink
from small_vocab import VOCAB, chi_square_pvalue, exact_two_token_distribution, small_target, two_tokens

N_RUNS = 1000
TOKENS = [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"<eos>"]  # ids 0..7 of the small pair
# the first token among a-d, the second depending on it: masks that differ by state
GRAMMAR = 'root ::= ("a" [bcd] | "b" [ae] | "c" [a-g] | "d" "d") [a-g]*'


@pytest.fixture(scope="module")
def small_pair(tokenizer):
    return small_target(tokenizer)


@pytest.fixture(scope="module")
def book():
    return GrammarBook.for_vocabulary(TOKENS, [7])


def constrained_two_token_distribution(target, prompt, constraint) -> np.ndarray:
    """P̃(x1, x2) = p̃(x1 | prompt) p̃(x2 | prompt, x1), p̃ = norm(p · m(s)), by enumeration: (V·V,)."""
    state = constraint.start()
    with torch.inference_mode():
        ids = prompt.input_ids[None]
        p1 = masked_probs(torch.softmax(target(input_ids=ids).logits[0, -1].double(), -1), state.mask())
        both = torch.cat([ids.repeat(VOCAB, 1), torch.arange(VOCAB)[:, None]], dim=1)
        p2 = torch.softmax(target(input_ids=both).logits[:, -1].double(), -1)  # (V, V)
    out = np.zeros((VOCAB, VOCAB))
    for x1 in np.flatnonzero(p1.numpy()):
        after = state.fork()
        after.advance(int(x1))
        out[x1] = float(p1[x1]) * masked_probs(p2[x1], after.mask()).numpy()
    return out.flatten()


def pvalue(samples: list[tuple[int, int]], expected: np.ndarray) -> float:
    """The chi-square p-value, 0 when a sample is impossible under ``expected`` (a token the grammar
    forbids: the chi-square's merged bin of rare cells would hide it)."""
    if any(expected[a * VOCAB + b] == 0 for a, b in samples):
        return 0.0
    return chi_square_pvalue(samples, expected)


def run_mode(target, prompt, encoder, mode: str, n: int, book, grammar: str = GRAMMAR, link=LocalVerifierLink,
             **edge) -> list[tuple[int, int]]:
    verifier = EarlyExitVerifier(target)
    # the in-process verifier compiles the small vocabulary's grammar too (its encoder's tokenizer is the
    # project's, whose ids 0..7 are special tokens)
    decoder = EdgeDecoder(link(verifier, encoder, grammars=book), Drafter(truncated_copy(target, 1)),
                          EdgeConfig(threads=1), grammars=book)
    out = []
    for seed in range(n):
        decoder.config = EdgeConfig(decode=two_tokens(seed), threads=1, grammar=grammar, **edge)
        tokens = decoder.decode(mode, prompt, b"").tokens
        out.append((tokens[0], tokens[1]))
    return out


@pytest.fixture(scope="module")
def expected(small_pair, book):
    """The constrained verifier's joint, far enough from the target's own that the controls can fail."""
    target, prompt = small_pair
    joint = constrained_two_token_distribution(target, prompt, book.get(GRAMMAR))
    assert 0.5 * np.abs(joint - exact_two_token_distribution(target, prompt)).sum() > 0.3
    return joint


SLOW = pytest.mark.slow  # 35-80 s each here (PicoSpec's threads, TK-SLT's top K): `make test-slow`
CHI_SQUARE = [pytest.param("tkslt", {"tkslt_k": 3}, marks=SLOW), pytest.param("lowpay", {"lowpay_k": 2}, marks=SLOW),
              pytest.param("pico", {}, marks=SLOW), pytest.param("pico-fsd", {}, marks=SLOW)]
N_SEEDS = 300  # decisions compared draw for draw (see the module)
N_CONTROL = 500  # the controls are far off: TV > 0.3, or tokens the grammar forbids


@pytest.fixture(scope="module")
def sd_decisions(small_pair, encoder, book):
    """SD's N_RUNS decisions under the grammar, with the first block riding with the Open (the default link)."""
    return run_mode(*small_pair, encoder, "sd", N_RUNS, book)


def test_sd_under_a_grammar_follows_the_constrained_verifier(sd_decisions, expected):
    assert pvalue(sd_decisions, expected) > 1e-3


@pytest.mark.parametrize("mode", ["fsd", "dssd"])
def test_fsd_and_dssd_under_a_grammar_draw_what_sd_draws(small_pair, encoder, book, sd_decisions, mode):
    """The same q and blocks, the verification split otherwise: the same draw for every seed."""
    assert run_mode(*small_pair, encoder, mode, N_SEEDS, book) == sd_decisions[:N_SEEDS]


def test_ar_under_a_grammar_draws_what_the_constrained_verifier_draws(small_pair, encoder, book, expected):
    """The cloud's own constrained sampling equals the constrained verifier alone draw for draw, whose two
    tokens pass the chi-square test (in-process: cheap, N_RUNS of them)."""
    target, prompt = small_pair
    verifier = EarlyExitVerifier(target)
    alone = [tuple(constrained_autoregressive(verifier, prompt, book.get(GRAMMAR), two_tokens(seed))[:2])
             for seed in range(N_RUNS)]
    assert pvalue(alone, expected) > 1e-3
    assert run_mode(target, prompt, encoder, "ar", N_SEEDS, book) == alone[:N_SEEDS]


@pytest.mark.parametrize("mode,edge", CHI_SQUARE)
def test_exact_modes_under_a_grammar_follow_the_constrained_verifier(small_pair, encoder, book, expected,
                                                                     mode, edge):
    """With the first block riding with the Open (the default link)."""
    target, prompt = small_pair
    assert pvalue(run_mode(target, prompt, encoder, mode, N_RUNS, book, **edge), expected) > 1e-3


@SLOW
@pytest.mark.parametrize("mode,edge", [("sd", {}), ("dssd", {}), ("pico", {})])
def test_without_the_first_block_too(small_pair, encoder, book, expected, mode, edge):
    target, prompt = small_pair
    samples = run_mode(target, prompt, encoder, mode, N_RUNS, book, link=OpenOnlyLink, **edge)
    assert pvalue(samples, expected) > 1e-3


def test_negative_control_the_mask_on_one_side_only(small_pair, encoder, book, expected, monkeypatch):
    """The drafter masks q, the verifier does not mask p: the output follows p, which must be detected
    (after a token the grammar forbids, the drafter's q is left unmasked: its automaton cannot follow)."""
    monkeypatch.setattr(session_module.VerifySession, "_start_grammar", lambda self: None)
    mask_after = constrained.DecisionMasks.mask_after

    def tolerant(self, seq):
        try:
            return mask_after(self, seq)
        except ForbiddenToken:
            return torch.ones(VOCAB, dtype=torch.bool)

    monkeypatch.setattr(constrained.DecisionMasks, "mask_after", tolerant)
    target, prompt = small_pair
    assert pvalue(run_mode(target, prompt, encoder, "sd", N_CONTROL, book), expected) < 1e-6


def test_negative_control_the_mask_applied_after_sampling(small_pair, encoder, book, expected):
    """An unconstrained decision, its forbidden tokens then replaced by the likeliest allowed one."""
    target, prompt = small_pair
    constraint = book.get(GRAMMAR)
    with torch.inference_mode():
        p = torch.softmax(target(input_ids=prompt.input_ids[None]).logits[0, -1].double(), -1)
    fixed = []
    for x1, x2 in run_mode(target, prompt, encoder, "sd", N_CONTROL, book, grammar=""):
        state = constraint.start()
        allowed = state.mask()
        x1 = x1 if allowed[x1] else int(torch.where(allowed, p, -1.0).argmax())
        state.advance(x1)
        allowed = state.mask()
        x2 = x2 if allowed[x2] else int(allowed.nonzero()[0])
        fixed.append((x1, x2))
    assert pvalue(fixed, expected) < 1e-6
