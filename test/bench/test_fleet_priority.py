"""The fleet benchmark with robots in motion: half the robots open their decisions with priority 1,
every decision still equals its solo run, and the latency of each group is reported (the figures are
measured by ``edge-spec-ros bench fleet --moving 0.5``, not asserted here: shared cores)."""

from __future__ import annotations

import math

import pytest

from edge_spec_ros.bench.fleet import FleetConfig, in_motion, table
from edge_spec_ros.bench.fleet import fleet as run_fleet


def test_half_the_fleet_in_motion_is_spread_evenly():
    assert [r for r in range(8) if in_motion(r, 0.5)] == [1, 3, 5, 7]
    assert not any(in_motion(r, 0.0) for r in range(8)) and all(in_motion(r, 1.0) for r in range(8))
    assert sum(in_motion(r, 0.25) for r in range(16)) == 4
    with pytest.raises(ValueError):
        FleetConfig(moving=1.5)


def test_fleet_bench_reports_robots_in_motion_apart():
    """Half the fleet in motion: every decision still equals its solo run, FSD's early exits arrive (the
    cache hit rate is reported) and the robots in motion are reported apart."""
    config = FleetConfig(robots=(2,), decisions=2, max_new_tokens=8, prompts=2, procs=1, time_limit_s=60.0,
                         modes=("sd", "fsd"), moving=0.5, settings=("off",))
    report = run_fleet(config)
    assert report["exact"], report
    ((point,),) = report["settings"].values()
    groups = point["latency_by_motion_ms"]
    assert groups["moving"]["decisions"] == 2 and groups["still"]["decisions"] == 2
    assert all(math.isfinite(groups[g]["p95"]) for g in groups)
    assert 0.0 <= point["cache_hit_rate"] <= 1.0 and point["early_exits_sent"] > 0
    assert "in motion p50 / p95 / p99 ms" in table(report)
