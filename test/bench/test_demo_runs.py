"""The demo-runs benchmark reads a run's decisions, latencies and end state from the demo's output."""

from __future__ import annotations

from edge_spec_ros.bench.demo_runs import parse_run, summary

OUTPUT = """[instruction] 'find the silver bottle'
[decision 1 fsd] 'Reasoning: I see the orange ball. Action: turn left 45 degrees'
[action 1] left 'turn left 45 degrees': v=0.00 m/s ω=0.50 rad/s for 1.57 s
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
    assert lines[2] == "| fsd | 2 | 1 / 1 | 2 | 96 / 100 / 104 | 31 |"
    assert lines[3].startswith("| fsd | 0 | 0 / 1 | 2 |")
