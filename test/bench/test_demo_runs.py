"""The demo-runs benchmark reads a run's decisions, latencies, motion endings and end state from the demo's
output, and fails a run whose motion the watchdog ended."""

from __future__ import annotations

import pytest

from edge_spec_ros.bench.demo_runs import ending, parse_run, summary

OUTPUT = """[instruction] 'find the silver bottle'
[decision 1 fsd] 'Reasoning: I see the orange ball. Action: turn left 45 degrees'
[action 1] left 'turn left 45 degrees': v=0.00 m/s ω=0.50 rad/s for 1.57 s
[action 1] ended (reached): travelled 0.000 m, turned 45.0°
[stats 1 fsd] decision 104 ms: 21 tokens in 6 rounds, τ=3.50 α=0.80 r=10% TTFT 20 ms, 4.0 ms/token, up 90 B/round, down 300 B/round
[decision 2 fsd] 'Reasoning: I see the silver bottle. Action: stop'
[stats 2 fsd] decision 96 ms: 12 tokens in 3 rounds, τ=4.00 α=0.90 r=0% TTFT 19 ms, 3.9 ms/token, up 90 B/round, down 300 B/round
simulated robot reached the target
"""


def test_a_runs_figures_come_from_its_output():
    run = parse_run(OUTPUT, "fsd", 2, 31.0)
    assert run.reached and run.decisions == 2 and run.latencies_ms == [104.0, 96.0]
    assert run.texts[-1].endswith("Action: stop'")
    missed = parse_run(OUTPUT.replace("reached the target", "did NOT reach the target"), "fsd", 0, 30.0)
    assert not missed.reached
    lines = summary([run, missed])
    assert run.endings == ["reached"] and not run.unplanned
    assert lines[2] == "| fsd | 2 | 1 / 1 | 2 | reached 1 | 96 / 100 / 104 | 31 |"
    assert lines[3].startswith("| fsd | 0 | 0 / 1 | 2 | reached 1 |")


def test_a_motion_the_watchdog_ended_fails_the_run():
    """The demo's action 14 as it ended before the motion tracker knew a blocked robot."""
    stalled = OUTPUT.replace("ended (reached): travelled 0.000 m, turned 45.0°",
                             "ended (watchdog expired: no sign of life for 6 s): travelled 0.684 m, turned 0.0°")
    run = parse_run(stalled, "fsd", 0, 30.0)
    assert run.reached and run.unplanned == ["watchdog expired: no sign of life for 6 s"]
    assert "watchdog 1" in summary([run])[2]


@pytest.mark.parametrize("reason,kind", [
    ("reached", "reached"), ("duration", "duration"), ("stop", "stopped"), ("new instruction", "stopped"),
    ("superseded by a new decision", "stopped"), ("verifier lost", "stopped"),
    ("verifier lost: no heartbeat for 1.5 s", "stopped"), ("shutdown", "stopped"),
    ("blocked: 0.684 of 1.000 m, less than 20% of the commanded travel in the last 1 s", "blocked"),
    ("watchdog expired: no sign of life for 6 s", "watchdog"), ("odometry older than 0.5 s", "odometry"),
    ("no odometry", "odometry"), ("timeout: 0.100 of 0.300 m after 3.0 s", "timeout"), ("something new", "other")])
def test_every_end_reason_of_the_action_node_has_its_class(reason, kind):
    assert ending(reason) == kind
