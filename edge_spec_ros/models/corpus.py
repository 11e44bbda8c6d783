"""A small, deterministic text corpus of the robot's domain.

It trains the project's own byte-level BPE tokenizer (``models/tokenizer.py``) so that tests and the
embedded demo never fetch a vocabulary from a model hub. The sentences cover what the navigation
model reads and writes: instructions, scene descriptions, reasoning and the mid-level actions of the
FSD paper's Go2 case study (Section 4.4) in both word and NaVILA-style numeric form.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

COLOURS = ("red", "green", "blue", "yellow", "silver", "black", "white", "orange", "purple", "brown")
OBJECTS = ("bottle", "chair", "box", "ball", "cup", "door", "table", "backpack", "plant", "cone")
SIDES = ("left", "right", "ahead", "behind")
SIZES = ("small", "medium", "large")
INSTRUCTION_VERBS = ("find the", "go to the", "walk to the", "look for the", "approach the", "stop at the")
WORD_ACTIONS = (
    *(f"move forward {s}" for s in SIZES),
    *(f"turn {d} {s}" for d in ("left", "right") for s in SIZES),
    "stop",
)
GENERAL = (
    "The quick brown fox jumps over the lazy dog.",
    "A robot reads the camera image and decides what to do next.",
    "Speculative decoding drafts tokens on the edge and verifies them in the cloud.",
    "Write a function that returns the sum of two numbers.",
    "What is twelve times seven? Twelve times seven is eighty four.",
    "Summarise the paragraph in one sentence.",
    "The answer to the question is given below.",
    "def add(a, b):\n    return a + b\n",
    "Hello! How can I help you today?",
    "Reasoning: the target is not visible, so I will turn to search for it.",
)


def _sentences(rng: random.Random) -> Iterator[str]:
    for colour, obj in itertools.product(COLOURS, OBJECTS):
        target = f"{colour} {obj}"
        for verb in INSTRUCTION_VERBS:
            yield f"{verb} {target}"
        side = rng.choice(SIDES)
        distractor = f"{rng.choice(COLOURS)} {obj}"
        action = rng.choice(WORD_ACTIONS)
        cm = rng.choice((25, 50, 75, 100, 150))
        deg = rng.choice((15, 30, 45, 60, 90))
        yield f"I see the {target} {side}. There is also a {distractor}. Action: {action}"
        yield f"Reasoning: the {target} is {side} and far away. Action: move forward {cm} cm"
        yield f"Reasoning: the {target} is to the {side}. Action: turn {rng.choice(('left', 'right'))} {deg} degrees"
        yield f"Reasoning: I reached the {target}. Action: stop"
        yield f"The {distractor} looks like the {target} but it is not the target."
    yield from GENERAL


def corpus(repeats: int = 3, seed: int = 0) -> list[str]:
    """Return the training corpus: ``repeats`` shuffled passes over the domain sentences."""
    rng = random.Random(seed)
    lines: list[str] = []
    for _ in range(repeats):
        lines.extend(_sentences(rng))
    return lines
