"""The fairness benchmark runs end to end against a real verifier process and reports what it promises
(its figures are measured by ``edge-spec-ros bench fairness``, not asserted here: shared cores)."""

from __future__ import annotations

import math

from edge_spec_ros.bench.fairness import Setting, fairness, table


def test_fairness_bench_reports_slowdowns_beside_each_hog():
    report = fairness([Setting(prefill_chunk_tokens=64, workers=1, prefill_chunk_cells=20000)], decisions=1, hog_warm_s=0.5,
                      hog_prompt_tokens=600,
                      hog_generate_tokens=40, max_new_tokens=8)
    assert report["exact"] and not report["hog_errors"]
    (row,) = report["settings"]
    assert row["alone_ms"]["median"] > 0
    for hog in ("long_prompts", "long_generations"):
        # under way beside the robot: whether a request also completes within one decision depends on how
        # long the decision lasts on these shared cores
        assert math.isfinite(row[hog]["slowdown_median"]) and row[hog]["hog_requests_sent"] >= 1, (hog, row)
        assert len(row[hog]["beside_ms"]) == 1 and len(row[hog]["alone_ms"]) == 2 and len(row[hog]["block_ratios"]) == 1
    text = table(report)
    assert "prefill slices of 64 positions / 20000 cells, 1 worker" in text and "every decision equal" in text
