"""dragon/bench/latency in small: DRAGON's configurations at both payloads and the paper's baselines come
out of one run, every DRAGON / DRDG-TW row with the same tokens, the baselines with their bytes."""

from __future__ import annotations

import json

from edge_spec_ros.cli import main


def test_one_run_gives_dragon_both_payloads_and_every_baseline(capsys):
    assert main(["bench", "dragon-latency", "--tokens", "3", "--rtts-ms", "0", "--repeats", "1", "--link", "local",
                 "--configs", "DRAGON robot aggregates (queue 64)", "--paper-vocab", "1000"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    rows = {(r["config"], r["payload"]): r for r in lines if "config" in r}
    assert set(rows) == {("DRAGON robot aggregates (queue 64)", "full"),
                         ("DRAGON robot aggregates (queue 64)", "on_demand"),
                         *((name, "-") for name in ("CRCG/robot", "CRCG/cloud", "DRCG/Text", "DRCG/KV", "DRDG/SW",
                                                    "DRDG/SW, V = 1,000 bytes"))}
    for r in rows.values():
        assert r["tokens"] == 3 and r["ttft_ms"] > 0 and r["total_ms"] >= r["ttft_ms"] and r["per_token_ms"] >= 0
    # on_demand moves fewer bytes towards the aggregator (the robot) than full, for the same tokens
    assert rows[("DRAGON robot aggregates (queue 64)", "on_demand")]["down_bytes"] < \
        rows[("DRAGON robot aggregates (queue 64)", "full")]["down_bytes"]
    assert rows[("CRCG/robot", "-")]["up_bytes"] == rows[("CRCG/robot", "-")]["down_bytes"] == 0
    kv = next(r["drcg_kv"] for r in lines if "drcg_kv" in r)
    assert kv["bytes"] == kv["formula_bytes"] == rows[("DRCG/KV", "-")]["down_bytes"] - 64
    sw, sw_big = rows[("DRDG/SW", "-")], rows[("DRDG/SW, V = 1,000 bytes", "-")]
    assert sw_big["down_bytes"] - sw["down_bytes"] == 2 * 3 * (1000 - 640) * 4


def test_bandwidth_needs_the_server_link(capsys):
    assert main(["bench", "dragon-latency", "--link", "local", "--bandwidth-mbps", "100"]) == 2
    assert "--bandwidth-mbps needs --link zmq" in capsys.readouterr().err
