"""The verifier computes only the early exits its ExitPlanner chooses: the robot sees fewer early results,
and every final verdict is the one the verifier gives with all its exits (exactness does not depend on
the plan). Early-exit heads that score a shortlist of ids change the early results only, never a final
verdict."""

from __future__ import annotations

import numpy as np
import torch

from edge_spec_ros.cloud.session import VerifySession, shortlist_ids
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.exits import ExitPlanner
from edge_spec_ros.wire.messages import DraftBlock, ExitResult, Open

ROUNDS = 12
GAMMA = 3


def decide(verifier: EarlyExitVerifier, tokenizer, prompt, temperature: float,
           exit_shortlist: int = 0) -> list[list[ExitResult]]:
    """One decision of ROUNDS rounds with fixed pseudo-random drafts (the same for every verifier):
    each round's results, in the order emitted."""
    request = Open(input_ids=prompt.input_ids.numpy().astype(np.int32), want_exits=True,
                   temperature=temperature, seed=4)
    s = VerifySession(verifier, PromptEncoder(tokenizer), request, exit_shortlist=exit_shortlist)
    for _ in s.handle(request, lambda reply: None):
        pass
    g = torch.Generator().manual_seed(1)
    position, rounds = len(prompt.input_ids), []
    for r in range(ROUNDS):
        tokens = torch.randint(20, 60, (GAMMA,), generator=g).numpy().astype(np.int32)
        q = torch.softmax(torch.randn(GAMMA, verifier.stack.vocab_size, generator=g), -1).numpy() \
            if temperature else None
        out: list[ExitResult] = []
        for _ in s.handle(DraftBlock(round=r, position=position, tokens=tokens, q=q), out.append):
            pass
        rounds.append(out)
        position += len(out[-1].tokens)
    return rounds


def test_planned_exits_leave_every_verdict_unchanged(target_model, tokenizer, text_prompt):
    for temperature in (0.0, 0.9):
        every = EarlyExitVerifier(target_model)
        every.exit_planner = None  # the FSD paper's verifier: every exit, every round
        planned = EarlyExitVerifier(target_model)
        planned.exit_planner = ExitPlanner(planned.exit_layers, planned.num_layers, warmup_rounds=2,
                                           probe_every=5)
        all_rounds = decide(every, tokenizer, text_prompt, temperature)
        planned_rounds = decide(planned, tokenizer, text_prompt, temperature)
        for a, b in zip(all_rounds, planned_rounds, strict=True):
            final_a, final_b = a[-1], b[-1]
            assert final_a.is_final and final_b.is_final
            assert (final_a.accepted, final_a.tokens.tolist()) == (final_b.accepted, final_b.tokens.tolist())
            # an exit that is computed gives the result it gives with all exits
            early = {r.layer: (r.accepted, r.tokens.tolist()) for r in a[:-1]}
            assert all(early[r.layer] == (r.accepted, r.tokens.tolist()) for r in b[:-1])
        assert all(len(r) == every.num_layers for r in all_rounds)
        assert [len(r) for r in planned_rounds[:2]] == [planned.num_layers] * 2  # warm-up: every exit
        # the learned plan leaves exits out (the tiny random model's exits rarely match the final verdict)
        assert min(len(r) for r in planned_rounds) < planned.num_layers
        assert planned.exit_planner.rounds == ROUNDS


def test_a_verifier_without_exits_has_no_planner(target_model):
    from edge_spec_ros.models.adapters import ExitAdapters

    hidden = target_model.config.text_config.hidden_size
    assert EarlyExitVerifier(target_model).exit_planner is not None
    assert EarlyExitVerifier(target_model, ExitAdapters(hidden, [])).exit_planner is None


def test_a_pipelined_session_teaches_the_planner_only_what_its_robot_can_use():
    """Drafts that the shipped verifier accepts whole: its later exits agree with the final verdicts, so
    a plain FSD session teaches the planner right rates near 1 for them; a PicoSpec session
    (``Open.pipelined``) already has its next block after such a verdict, and teaches rates of 0 (its
    exits earn nothing there)."""
    from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
    from edge_spec_ros.models.pairs import load_pair

    pair = load_pair("embedded")
    encoder = pair.prompt_encoder()
    prompt = encoder.encode("go to the red chair")
    greedy = autoregressive(pair.verifier, prompt, DecodeConfig(max_new_tokens=4 * (GAMMA + 1))).tokens
    rates = {}
    verifier = pair.verifier
    verifier.exit_planner = ExitPlanner(verifier.exit_layers, verifier.num_layers, warmup_rounds=4)
    verifier.pipelined_exit_planner = ExitPlanner(verifier.exit_layers, verifier.num_layers, warmup_rounds=4)
    for pipelined in (False, True):
        request = Open(input_ids=prompt.input_ids.numpy().astype(np.int32), want_exits=True, pipelined=pipelined)
        s = VerifySession(verifier, encoder, request)
        for _ in s.handle(request, lambda reply: None):
            pass
        position, done = len(prompt.input_ids), 0
        for r in range(4):  # each block: the next GAMMA greedy tokens (the verdict adds the target's token)
            out: list[ExitResult] = []
            tokens = np.asarray(greedy[done:done + GAMMA], np.int32)
            for _ in s.handle(DraftBlock(round=r, position=position, tokens=tokens), out.append):
                pass
            assert out[-1].is_final and out[-1].accepted == GAMMA
            position += len(out[-1].tokens)
            done += len(out[-1].tokens)
        rates[pipelined] = [e.right_rate for e in verifier.planner_for(pipelined).stats()]
    assert max(rates[False]) > 0.5 and max(rates[True]) == 0.0, rates
    assert verifier.exit_planner.rounds == verifier.pipelined_exit_planner.rounds == 4  # one kind each


def test_shortlisted_exit_heads_score_only_their_ids_and_leave_every_verdict_unchanged(target_model, tokenizer,
                                                                                      text_prompt):
    """Heads over ids below 16 and the decision's own tokens: every early result is drawn from those ids
    (with the whole vocabulary some are not), and every final verdict is the whole-vocabulary one."""
    allowed = set(range(16)) | set(text_prompt.input_ids.tolist()) | set(range(20, 60))  # the drafts: 20..59
    for temperature in (0.0, 0.9):
        verifier = EarlyExitVerifier(target_model)
        verifier.exit_planner = None  # every exit, every round
        whole = decide(verifier, tokenizer, text_prompt, temperature)
        short = decide(verifier, tokenizer, text_prompt, temperature, exit_shortlist=16)
        seen = set(allowed)  # and every token committed before the round
        for a, b in zip(whole, short, strict=True):
            assert (a[-1].accepted, a[-1].tokens.tolist()) == (b[-1].accepted, b[-1].tokens.tolist())
            assert all(set(r.tokens.tolist()) <= seen for r in b[:-1])
            seen |= set(a[-1].tokens.tolist())
        assert any(not set(r.tokens.tolist()) <= seen for rounds in whole for r in rounds[:-1])


def test_a_shortlisted_head_gives_the_whole_heads_logits_at_its_ids(target_model):
    verifier = EarlyExitVerifier(target_model)
    hidden = torch.randn(3, target_model.config.text_config.hidden_size)  # (m, d)
    ids = shortlist_ids(8, verifier.stack.vocab_size, [40, 9, 40])
    assert ids.tolist() == [*range(8), 9, 40]
    layer = verifier.exit_layers[0]
    whole = verifier.exit_logits(layer, hidden)  # (m, V)
    short = verifier.exit_logits(layer, hidden, verifier.stack.shortlist(ids))
    assert torch.allclose(short[:, ids], whole[:, ids], atol=1e-5)
    rest = torch.ones(verifier.stack.vocab_size, dtype=torch.bool)
    rest[ids] = False
    assert torch.isinf(short[:, rest]).all() and (short[:, rest] < 0).all()
    assert shortlist_ids(0, 100, [5]) is None and shortlist_ids(100, 100, [5]) is None  # the whole vocabulary
