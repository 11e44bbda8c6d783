"""The fleet load benchmark runs end to end against a real verifier process: N robots at once, every
decision equal to its solo run, the figures and the PNG reported (measured by ``python -m
edge_spec_ros.bench.fleet``, not asserted here: shared cores)."""

from __future__ import annotations

import math

import pytest

from edge_spec_ros.bench.fleet import FleetConfig, _all_busy, plot, serve_args, table
from edge_spec_ros.bench.fleet import fleet as run_fleet


def test_fleet_bench_reports_throughput_latency_and_exactness(tmp_path):
    config = FleetConfig(robots=(1, 2), decisions=2, max_new_tokens=8, prompts=2, procs=1, time_limit_s=60.0,
                         modes=("sd", "dssd"))
    report = run_fleet(config)
    assert report["exact"], report
    (points,) = report["settings"].values()
    assert [p["robots"] for p in points] == [1, 2]
    for p in points:
        assert p["decisions"] == 2 * p["robots"] and p["tokens"] > 0
        assert math.isfinite(p["latency_ms"]["p99"]) and p["tokens_per_s"] > 0
        assert 0 < p["all_busy_s"] <= p["wall_s"] + 1.5 and p["tokens_per_s_all_busy"] > 0
        assert not p["errors_robot"] and not p["errors_server"]
    text = table(report)
    assert "every decision equal to its solo run" in text and "| off | 2 |" in text
    png = plot(report, tmp_path / "fleet.png")
    assert png.stat().st_size > 1000


def test_the_all_busy_stretch_ends_with_the_first_robot_done():
    """Robot 0 (in motion, served first) ends its two decisions at 4 s, robot 1 at 9 s: the stretch is
    0-4 s and holds robot 0's two decisions and robot 1's first (ended at 3 s), not its second."""
    rows = [{"robot": 0, "end": 2.0, "latency_s": 2.0, "tokens": [1] * 10},
            {"robot": 0, "end": 4.0, "latency_s": 2.0, "tokens": [1] * 10},
            {"robot": 1, "end": 3.0, "latency_s": 3.0, "tokens": [1] * 10},
            {"robot": 1, "end": 9.0, "latency_s": 6.0, "tokens": [1] * 10},
            {"robot": 1, "end": 3.5, "latency_s": 0.5, "error": "TIMEOUT"}]
    assert _all_busy(rows) == (4.0, 30)
    assert _all_busy([]) == (0.0, 0)


def test_fleet_settings_are_checked():
    assert serve_args("off") == ()
    assert serve_args("batch8") == ("--batch", "--max-batch", "8")
    for bad in ("batch1", "on", "batchx", "batch8w50", "off8", "off+egress1", "batch8+egress0.5"):
        with pytest.raises(ValueError):
            serve_args(bad)


def test_bench_fleet_is_a_sub_command_of_bench():
    from edge_spec_ros.cli import build_parser

    args = build_parser().parse_args(["bench", "fleet", "--robots", "1,2", "--settings", "off,batch8"])
    assert (args.bench, args.robots, args.settings) == ("fleet", (1, 2), ("off", "batch8"))
    assert build_parser().parse_args(["bench"]).bench is None  # the AR/SD/FSD bench itself
