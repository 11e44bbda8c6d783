"""Every reply the action grammar accepts parses with nav.grammar.parse_action: enumerated from its
structure, and sampled from the token automaton xgrammar compiles over the project's tokenizer."""

from __future__ import annotations

import itertools
import math
import random
import re

import pytest

from edge_spec_ros.models.grammar import book_for
from edge_spec_ros.nav.action_grammar import (
    ANGLE_WORDS, DIRECTIONS, DISTANCE_WORDS, MOVE_VERBS, SIDES, STOP_TAILS, STOP_VERBS, TURN_VERBS,
    action_phrase_regex, action_regex, number_regex,
)
from edge_spec_ros.nav.config import SIZES, NavConfig
from edge_spec_ros.nav.grammar import ANGLE_UNITS, DISTANCE_UNITS, parse_action

VOCAB = 640  # the shipped pair's
REASONINGS = ("", "Reasoning: the bottle is ahead.", "I see it. Action words in passing, e.g. action",
              "Reasoning: turn left small? No; the door.\nStill thinking", "ünïcode ＡＣＴＩＯＮ text")


def _largest(regex: str) -> list[str]:
    """Candidate numbers near the top of what ``regex`` may accept, and a random spread."""
    rng = random.Random(0)
    out = [f"{w}.{f}" for w in ("9", "99", "999", "9999", "99999", "199", "699", "799") for f in ("99", "9")]
    out += [str(rng.randrange(10 ** rng.randint(1, 6))) + rng.choice(["", ".5", ".05"]) for _ in range(500)]
    return [n for n in out if re.fullmatch(regex, n)]


@pytest.mark.parametrize("config", [NavConfig(), NavConfig(absurd_distance_m=2.0, absurd_angle_rad=math.pi)])
def test_numbers_stay_within_the_sanity_bounds(config):
    for units, words, bound in ((DISTANCE_UNITS, DISTANCE_WORDS, config.absurd_distance_m),
                                (ANGLE_UNITS, ANGLE_WORDS, config.absurd_angle_rad)):
        for word in words:
            regex = number_regex(bound, units[word])
            if regex is None:
                continue
            found = _largest(regex)
            assert found, word
            assert max(float(n) * units[word] for n in found) <= bound


def _actions(config: NavConfig) -> list[str]:
    """Every action's shape, with the top and bottom numbers of each unit."""
    def quantities(units, words, bound):
        out = list(SIZES)
        for word in words:
            regex = number_regex(bound, units[word])
            if regex is not None:
                out += [f"{n} {word}" for n in ("0", max(_largest(regex), key=float))]
        return out

    moves = [f"{v} {d} {by}{q}" for v, d, by, q in itertools.product(
        MOVE_VERBS, DIRECTIONS, ("", "by "), quantities(DISTANCE_UNITS, DISTANCE_WORDS, config.absurd_distance_m))]
    turns = [f"{v} {s} {by}{q}" for v, s, by, q in itertools.product(
        TURN_VERBS, SIDES, ("", "by "), quantities(ANGLE_UNITS, ANGLE_WORDS, config.absurd_angle_rad))]
    return moves + turns + [v + t for v, t in itertools.product(STOP_VERBS, STOP_TAILS)]


@pytest.mark.parametrize("config", [NavConfig(), NavConfig(absurd_distance_m=2.0, absurd_angle_rad=math.pi)])
def test_every_enumerated_reply_matches_and_parses(config):
    actions = _actions(config)
    assert len(actions) > 300
    for i, action in enumerate(actions):
        reasoning = REASONINGS[i % len(REASONINGS)]
        for sep, period in (("\n", "."), (" ", "")):
            reply = f"{reasoning}{sep}Action: {action}{period}"
            assert re.fullmatch(action_regex(config), reply), reply
            parsed = parse_action(reply + "<|im_end|>", config)
            assert parsed.ok, (reply, parsed.error)
            assert parsed.action.text == action


def test_what_the_grammar_refuses():
    regex = action_regex()
    for reply in ("Action: stop", "Reasoning: a: b Action: stop", " Action: jump", " Action: move forward 100 m",
                  " Action: turn left 720 degrees", " Action: stop Action: stop", " Action: move forward -1 m"):
        assert not re.fullmatch(regex, reply), reply
    assert re.fullmatch(action_phrase_regex(), "turn left 699.99 degrees")


@pytest.fixture(scope="module")
def constraint(tokenizer):
    return book_for(tokenizer, VOCAB).get("action")


def _walk(constraint, tokenizer, rng: random.Random) -> list[int]:
    """A random reply of the automaton: a few uniformly drawn reasoning tokens, the marker's tokens,
    then uniform draws among the allowed tokens (the stop token half the time it is allowed)."""
    state, out = constraint.start(), []
    marker = tokenizer(rng.choice(["\nAction:", " Action:"])).input_ids
    for _ in range(rng.randint(0, 12)):
        allowed = state.mask().nonzero().flatten().tolist()
        token = rng.choice(allowed)
        if token in constraint.stop_tokens:
            continue
        state.advance(token)
        out.append(token)
    for token in marker:
        if not state.mask()[token]:  # the reasoning ended in a way the marker's first token cannot follow
            return []
        state.advance(token)
        out.append(token)
    for _ in range(64):
        allowed = state.mask().nonzero().flatten().tolist()
        stops = [t for t in allowed if t in constraint.stop_tokens]
        token = stops[0] if stops and rng.random() < 0.5 else rng.choice(allowed)
        state.advance(token)
        out.append(token)
        if token in constraint.stop_tokens:
            return out
    raise AssertionError(f"no end after 64 tokens: {tokenizer.decode(out)!r}")


def test_replies_sampled_from_the_token_automaton_parse(constraint, tokenizer):
    rng = random.Random(7)
    replies = [r for r in (_walk(constraint, tokenizer, rng) for _ in range(300)) if r]
    assert len(replies) > 200
    kinds = set()
    for tokens in replies:
        text = tokenizer.decode(tokens)
        parsed = parse_action(text, NavConfig())
        assert parsed.ok, (text, parsed.error)
        kinds.add(parsed.action.kind)
    assert kinds == {"forward", "turn", "stop"}


def test_the_mask_never_allows_a_special_token_but_the_stop_token(constraint, tokenizer):
    state = constraint.start()
    specials = [i for i in tokenizer.all_special_ids if i not in constraint.stop_tokens]
    padding = list(range(len(tokenizer), VOCAB))
    for token in tokenizer("Reasoning: ok. Action: stop").input_ids:
        mask = state.mask()
        assert not mask[specials + padding].any()
        state.advance(token)
    assert state.mask()[list(constraint.stop_tokens)].all()
    assert state.masks_along([2])[1].nonzero().flatten().tolist() == list(constraint.stop_tokens)  # after the end
