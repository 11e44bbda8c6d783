"""The benchmark runs end to end on loopback and reports every figure it promises."""

from __future__ import annotations

import json

import pytest

from edge_spec_ros.bench import report as bench_report
from edge_spec_ros.bench.profiles import PROFILES
from edge_spec_ros.bench.runner import Bench, BenchConfig
from edge_spec_ros.models.embedded import embedded_pair


def test_bench_side_by_side(server_endpoint, tmp_path):
    config = BenchConfig(profile="loopback", prompts=1, max_new_tokens=6, threads=2, sweep_threads=(1,),
                         sweep_gamma=(2,), modes=("ar", "sd", "fsd", "pico"))
    report = Bench(embedded_pair(), server_endpoint, config).run()
    assert set(report["modes"]) == {"ar", "sd", "fsd", "pico"}
    assert report["exact"] == "identical outputs across ar, sd, fsd, pico"
    model = report["picospec_model"]
    assert model["measured_async_tokens_per_s"] > 0 and model["predicted_async_tokens_per_s_eq5"] > 0
    for stats in report["modes"].values():
        assert stats["tokens"] == 6 and stats["wall_s"] > 0 and stats["bytes_up"] > 0 and stats["bytes_down"] > 0
    assert set(report["speedups"]) == {"speedup_ar_sd", "speedup_sd_fsd", "speedup_ar_fsd", "speedup_ar_pico"}
    payload = {row["mode"]: row for row in report["payload"]}
    assert payload["sd"]["up_bytes"] > 4 * 151_657 * 4 * 0.9  # γ×V float32, barely compressible
    assert payload["lowpay"]["up_bytes"] < 400 and payload["lowpay"]["down_bytes_on_rejection"] < 200
    assert payload["dssd"]["up_bytes"] < 200 and payload["dssd"]["down_bytes_on_rejection"] > 151_657 * 4 * 0.9
    assert report["sweeps"]["threads"][0]["threads"] == 1 and report["sweeps"]["gamma"][0]["gamma"] == 2
    text = bench_report.table(report)
    assert "r cache miss" in text and "real loopback, not emulated" in text and "151,657" in text
    json_path, png_path = bench_report.write(report, tmp_path)
    assert json.loads(json_path.read_text())["profile"] == "loopback"
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profiles_say_what_they_emulate():
    go2 = PROFILES["go2-paper"]
    assert go2.tp_s * 4 == pytest.approx(0.288) and go2.tq_s == pytest.approx(0.620)  # FSD Table 8
    lines = " ".join(go2.emulated())
    assert "emulated 72 ms" in lines and "emulated 620 ms" in lines and "120 ms" in lines
    assert all("not emulated" in l or "real" in l for l in PROFILES["loopback"].emulated())
    # T_q is emulated by the verifier process the bench starts, never asked for by a request
    assert go2.serve_args() == ("--emulate-tq-s", "0.62") and PROFILES["wifi"].serve_args() == ()
    with pytest.raises(ValueError, match="unknown profile"):
        BenchConfig(profile="5g")


def test_bench_rejects_unknown_modes():
    with pytest.raises(ValueError, match="unknown modes"):
        BenchConfig(modes=("sd", "magic"))
