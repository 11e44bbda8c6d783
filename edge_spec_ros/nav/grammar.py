"""Parse the navigation model's decoded text ("reasoning + action") into a ``NavAction``.

The model answers with one line of reasoning, then ``Action:`` and one action, e.g.::

    Reasoning: the silver bottle is ahead on the left. Action: turn left small

The action is the text after the LAST ``Action:`` marker (case-insensitive), up to the end of its
first non-empty line and of its first sentence (so a trailing period, or a remark after it, is
ignored). Without a marker, the last non-empty line is parsed as the action. The text before the
action is the reasoning, without a leading ``Reasoning:``. Chat special tokens such as
``<|im_end|>`` are ignored.

Grammar (case-insensitive; extra spaces, commas, quotes and markdown emphasis are tolerated)::

    action    := move | turn | stop
    move      := ("move" | "go" | "walk") direction ["by"] magnitude
    direction := "forward" | "forwards" | "backward" | "backwards" | "back"
    turn      := ("turn" | "rotate") ("left" | "right") ["by"] magnitude
    stop      := ("stop" | "stay" | "halt") ["here" | "now" | "still" | "in place"]
    magnitude := "small" | "medium" | "large" | number [" "] unit
    unit      := distance units for a move: mm, cm, m, meter(s), metre(s), centimeter(s), ...
               | angle units for a turn: degree(s), deg, °, rad, radian(s)

Word magnitudes come from ``NavConfig``. Signs follow ROS REP 103: forward and left (counter-
clockwise) are positive, backward and right are negative; the number itself must be >= 0.

Unicode: the text is normalised before parsing (``normalize``): NFKC (full-width letters and digits,
non-breaking and other compatibility spaces become their ASCII forms), format characters (zero-width
spaces and joiners, word joiner, byte-order mark, soft hyphen, bidirectional controls) are removed,
and Unicode minus signs and dashes become "-". Look-alike letters from other scripts (a Cyrillic
"о" in "move") are not folded: an action word must be ASCII after NFKC, and the error names the
character. ``NavAction.text`` and ``reasoning`` are the normalised text.

``parse_action`` never raises on model output: empty text, an ``Action:`` with nothing after it,
unknown verbs or units, negative, non-finite ("nan cm", "inf degrees") or absurd numbers (beyond
``NavConfig.absurd_*``) come back as ``ParseResult.error``, a message that quotes the offending text
(truncated to ``QUOTE_LIMIT`` characters).

Absurd magnitudes are refused, not clamped. A number beyond the sanity bound ("move forward 5 km",
"turn left 99999 degrees", a runaway digit string) says the decode went wrong, so the whole action is
untrustworthy, its direction included; clamping it would execute a garbled decision at the largest
motion the safety limits allow. Magnitudes beyond the safety limits but within the sanity bounds are
plausible, merely too large: they are valid actions, and the planner clamps them and records that
it did.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from edge_spec_ros.nav.config import SIZES, NavConfig

ActionKind = Literal["forward", "turn", "stop"]
KINDS: tuple[str, ...] = ("forward", "turn", "stop")
QUOTE_LIMIT = 120  # characters of the offending text quoted in an error message

EXPECTED = ("expected 'move forward|backward small|medium|large', 'move forward|backward <number> cm|m', "
            "'turn left|right small|medium|large', 'turn left|right <number> degrees|rad' or 'stop'")

DISTANCE_UNITS: dict[str, float] = {
    "mm": 0.001, "millimeter": 0.001, "millimeters": 0.001, "millimetre": 0.001, "millimetres": 0.001,
    "cm": 0.01, "centimeter": 0.01, "centimeters": 0.01, "centimetre": 0.01, "centimetres": 0.01,
    "m": 1.0, "meter": 1.0, "meters": 1.0, "metre": 1.0, "metres": 1.0,
}
ANGLE_UNITS: dict[str, float] = {
    "deg": math.pi / 180.0, "degs": math.pi / 180.0, "degree": math.pi / 180.0,
    "degrees": math.pi / 180.0, "°": math.pi / 180.0,
    "rad": 1.0, "rads": 1.0, "radian": 1.0, "radians": 1.0,
}


@dataclass(frozen=True)
class NavAction:
    """One parsed action. ``distance_m`` and ``angle_rad`` are signed (REP 103: forward, left > 0).

    kind: "forward" (a move, forward or backward: ``distance_m``), "turn" (in place: ``angle_rad``) or
    "stop"; the quantity a kind does not use is 0. text: the action phrase as found in the output;
    reasoning: the text before it, without a leading "Reasoning:".
    """

    kind: ActionKind
    distance_m: float = 0.0
    angle_rad: float = 0.0
    text: str = ""
    reasoning: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"NavAction.kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        for name in ("distance_m", "angle_rad"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"NavAction.{name} must be a finite number, got {value!r}")
        if self.kind != "forward" and self.distance_m != 0:
            raise ValueError(f"a {self.kind!r} action has distance_m 0, got {self.distance_m!r}")
        if self.kind != "turn" and self.angle_rad != 0:
            raise ValueError(f"a {self.kind!r} action has angle_rad 0, got {self.angle_rad!r}")


@dataclass(frozen=True)
class ParseResult:
    """Exactly one of ``action`` (success) and ``error`` (a message quoting the bad text) is set."""

    action: NavAction | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.action is None) == (self.error is None):
            raise ValueError("ParseResult holds exactly one of action and error")

    @property
    def ok(self) -> bool:
        return self.action is not None


def quote(text: str, limit: int = QUOTE_LIMIT, tail: bool = False) -> str:
    """``repr`` of ``text``, cut to ``limit`` characters (keeping the end if ``tail``) with "..."."""
    if len(text) > limit:
        text = "..." + text[-(limit - 3):] if tail else text[: limit - 3] + "..."
    return repr(text)


_SPECIAL_TOKEN = re.compile(r"<\|[^<>|]{0,64}\|>")
_MARKER = re.compile(r"\baction\s*:", re.IGNORECASE)
_REASONING_PREFIX = re.compile(r"^reasoning\s*:\s*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?;](?=\s|$)")
_INNER_PUNCT = re.compile(r"[,;:!?\"'`*_()\[\]{}]|\.(?!\d)")
_EDGE = " \t\"'`*_()[]{}<>.,;:!?"
_NUMBER = r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?|nan|inf(?:inity)?)"
_QUANTITY = re.compile(rf"(?P<num>{_NUMBER})\s*(?P<unit>[a-z°]+)?")
_MOVE = re.compile(r"(?:move|go|walk)\s+(?P<dir>forwards?|backwards?|back)(?:\s+(?:by\s+)?(?P<mag>.+))?")
_TURN = re.compile(r"(?:turn|rotate)\s+(?P<dir>left|right)(?:\s+(?:by\s+)?(?P<mag>.+))?")
_STOP = re.compile(r"(?:stop|stay|halt)(?:\s+(?:here|now|still|in place))?")


_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"), "-")


def normalize(text: str) -> str:
    """NFKC, without format characters (category Cf: zero-width spaces and joiners, BOM, soft hyphen,
    bidi controls), with Unicode dashes and minus signs as "-"."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    return text.translate(_DASHES)


def _non_ascii_letter(phrase: str) -> str | None:
    """A description of the first non-ASCII letter in ``phrase`` (look-alikes stay unfolded)."""
    for ch in phrase:
        if ord(ch) > 127 and ch.isalpha():
            return f"{ch!r} (U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')})"
    return None


def parse_action(text: str, config: NavConfig) -> ParseResult:
    """Parse the model's decoded text into a ``NavAction``, or an error; never raises on bad text."""
    if not isinstance(text, str):
        return ParseResult(error=f"expected the model output as str, got {type(text).__name__}")
    cleaned = _SPECIAL_TOKEN.sub("", normalize(text))
    if not cleaned.strip():
        return ParseResult(error=f"empty model output: {quote(text)}")

    markers = list(_MARKER.finditer(cleaned))
    if markers:
        before, after = cleaned[: markers[-1].start()], cleaned[markers[-1].end():]
        context = "after the last 'Action:'"
    else:
        lines = [line for line in cleaned.splitlines() if line.strip()]
        before, after = "\n".join(lines[:-1]), lines[-1]
        context = "no 'Action:' marker, and the last line is not an action"

    line = next((line for line in after.splitlines() if line.strip()), "")
    found = _SENTENCE_END.split(line, maxsplit=1)[0].strip(_EDGE).lstrip("->•").strip()
    if not found:
        return ParseResult(error=f"no action {context} in {quote(cleaned.strip(), tail=True)}")

    reasoning = _REASONING_PREFIX.sub("", before.strip()).strip()
    action, error = _parse_phrase(found, reasoning, config)
    if error is not None:
        return ParseResult(error=error if markers else f"{context}: {error}")
    return ParseResult(action=action)


def _parse_phrase(found: str, reasoning: str, config: NavConfig) -> tuple[NavAction | None, str | None]:
    phrase = " ".join(_INNER_PUNCT.sub(" ", found.lower()).split())
    if _STOP.fullmatch(phrase):
        return NavAction("stop", text=found, reasoning=reasoning), None

    if m := _MOVE.fullmatch(phrase):
        value, error = _magnitude(m["mag"], "forward", found, config)
        if error is not None:
            return None, error
        sign = 1.0 if m["dir"].startswith("forward") else -1.0
        return NavAction("forward", distance_m=sign * value, text=found, reasoning=reasoning), None

    if m := _TURN.fullmatch(phrase):
        value, error = _magnitude(m["mag"], "turn", found, config)
        if error is not None:
            return None, error
        sign = 1.0 if m["dir"] == "left" else -1.0
        return NavAction("turn", angle_rad=sign * value, text=found, reasoning=reasoning), None

    odd = _non_ascii_letter(phrase)
    if odd is not None:
        return None, f"cannot parse action {quote(found)}: it contains the non-ASCII letter {odd}; {EXPECTED}"
    return None, f"cannot parse action {quote(found)}: {EXPECTED}"


def _magnitude(mag: str | None, kind: str, found: str, config: NavConfig) -> tuple[float, str | None]:
    """The unsigned magnitude in SI units (m or rad) of a word or a number with a unit."""
    what = "distance" if kind == "forward" else "angle"
    if mag is None:
        return 0.0, f"missing {what} in action {quote(found)}: {EXPECTED}"
    if mag in SIZES:
        return (config.forward_distance(mag) if kind == "forward" else config.turn_angle(mag)), None

    m = _QUANTITY.fullmatch(mag)
    if m is None:
        return 0.0, f"unknown {what} {quote(mag)} in action {quote(found)}: {EXPECTED}"
    number = float(m["num"])
    if not math.isfinite(number):
        return 0.0, f"non-finite {what} {quote(m['num'])} in action {quote(found)}"
    if number < 0:
        return 0.0, (f"negative {what} {quote(m['num'])} in action {quote(found)}: "
                     "the direction comes from the words (forward/backward, left/right)")
    units, other = (DISTANCE_UNITS, ANGLE_UNITS) if kind == "forward" else (ANGLE_UNITS, DISTANCE_UNITS)
    unit = m["unit"]
    if unit is None:
        return 0.0, f"missing unit after {quote(m['num'])} in action {quote(found)}: {EXPECTED}"
    if unit not in units:
        expected_unit = "a distance unit" if kind == "forward" else "an angle unit"
        if unit in other:
            why = f"is {'an angle' if kind == 'forward' else 'a distance'} unit, not {expected_unit}"
        else:
            why = f"is not {expected_unit}"
        return 0.0, f"{quote(unit)} {why}, in action {quote(found)}: {EXPECTED}"

    value = number * units[unit]
    bound = config.absurd_distance_m if kind == "forward" else config.absurd_angle_rad
    si = "m" if kind == "forward" else "rad"
    if not math.isfinite(value) or value > bound:
        return 0.0, (f"absurd {what} {value:.6g} {si} in action {quote(found)}: "
                     f"more than the sanity bound {bound:.6g} {si}")
    return value, None
