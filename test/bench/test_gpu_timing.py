"""The compute-timing script on the CPU with the shipped pair: every figure the profiles need, exits
ready in layer order, and a clear refusal of a GPU that is not there."""

from __future__ import annotations

import json

import pytest
import torch

from edge_spec_ros.bench.profiles import GO2_PAPER_LINK, profile_named
from edge_spec_ros.cli import main


def test_times_a_round_and_writes_the_profile_figures(tmp_path, capsys):
    out = tmp_path / "timing.json"
    assert main(["bench", "gpu-timing", "--verifier", "embedded", "--repeats", "2", "--warmup", "0", "--gamma", "3",
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert len(report["rounds"]) == 2
    assert report["tp_s"] > 0 and report["tq_s"] > 0 and report["prefill_verifier_s"] > 0
    assert report["draft_gamma_s"] == pytest.approx(3 * report["tp_s"])
    fractions = [report["exit_fraction"][k] for k in sorted(report["exit_fraction"], key=int)]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) >= 2
    profile = profile_named(str(out))  # what `bench --profile <file>` emulates
    assert (profile.tp_s, profile.tq_s) == (report["tp_s"], report["tq_s"]) and profile.uplink == GO2_PAPER_LINK
    assert "embedded" in report["stamp"]["pair"] and "T_q" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_a_cuda_device_without_cuda_is_refused_by_name(capsys):
    assert main(["bench", "gpu-timing", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_a_profile_file_that_is_not_a_timing_result_is_refused(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"tp_s": 0.07}')
    with pytest.raises(ValueError, match="not a bench.gpu_timing result"):
        profile_named(str(bad))
    with pytest.raises(ValueError, match="unknown profile 'lte'"):
        profile_named("lte")
