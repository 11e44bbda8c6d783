"""The instruction cycle, without ROS: decide, let the action be carried out, decide again.

``run_cycle`` drives one instruction: a decision on a camera frame, then (once the motion it
commanded is over) the next decision on a frame stamped at least ``settle_s`` after the robot stopped,
until the action is ``stop`` or invalid, ``max_decisions`` decisions were made, a decision failed, or
``current()`` says the cycle was superseded (a new instruction, a stop, shutdown). The clock is the
stamps it is given; the drafter node (``nodes/drafter_node.py``) supplies ``decide`` and ``current``.

``run_answer`` is the cycle of an answer mode (``dragon``, edge/registry.py): the instruction is a
question, answered once from the robot's memory and the cloud's documents; no motion is commanded,
so nothing is waited for and the robot stays as it is (stopped, when the previous cycle ended).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

STOP_WORDS = ("", "cancel", "stop")  # an instruction that only ends the cycle in progress
FINAL_KINDS = ("stop", "invalid")  # actions after which the cycle ends


@dataclass(frozen=True)
class CycleConfig:
    max_decisions: int = 20
    repeat_decisions: bool = True
    settle_s: float = 0.2

    def __post_init__(self) -> None:
        if self.max_decisions < 1 or not self.settle_s >= 0:
            raise ValueError(f"max_decisions must be >= 1 and settle_s >= 0, got {self}")


@dataclass(frozen=True)
class MotionEnd:
    """How one decision's action ended: its kind and when the robot stopped (ns, the node's clock)."""

    kind: str
    stamp_ns: int


@dataclass(frozen=True)
class CycleResult:
    decisions: int
    reason: str  # stop | invalid | max_decisions | failed | superseded | no action | answered


def is_stop(instruction: str) -> bool:
    return instruction.strip().lower() in STOP_WORDS


def run_cycle(instruction: str, config: CycleConfig, decide: Callable[[str, int | None], MotionEnd | None],
              current: Callable[[], bool]) -> CycleResult:
    """Run the decisions of ``instruction``. ``decide(instruction, not_before_ns)`` makes one decision
    on a frame stamped at or after ``not_before_ns`` (None: the latest fresh frame) and returns how its
    motion ended (None: no decision or no motion report: the cycle ends)."""
    if is_stop(instruction):
        return CycleResult(0, "stop")
    budget = config.max_decisions if config.repeat_decisions else 1
    not_before: int | None = None
    for n in range(budget):
        if not current():
            return CycleResult(n, "superseded")
        end = decide(instruction, not_before)
        if end is None:
            return CycleResult(n + 1, "superseded" if not current() else "failed")
        if end.kind in FINAL_KINDS:
            return CycleResult(n + 1, end.kind)
        not_before = end.stamp_ns + round(config.settle_s * 1e9)
    return CycleResult(budget, "max_decisions")


def run_answer(question: str, answer: Callable[[str], str | None], current: Callable[[], bool]) -> CycleResult:
    """Answer ``question`` once: ``answer(question)`` returns the text (None: it failed, or the cycle
    was superseded while answering: the answer is void and not published). No motion, no repetition."""
    if is_stop(question):
        return CycleResult(0, "stop")
    if not current():
        return CycleResult(0, "superseded")
    text = answer(question)
    if text is None:
        return CycleResult(1, "superseded" if not current() else "failed")
    return CycleResult(1, "answered")
