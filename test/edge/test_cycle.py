"""The instruction cycle without ROS: stop words, the decision budget, final actions, failures, a
superseding instruction, and each next frame stamped settle_s after the robot stopped."""

from __future__ import annotations

import pytest

from edge_spec_ros.edge.cycle import CycleConfig, CycleResult, MotionEnd, run_answer, run_cycle

SETTLE = CycleConfig(max_decisions=5, settle_s=0.25)


def scripted(kinds, stopped_at_ns=1_000_000_000):
    """decide() returning the given action kinds in turn (None: a failed decision); records its calls."""
    calls = []

    def decide(instruction, not_before_ns):
        calls.append(not_before_ns)
        kind = kinds[len(calls) - 1]
        return None if kind is None else MotionEnd(kind, stopped_at_ns * len(calls))

    return decide, calls


@pytest.mark.parametrize("word", ["", "stop", " Cancel ", "STOP"])
def test_a_stop_word_makes_no_decision(word):
    decide, calls = scripted([])
    assert run_cycle(word, SETTLE, decide, lambda: True).reason == "stop" and calls == []


def test_decisions_until_stop_each_on_a_frame_after_the_last_motion():
    decide, calls = scripted(["turn", "forward", "stop"])
    result = run_cycle("find the bottle", SETTLE, decide, lambda: True)
    assert (result.decisions, result.reason) == (3, "stop")
    assert calls == [None, 1_250_000_000, 2_250_000_000]  # first: the latest frame; then stop + settle_s


def test_the_budget_and_a_single_decision():
    decide, calls = scripted(["turn"] * 10)
    assert run_cycle("go", SETTLE, decide, lambda: True).reason == "max_decisions" and len(calls) == 5
    once, calls = scripted(["turn", "turn"])
    assert run_cycle("go", CycleConfig(repeat_decisions=False), once, lambda: True).decisions == 1 and calls == [None]


@pytest.mark.parametrize("kind", ["invalid", None])
def test_an_invalid_action_or_a_failed_decision_ends_the_cycle(kind):
    decide, calls = scripted(["turn", kind, "turn"])
    result = run_cycle("go", SETTLE, decide, lambda: True)
    assert result.decisions == 2 and result.reason == (kind or "failed") and len(calls) == 2


def test_a_new_instruction_supersedes_the_cycle():
    live = [True]
    decide, calls = scripted(["turn", "turn", "turn"])

    def decide_then_supersede(instruction, not_before_ns):
        end = decide(instruction, not_before_ns)
        live[0] = len(calls) < 2  # a new instruction arrives during the second decision
        return end

    result = run_cycle("go", SETTLE, decide_then_supersede, lambda: live[0])
    assert (result.decisions, result.reason) == (2, "superseded")


def test_a_question_is_answered_once_and_moves_nothing():
    asked: list[str] = []

    def answer(question: str) -> str:
        asked.append(question)
        return "in the kitchen"

    assert run_answer("where did you see the red chair?", answer, lambda: True) == CycleResult(1, "answered")
    assert asked == ["where did you see the red chair?"]
    assert run_answer(" Stop ", answer, lambda: True) == CycleResult(0, "stop") and len(asked) == 1


def test_a_failed_or_superseded_answer():
    assert run_answer("where is the door?", lambda q: None, lambda: True) == CycleResult(1, "failed")
    state = {"current": True}

    def superseded(question: str) -> None:
        state["current"] = False  # a new instruction arrived while answering
        return None

    assert run_answer("where is the door?", superseded, lambda: state["current"]) == CycleResult(1, "superseded")
    assert run_answer("where is the door?", lambda q: "x", lambda: False) == CycleResult(0, "superseded")
