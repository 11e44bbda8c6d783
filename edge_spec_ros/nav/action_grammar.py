r"""The reply format of a navigation decision as a regular expression, for grammar-constrained decoding.

A reply is reasoning, then ``Action:`` and one action of ``nav.grammar``'s grammar, an optional
period, then the end of the turn (the tokenizer's end-of-turn token, which the constraint allows once the
reply is complete)::

    reply     := ["Reasoning: "] reasoning ("\n" | " ") "Action: " action ["."]
    reasoning := any text without a colon, newlines included (possibly empty; at most 120 characters
                 in ``action-brief``, so that a model never trained on the format ends its reply too)
    action    := move | turn | stop, in lower case, one space between words:
    move      := ("move" | "go" | "walk") " " direction " " ["by "] (size | number " " distance-unit)
    turn      := ("turn" | "rotate") " " ("left" | "right") " " ["by "] (size | number " " angle-unit)
    stop      := ("stop" | "stay" | "halt") [" here" | " now" | " still" | " in place"]

Every reply the expression accepts parses with ``nav.grammar.parse_action`` (test/nav/test_action_grammar.py
samples and enumerates them): the parser reads the text after the LAST ``Action:``, and the action has no
colon, so the marker the format writes is the last one whatever the reasoning says; the separator before
``Action:`` keeps the marker's word boundary. The reasoning has no colon so that the first colon is the
marker's: from there on only an action may follow (free text with colons would leave the automaton in
two places at once, reasoning or action, and the mask would not steer the action at all). It is a
subset of what the parser takes (one spelling per word, lower case, numbers without sign or exponent):
it only has to parse, not to cover every parse.

Numbers are bounded by the sanity bounds of the ``NavConfig`` given (``absurd_*``: the parser refuses a
number beyond them): a unit of size s takes up to d integer digits with 10^d · s within the bound, and
one digit more where the leading digit keeps it there, with up to two decimals.
"""

from __future__ import annotations

import math

from edge_spec_ros.nav.config import SIZES, NavConfig
from edge_spec_ros.nav.grammar import ANGLE_UNITS, DISTANCE_UNITS

GRAMMAR_ID = "action"  # the name the Open message and the verifier know this grammar by
BRIEF_GRAMMAR_ID = "action-brief"  # the same with at most BRIEF_REASONING_CHARS characters of reasoning
BRIEF_REASONING_CHARS = 120
MOVE_VERBS = ("move", "go", "walk")
DIRECTIONS = ("forward", "forwards", "backward", "backwards", "back")
TURN_VERBS = ("turn", "rotate")
SIDES = ("left", "right")
STOP_VERBS = ("stop", "stay", "halt")
STOP_TAILS = ("", " here", " now", " still", " in place")
# the units a constrained reply writes (ASCII words of nav.grammar's tables)
DISTANCE_WORDS = ("mm", "cm", "m", "meters", "metres", "centimeters")
ANGLE_WORDS = ("degrees", "deg", "rad", "radians")
SEPARATORS = (" ", "\n")
MARKER = "Action: "
REASONING_PREFIX = "Reasoning: "


def _alt(words) -> str:
    return "(" + "|".join(sorted(set(words), key=lambda w: (-len(w), w))) + ")"


def number_regex(bound: float, scale: float) -> str | None:
    """Non-negative decimals x (up to two decimals) with x · scale < ``bound``; None when not even a
    one-digit number fits."""
    limit = bound / scale
    if limit < 10:
        lead = math.floor(limit)
        return None if lead < 1 else f"[0-{lead - 1}](\\.[0-9]{{1,2}})?"
    d = math.floor(math.log10(limit))
    lead = math.floor(limit / 10 ** d)
    whole = f"[0-9]{{1,{d}}}" if lead < 2 else f"([0-9]{{1,{d}}}|[1-{lead - 1}][0-9]{{{d}}})"
    return whole + "(\\.[0-9]{1,2})?"


def _quantities(units: dict[str, float], words: tuple[str, ...], bound: float) -> list[str]:
    by_scale: dict[float, list[str]] = {}
    for word in words:
        by_scale.setdefault(units[word], []).append(word)
    out = []
    for scale, names in sorted(by_scale.items()):
        number = number_regex(bound, scale)
        if number is not None:
            out.append(f"{number} {_alt(names)}")
    return out


def action_phrase_regex(config: NavConfig | None = None) -> str:
    """One action of ``nav.grammar`` (no marker, no period)."""
    config = config or NavConfig()
    sizes = list(SIZES)
    distance = _alt(sizes + _quantities(DISTANCE_UNITS, DISTANCE_WORDS, config.absurd_distance_m))
    angle = _alt(sizes + _quantities(ANGLE_UNITS, ANGLE_WORDS, config.absurd_angle_rad))
    move = f"{_alt(MOVE_VERBS)} {_alt(DIRECTIONS)} (by )?{distance}"
    turn = f"{_alt(TURN_VERBS)} {_alt(SIDES)} (by )?{angle}"
    stop = f"{_alt(STOP_VERBS)}({'|'.join(t for t in STOP_TAILS if t)})?"
    return f"({move}|{turn}|{stop})"


def action_regex(config: NavConfig | None = None, max_reasoning_chars: int | None = None) -> str:
    """The whole reply: an optional ``Reasoning: ``, reasoning without a colon (at most
    ``max_reasoning_chars`` characters: then every reply ends, whatever the model), a separator,
    ``Action: ``, one action, an optional period."""
    reasoning = "[^:]*" if max_reasoning_chars is None else f"[^:]{{0,{max_reasoning_chars}}}"
    return f"({REASONING_PREFIX})?{reasoning}[ \\n]{MARKER}{action_phrase_regex(config)}\\.?"
