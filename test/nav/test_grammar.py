"""Parsing the model's "reasoning + action" text into NavAction (edge_spec_ros/nav/grammar.py)."""

from __future__ import annotations

import math
import random

import pytest

from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.grammar import QUOTE_LIMIT, NavAction, ParseResult, parse_action, quote
from edge_spec_ros.nav.planner import plan_motion

CONFIG = NavConfig()
DEG = math.pi / 180.0


def ok(text: str, config: NavConfig = CONFIG) -> NavAction:
    result = parse_action(text, config)
    assert result.error is None, result.error
    assert result.action is not None
    return result.action


def err(text: str, config: NavConfig = CONFIG) -> str:
    result = parse_action(text, config)
    assert result.action is None, result.action
    assert isinstance(result.error, str) and result.error
    return result.error


# --- word actions ------------------------------------------------------------------------------------

@pytest.mark.parametrize("verb", ["move", "go"])
@pytest.mark.parametrize(("size", "metres"), [("small", 0.25), ("medium", 0.5), ("large", 1.0)])
def test_word_forward(verb, size, metres):
    """'move|go forward small|medium|large' gives the configured positive distance."""
    action = ok(f"Action: {verb} forward {size}")
    assert (action.kind, action.distance_m, action.angle_rad) == ("forward", metres, 0.0)


@pytest.mark.parametrize("direction", ["backward", "backwards", "back"])
@pytest.mark.parametrize(("size", "metres"), [("small", 0.25), ("medium", 0.5), ("large", 1.0)])
def test_word_backward(direction, size, metres):
    """'move backward <size>' gives the same magnitude as forward, negative."""
    action = ok(f"Action: move {direction} {size}")
    assert (action.kind, action.distance_m, action.angle_rad) == ("forward", -metres, 0.0)


@pytest.mark.parametrize(("direction", "sign"), [("left", 1.0), ("right", -1.0)])
@pytest.mark.parametrize(("size", "degrees"), [("small", 15), ("medium", 30), ("large", 60)])
def test_word_turn(direction, sign, size, degrees):
    """'turn left|right <size>' gives ±15/30/60 degrees in radians, left positive (REP 103)."""
    action = ok(f"Action: turn {direction} {size}")
    assert action.kind == "turn" and action.distance_m == 0.0
    assert action.angle_rad == pytest.approx(sign * degrees * DEG, abs=1e-12)


@pytest.mark.parametrize("phrase", ["stop", "Stop.", "STAY", "halt", "stay still", "stop here", "halt now"])
def test_stop_words(phrase):
    """'stop', 'stay' and 'halt' (optionally 'here/now/still') are a stop with zero magnitudes."""
    action = ok(f"Reasoning: I reached the red chair. Action: {phrase}")
    assert (action.kind, action.distance_m, action.angle_rad) == ("stop", 0.0, 0.0)


def test_word_magnitudes_follow_config():
    """Word magnitudes are read from NavConfig, not hard-coded."""
    config = NavConfig(forward_small_m=0.1, turn_large_rad=1.2)
    assert ok("Action: move forward small", config).distance_m == 0.1
    assert ok("Action: turn right large", config).angle_rad == -1.2


# --- numeric actions and units -------------------------------------------------------------------------

@pytest.mark.parametrize(("phrase", "metres"), [
    ("move forward 75 cm", 0.75),
    ("move forward 75cm", 0.75),
    ("move forward 0.5 m", 0.5),
    ("move forward 0.5m", 0.5),
    ("move forward 2 meters", 2.0),
    ("move forward 1 meter", 1.0),
    ("go forward 1.5 metres", 1.5),
    ("move forward 120 centimeters", 1.2),
    ("move forward 250 mm", 0.25),
    ("move forward .5 m", 0.5),
    ("move forward by 30 cm", 0.3),
    ("move backward 50 cm", -0.5),
    ("go backwards 1 m", -1.0),
    ("move forward 0 cm", 0.0),
])
def test_numeric_distance(phrase, metres):
    """NaVILA-style distances with mm/cm/m/meter(s)/metre(s)/centimeter(s) convert to signed metres."""
    action = ok(f"Action: {phrase}")
    assert action.kind == "forward"
    assert action.distance_m == pytest.approx(metres, abs=1e-12)


@pytest.mark.parametrize(("phrase", "radians"), [
    ("turn left 30 degrees", 30 * DEG),
    ("turn left 1 degree", 1 * DEG),
    ("turn right 45 deg", -45 * DEG),
    ("turn right 45deg", -45 * DEG),
    ("turn left 90°", 90 * DEG),
    ("turn left 0.5 rad", 0.5),
    ("turn right 1 radian", -1.0),
    ("turn left 2 radians", 2.0),
    ("turn right by 15 degrees", -15 * DEG),
])
def test_numeric_angle(phrase, radians):
    """NaVILA-style angles with degrees/deg/°/rad/radian(s) convert to signed radians."""
    action = ok(f"Action: {phrase}")
    assert action.kind == "turn"
    assert action.angle_rad == pytest.approx(radians, abs=1e-12)


def test_sign_conventions():
    """REP 103: forward and left are positive, backward and right negative."""
    assert ok("Action: move forward 10 cm").distance_m > 0
    assert ok("Action: move backward 10 cm").distance_m < 0
    assert ok("Action: turn left 10 degrees").angle_rad > 0
    assert ok("Action: turn right 10 degrees").angle_rad < 0


def test_beyond_limits_is_not_an_error():
    """Magnitudes past the safety limits (but sane) parse unclamped; the planner clamps them."""
    assert ok("Action: move forward 10 m").distance_m == 10.0
    assert ok("Action: turn left 270 degrees").angle_rad == pytest.approx(1.5 * math.pi)
    plan = plan_motion(ok("Action: move forward 10 m"), CONFIG)
    assert plan.clamped and any(r.startswith("max_distance_m") for r in plan.reasons)


# --- locating the action, reasoning, tolerance --------------------------------------------------------

def test_reasoning_and_action():
    """The paper's example: reasoning without 'Reasoning:', action after 'Action:'."""
    action = ok("Reasoning: the silver bottle is ahead on the left. Action: turn left small")
    assert action.reasoning == "the silver bottle is ahead on the left."
    assert action.text == "turn left small"
    assert action.angle_rad == pytest.approx(15 * DEG)


def test_reasoning_without_prefix_and_multiline():
    """Reasoning is everything before the marker, stripped, kept verbatim when it has no prefix."""
    action = ok("I see the red box ahead.\nThere is also a blue box.\nAction: move forward medium")
    assert action.reasoning == "I see the red box ahead.\nThere is also a blue box."
    assert ok("Action: stop").reasoning == ""


def test_last_action_marker_wins():
    """With several 'Action:' markers, the last one is the action; earlier ones stay in reasoning."""
    action = ok("Reasoning: first I thought Action: turn left small, but no. Action: move backward large")
    assert action.distance_m == -1.0 and action.kind == "forward"
    assert action.reasoning == "first I thought Action: turn left small, but no."


@pytest.mark.parametrize("text", ["ACTION: Turn LEFT Small", "action : turn left small",
                                  "Reasoning: x\naction:turn left small"])
def test_marker_and_phrase_case_insensitive(text):
    """The marker and the phrase are case-insensitive and may have spaces around the colon."""
    assert ok(text).angle_rad == pytest.approx(15 * DEG)


@pytest.mark.parametrize("text", [
    "Action:   move    forward   small  .",
    "Action: move forward small.",
    "Action: move forward small!",
    'Action: "move forward small"',
    "Action: **move forward small**",
    "Action: `move forward small`",
    "Action: move forward, small",
    "Action: move forward small. Then I will look for the bottle.",
    "Action:\n  move forward small\nThe bottle should then be close.",
    "Action: move forward small<|im_end|>",
    "Action: - move forward small",
])
def test_tolerant_of_spaces_and_punctuation(text):
    """Extra spaces, quotes, markdown, commas, a trailing period, a later sentence or line are ignored."""
    action = ok(text)
    assert (action.kind, action.distance_m) == ("forward", 0.25)


def test_text_is_phrase_as_found():
    """NavAction.text keeps the phrase's original case, without the trailing period."""
    assert ok("Reasoning: go. Action: Turn Right 45 Deg.").text == "Turn Right 45 Deg"


def test_decimal_point_is_not_a_sentence_end():
    """'0.5 m.' is 0.5 m: a period followed by a digit belongs to the number."""
    assert ok("Action: move forward 0.5 m.").distance_m == 0.5
    assert ok("Action: turn left 1.25 rad. Then look.").angle_rad == 1.25


def test_no_marker_parses_last_line():
    """Without 'Action:', the last non-empty line is the action and the lines before it the reasoning."""
    action = ok("Reasoning: the door is on the right.\nturn right medium\n\n")
    assert action.angle_rad == pytest.approx(-30 * DEG)
    assert action.reasoning == "the door is on the right."
    assert ok("stop").kind == "stop"


def test_no_marker_bad_last_line_is_error():
    """Without 'Action:' and with a last line that is no action, the error says so and quotes it."""
    message = err("Reasoning: the door is on the right.\nI am not sure what to do")
    assert "no 'Action:' marker" in message
    assert "'I am not sure what to do'" in message


# --- errors ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "quoted"), [
    ("Action: jump forward small", "'jump forward small'"),
    ("Action: fly to the moon", "'fly to the moon'"),
    ("Action: turn up small", "'turn up small'"),
    ("Action: turn left huge", "'huge'"),
    ("Action: move sideways small", "'move sideways small'"),
    ("Action: move forward", "'move forward'"),
    ("Action: turn left", "'turn left'"),
    ("Action: move forward 5", "'5'"),
    ("Action: move forward 3 feet", "'feet'"),
    ("Action: move forward 5 km", "'km'"),
    ("Action: turn left 30 cm", "'cm'"),
    ("Action: move forward 30 degrees", "'degrees'"),
    ("Action: move forward -5 cm", "'-5'"),
    ("Action: turn right -30 degrees", "'-30'"),
    ("Action: move forward 0,5 m", "'move forward 0,5 m'"),
    ("Action: move forward small and turn left", "'move forward small and turn left'"),
])
def test_unparseable_action_is_error_quoting_text(text, quoted):
    """Unknown verbs, directions, magnitudes, units and negative numbers are errors that quote the text."""
    assert quoted in err(text)


@pytest.mark.parametrize("phrase", ["move forward nan cm", "move forward NaN m", "turn left inf degrees",
                                    "turn right infinity deg", "move backward -inf m", "move forward 1e999 m",
                                    "turn left 1e400 rad"])
def test_non_finite_numbers_are_errors(phrase):
    """nan, inf and numbers that overflow a float are errors mentioning 'non-finite', never exceptions."""
    message = err(f"Action: {phrase}")
    assert "non-finite" in message and repr(phrase) in message


@pytest.mark.parametrize("phrase", ["move forward 500 m", "move forward 100001 cm", "turn left 5000 degrees",
                                    "turn right 13 rad", "move forward 1e300 m"])
def test_absurd_numbers_are_errors(phrase):
    """Numbers beyond the sanity bounds (NavConfig.absurd_*) are errors, not clamped actions."""
    message = err(f"Action: {phrase}")
    assert "absurd" in message and repr(phrase) in message


def test_sanity_bound_is_inclusive_and_configurable():
    """Exactly the sanity bound parses; just above it is an error; the bound comes from NavConfig."""
    assert ok("Action: move forward 100 m").distance_m == 100.0
    err("Action: move forward 100.01 m")
    err("Action: move forward 10 m", NavConfig(absurd_distance_m=5.0))


@pytest.mark.parametrize("text", ["", "   ", "\n\n \t\n", "<|im_end|>", "<|im_end|>\n<|endoftext|>"])
def test_empty_output_is_error(text):
    """Empty or whitespace-only output (special tokens aside) is an 'empty model output' error."""
    assert "empty model output" in err(text)


@pytest.mark.parametrize("text", ["Reasoning: the box is ahead. Action:", "Action:   \n \n",
                                  "Action: turn left small. Action:", "Action: ...", "Action: **"])
def test_marker_with_nothing_after_is_error(text):
    """An 'Action:' (the last one) with nothing after it is an error that quotes the output."""
    message = err(text)
    assert "no action after the last 'Action:'" in message
    assert "Action:" in message.split(" in ", 1)[1]


def test_error_quote_is_truncated():
    """Quoted text is cut to QUOTE_LIMIT characters, so a runaway output gives a short message."""
    garbage = "blah " * 400
    for text in (f"Action: {garbage}", f"Reasoning: {garbage}\nAction:"):
        message = err(text)
        assert "..." in message
        assert len(message) < QUOTE_LIMIT + 400
    assert quote("x" * 500) == repr("x" * (QUOTE_LIMIT - 3) + "...")
    assert quote("abcdef", limit=5, tail=True) == repr("...ef")
    assert quote("short") == "'short'"


def test_non_str_input_is_error():
    """A non-str input is reported as an error rather than raising."""
    assert "str" in err(None)  # type: ignore[arg-type]
    assert "str" in err(b"Action: stop")  # type: ignore[arg-type]


# --- data classes ----------------------------------------------------------------------------------

def test_nav_action_validates():
    """NavAction rejects unknown kinds, non-finite values and a magnitude its kind does not use."""
    for bad in (dict(kind="jump"), dict(kind="forward", distance_m=math.nan),
                dict(kind="turn", angle_rad=math.inf), dict(kind="stop", distance_m=1.0),
                dict(kind="forward", angle_rad=0.1), dict(kind="turn", distance_m=0.1)):
        with pytest.raises(ValueError):
            NavAction(**bad)
    assert NavAction("turn", angle_rad=-0.5).angle_rad == -0.5


def test_parse_result_holds_exactly_one():
    """ParseResult holds an action or an error, never both or neither; ok tells which."""
    with pytest.raises(ValueError):
        ParseResult()
    with pytest.raises(ValueError):
        ParseResult(action=NavAction("stop"), error="x")
    assert ParseResult(action=NavAction("stop")).ok and not ParseResult(error="x").ok


# --- property-style ----------------------------------------------------------------------------------

WORDS = ["Action:", "action :", "Reasoning:", "move", "go", "walk", "turn", "rotate", "forward", "backward",
         "back", "left", "right", "stop", "stay", "halt", "small", "medium", "large", "by", "cm", "m", "mm",
         "meters", "degrees", "deg", "rad", "°", "nan", "inf", "-inf", "1e999", "0", "-3", "0.5", "75", "1e3",
         ".", ",", "!", "\n", "**", '"', "<|im_end|>", "the", "bottle", "é", "\t", "Action:\n"]


def test_random_text_never_raises_and_actions_are_sane():
    """Thousands of random outputs: never an exception, exactly one of action/error, sane actions."""
    rng = random.Random(20240611)
    configs = [CONFIG, NavConfig(max_distance_m=0.5, absurd_distance_m=3.0, max_angle_rad=1.0, absurd_angle_rad=2.0)]
    parsed = 0
    for i in range(4000):
        config = configs[i % 2]
        if rng.random() < 0.2:
            text = "".join(chr(rng.randrange(0, 0x3000)) for _ in range(rng.randrange(0, 40)))
        else:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(0, 9)))
            if rng.random() < 0.5:
                verb = rng.choice(["move forward", "move backward", "turn left", "turn right"])
                number = rng.choice([f"{rng.uniform(0, 400):.2f}", f"{rng.expovariate(0.5):.3f}",
                                     f"{rng.uniform(-5, 1e4):g}", "nan", "inf"])
                units = ["cm", "m", "meters", "mm"] if verb.startswith("move") else ["degrees", "deg", "rad", "°"]
                unit = rng.choice(units) if rng.random() < 0.8 else rng.choice(["", "km", "cm", "rad", "%"])
                magnitude = f"{number} {unit}" if rng.random() < 0.8 else rng.choice(["small", "medium", "large"])
                text += f" Action: {verb} {magnitude}"
        result = parse_action(text, config)
        assert (result.action is None) != (result.error is None), text
        if result.error is not None:
            assert isinstance(result.error, str) and len(result.error) < 1000
            continue
        parsed += 1
        action = result.action
        assert math.isfinite(action.distance_m) and math.isfinite(action.angle_rad)
        assert abs(action.distance_m) <= config.absurd_distance_m
        assert abs(action.angle_rad) <= config.absurd_angle_rad
        plan = plan_motion(action, config)
        assert abs(plan.linear_x) <= config.max_linear_speed and abs(plan.angular_z) <= config.max_angular_speed
        assert 0 <= plan.duration_s <= config.max_duration_s
    assert parsed > 500  # the generator does exercise the success path


# --- unicode ------------------------------------------------------------------------------------------

ZWSP, ZWNJ, ZWJ, WJ, BOM, SHY, NBSP, NNBSP = "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u00a0", "\u202f"


@pytest.mark.parametrize("text", [
    "Action: move forward medium" + ZWSP,
    "Action: move" + ZWSP + " forward medium",
    "Action: mo" + ZWJ + "ve forward med" + ZWNJ + "ium",
    BOM + "Action: move forward medium",
    "Action: move" + NBSP + "forward" + NNBSP + "medium",
    "Action:" + WJ + " move for" + SHY + "ward medium",
    "Action: ｍｏｖｅ ｆｏｒｗａｒｄ ｍｅｄｉｕｍ",  # full-width letters
    "Action:\u3000move\u3000forward\u3000medium",  # ideographic spaces
    "Action: move forward \u202emedium\u202c",  # bidi controls
])
def test_unicode_spaces_and_invisible_characters_are_normalised(text):
    """NFKC, format characters removed: the same action as the plain ASCII text."""
    action = ok(text)
    assert (action.kind, action.distance_m) == ("forward", 0.5) and action.text == "move forward medium"


@pytest.mark.parametrize(("text", "degrees"), [
    ("Action: turn left ３０ degrees", 30.0),  # full-width digits
    ("Action: turn left 3\u200b0 degrees", 30.0),
    ("Action: turn right ４５°", -45.0),
    ("Action: turn left 1\u00a0rad", 1.0 / DEG),
])
def test_unicode_digits_and_spaces_in_numbers(text, degrees):
    assert ok(text).angle_rad == pytest.approx(degrees * DEG)


@pytest.mark.parametrize("minus", ["\u2212", "\u2013", "\uff0d"])
def test_unicode_minus_signs_read_as_negative_numbers(minus):
    """A Unicode minus is a minus: a negative number is refused, with the usual message."""
    assert "negative distance" in err(f"Action: move forward {minus}5 cm")


@pytest.mark.parametrize(("text", "letter"), [
    ("Action: m\u043eve forward medium", "U+043E CYRILLIC SMALL LETTER O"),
    ("Action: turn l\u0435ft small", "U+0435 CYRILLIC SMALL LETTER IE"),
    ("Action: st\u03bfp", "U+03BF GREEK SMALL LETTER OMICRON"),
])
def test_look_alike_letters_are_refused_and_named(text, letter):
    """Look-alikes from other scripts are not folded into ASCII: the error names the character."""
    assert letter in err(text)


def test_absurd_magnitudes_are_refused_not_clamped_while_large_ones_are_clamped_by_the_planner():
    """The documented policy: beyond the sanity bound an error; between the safety limit and the bound
    a valid action (the planner clamps it)."""
    assert "absurd" in err(f"Action: move forward {CONFIG.absurd_distance_m * 1.01} m")
    assert "absurd" in err("Action: turn left 99999 degrees")
    big = ok(f"Action: move forward {(CONFIG.max_distance_m + CONFIG.absurd_distance_m) / 2} m")
    assert CONFIG.max_distance_m < big.distance_m < CONFIG.absurd_distance_m
