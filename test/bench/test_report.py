"""The bench report is stamped with what it was measured on: commit, machine and model pair."""

from __future__ import annotations

import json
import subprocess

import pytest

from edge_spec_ros.bench import report as bench_report
from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.models.embedded import embedded_pair


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def test_the_commit_stamp_is_the_short_hash_and_says_dirty(tmp_path):
    assert bench_report.commit_stamp(tmp_path) == "unknown"  # not a git checkout (an installed package)
    git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("1\n")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert bench_report.commit_stamp(tmp_path) == head
    (tmp_path / "new.txt").write_text("untracked files do not change what was measured\n")
    assert bench_report.commit_stamp(tmp_path) == head
    (tmp_path / "a.txt").write_text("2\n")
    assert bench_report.commit_stamp(tmp_path) == f"{head}-dirty"


def test_the_machine_stamp_names_cpu_cores_torch_and_gpu():
    import torch

    text = bench_report.machine_stamp()
    assert bench_report.cpu_model() in text and " cores" in text and f"torch {torch.__version__}" in text
    assert text.endswith("no GPU") or "GPU " in text


def test_the_pair_stamp_names_the_source_and_the_parameters_of_each_part():
    assert bench_report.pair_stamp("embedded", {"verifier": 1_290_000, "drafter": 260_000}) == \
        "embedded (verifier 1.29M, drafter 0.26M parameters)"
    assert bench_report.pair_stamp("Qwen/Qwen2-VL-7B-Instruct", {"verifier": 8_291_000_000}) == \
        "Qwen/Qwen2-VL-7B-Instruct (verifier 8.29B parameters)"
    s = bench_report.stamp(embedded_pair())
    assert set(s) == {"commit", "machine", "pair"}
    assert s["pair"].startswith("embedded (verifier ") and "M, drafter " in s["pair"]


@pytest.fixture()
def report():
    stats = DecodeStats("ar", tokens=4, rounds=4, wall_s=0.2, draft_s=0.0, server_s=0.1, round_trip_s=0.12).as_dict()
    return {"stamp": {"commit": "abc1234-dirty", "machine": "CPU X, 2 cores, torch 2.0, no GPU",
                      "pair": "embedded (verifier 1.29M, drafter 0.26M parameters)"},
            "profile": "loopback", "description": "real compute, real loopback", "emulated": [],
            "modes": {"ar": stats}, "speedups": {}, "exact": "one mode", "sweeps": {}}


def test_every_report_starts_with_its_stamp_and_keeps_it(report, tmp_path):
    first = bench_report.table(report).splitlines()[0]
    assert first == ("measured on commit abc1234-dirty; machine: CPU X, 2 cores, torch 2.0, no GPU; "
                     "pair: embedded (verifier 1.29M, drafter 0.26M parameters)")
    json_path, png_path = bench_report.write(report, tmp_path)
    assert json.loads(json_path.read_text())["stamp"] == report["stamp"]
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
