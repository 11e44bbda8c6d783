"""The compute-timing command on the CPU: every figure the profiles need, at every γ and batch size,
exits ready in layer order, ``scripts/gpu_timing.sh`` (the GPU run) itself, with its GPU options
checked and, at reduced depth, run, and a clear refusal of a GPU that is not there. Only robust
assertions: identities between the figures and orders the measurement imposes, never one time
against another."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from edge_spec_ros.bench.gpu_timing import TimingConfig, add_arguments
from edge_spec_ros.bench.gpu_timing import main as timing_main
from edge_spec_ros.bench.profiles import GO2_PAPER_LINK, profile_named
from edge_spec_ros.cli import main
from edge_spec_ros.config_cli import config_from

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_timing.sh"
CPU = ("--device", "cpu", "--dtype", "float32", "--drafter-quant", "int8-weight")  # int4-weight is CUDA's


def run_script(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def check_report(report: dict, gammas: list[int], gamma: int, batch_sizes: list[int], exits: int) -> None:
    """The figures' identities and the orders the measurement makes; the profile file as bench reads it."""
    assert report["tp_s"] > 0 and report["tq_s"] > 0 and report["prefill_verifier_s"] > 0
    assert report["prefill_drafter_s"] > 0
    assert report["draft_gamma_s"] == pytest.approx(gamma * report["tp_s"])
    assert sorted(map(int, report["by_gamma"])) == sorted({*gammas, gamma})
    name = report["config"]["dtype"]  # the first drafter variant: the profile's
    assert list(report["drafters"])[0] == name
    for g, at in report["by_gamma"].items():
        assert at["tq_s"] > 0 and sorted(at["tp_s"]) == sorted(report["drafters"])
        for variant, draft in at["draft_gamma_s"].items():
            assert draft == pytest.approx(int(g) * at["tp_s"][variant]) and draft > 0
            assert report["drafters"][variant]["tp_s"][g] == at["tp_s"][variant]
        ready = [at["exit_ready_s"][k] for k in sorted(at["exit_ready_s"], key=int)]
        assert len(ready) == exits + 1 and ready == sorted(ready) and ready[-1] == at["tq_s"]
        fractions = [at["exit_fraction"][k] for k in sorted(at["exit_fraction"], key=int)]
        assert fractions == sorted(fractions) and fractions[-1] == 1.0
    at = report["by_gamma"][str(gamma)]
    assert (report["tq_s"], report["tp_s"]) == (at["tq_s"], at["tp_s"][name])
    assert sorted(map(int, report["batched"])) == sorted(batch_sizes)
    for b, batch in report["batched"].items():
        assert batch["gamma"] == gamma and batch["tq_s"] > 0
        assert batch["per_session_s"] == pytest.approx(batch["tq_s"] / int(b))
    assert all(len(row["batched_s"]) == len(batch_sizes) for row in report["rounds"])
    profile = profile_named(report["path"])  # what `bench --profile <file>` emulates
    assert (profile.tp_s, profile.tq_s) == (report["tp_s"], report["tq_s"]) and profile.uplink == GO2_PAPER_LINK


def read(path: Path) -> dict:
    return {**json.loads(path.read_text()), "path": str(path)}


def test_times_every_gamma_and_batch_size_and_writes_the_profile_figures(tmp_path, capsys):
    out = tmp_path / "timing.json"
    assert main(["bench", "gpu-timing", "--verifier", "embedded", "--repeats", "2", "--warmup", "0", "--gamma", "3",
                 "--gammas", "2", "--batch-sizes", "1,2", "--out", str(out)]) == 0
    report = read(out)
    assert len(report["rounds"]) == 2
    check_report(report, gammas=[2], gamma=3, batch_sizes=[1, 2], exits=report["stamp"]["exits"])
    assert report["stamp"]["exits"] >= 1 and report["stamp"]["verifier_layers"] == report["stamp"]["exits"] + 1
    assert "embedded" in report["stamp"]["pair"]
    printed = capsys.readouterr().out
    assert "T_q" in printed and "B = 2" in printed and "γ = 3" in printed


def script_command(out: Path, tmp_path: Path) -> list[str]:
    """The options ``scripts/gpu_timing.sh OUT`` gives ``bench.gpu_timing.main``: the script run with an
    interpreter that prints its arguments (its timeout, output directory and environment as on the GPU;
    its torchao check passes)."""
    stub = tmp_path / "print_args"
    stub.write_text('#!/bin/sh\nfor a in "$@"; do printf \'%s\\0\' "$a"; done\n')
    stub.chmod(0o755)
    done = run_script(str(out), env={"PYTHON": str(stub)}, timeout=30)
    assert done.returncode == 0, done.stderr
    argv = done.stdout.split("\0")[:-1]
    assert argv[0] == "-c" and "from edge_spec_ros.bench.gpu_timing import main" in argv[1] and out.parent.is_dir()
    return argv[2:]


def test_the_gpu_script_runs_the_full_depth_shapes_in_bfloat16_on_cuda(tmp_path, capsys):
    """The script's command line as it runs on the GPU machine, parsed by the command itself: the real
    shapes at full depth (the 7B's 28 layers, 27 exits, the published vision tower), bfloat16 on CUDA,
    the issue's γ and batch sizes, int4 for the second drafter, the output directory made, the 8-minute
    timeout."""
    out = tmp_path / "deep" / "profile.json"
    argv = script_command(out, tmp_path)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(argv)
    config = config_from(TimingConfig, args)
    assert (config.verifier, config.drafter) == ("qwen2-vl-7b-shape:vision_layers=32",
                                                 "qwen2-vl-2b-shape:vision_layers=32")
    assert (config.dtype, config.device, args.out) == ("bfloat16", "cuda", str(out))
    assert (config.gammas, config.gamma, config.batch_sizes) == ((2, 4, 8), 4, (1, 4, 16, 32))
    assert config.drafter_quant == "int4-weight"  # `echo -c "import torchao"` passes the script's check
    assert 'timeout "$limit"' in SCRIPT.read_text() and "GPU_TIMING_TIMEOUT_S:-480" in SCRIPT.read_text()
    if not torch.cuda.is_available():  # this machine: the run stops at once, naming what is missing
        assert timing_main(argv) == 2 and "no CUDA device" in capsys.readouterr().err


def test_the_gpu_scripts_command_on_the_cpu_writes_a_profile_bench_reads(tmp_path, capsys):
    """The script's command, its device, dtype and pair overridden for the CPU (later options win), in this
    process: the shipped pair, since the real shapes even at reduced depth take a minute to build here
    and a new interpreter 10-20 s to import torch and transformers (both in the slow test below)."""
    out = tmp_path / "profile.json"
    argv = script_command(out, tmp_path) + [*CPU, "--verifier", "embedded", "--drafter", "", "--repeats", "1",
                                            "--warmup", "0", "--batch-sizes", "1,4"]
    assert timing_main(argv) == 0
    report = read(out)
    check_report(report, gammas=[2, 4, 8], gamma=4, batch_sizes=[1, 4], exits=report["stamp"]["exits"])
    assert list(report["drafters"]) == ["float32", "float32+int8-weight"]
    printed = capsys.readouterr().out
    assert "B = 4" in printed and f"wrote {out}" in printed and report["config"]["device"] == "cpu"


@pytest.mark.slow
def test_the_gpu_script_on_the_cpu_with_the_real_shapes_at_reduced_depth(tmp_path):
    """The script itself, in a new interpreter, at the real widths and vocabularies (7B-shape verifier at 2
    layers with its 1 exit, 2B-shape drafter at 1 layer), float32 on the CPU, the drafter again quantized with
    int8-weight: about 95 s and a peak RSS of 10.6 GiB here."""
    out = tmp_path / "profile.json"
    done = run_script(str(out), *CPU, "--verifier", "qwen2-vl-7b-shape:layers=2", "--drafter",
                      "qwen2-vl-2b-shape:layers=1", "--repeats", "1", "--warmup", "0", "--gammas", "2",
                      "--batch-sizes", "1,2", timeout=600)
    assert done.returncode == 0, done.stderr
    report = read(out)
    check_report(report, gammas=[2], gamma=4, batch_sizes=[1, 2], exits=1)
    assert list(report["drafters"]) == ["float32", "float32+int8-weight"]
    assert "drafter_quant_error" not in report["stamp"]
    assert report["stamp"]["verifier_layers"] == 2 and "qwen2-vl-7b-shape:layers=2" in report["stamp"]["pair"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_a_cuda_device_without_cuda_is_refused_by_name(capsys):
    assert main(["bench", "gpu-timing", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_a_quantized_drafter_is_timed_beside_the_dtype_one(tmp_path, capsys):
    out = tmp_path / "timing.json"
    assert main(["bench", "gpu-timing", "--repeats", "1", "--warmup", "0", "--gammas", "2", "--batch-sizes", "1",
                 "--drafter-quant", "int8-weight", "--out", str(out)]) == 0
    report = read(out)
    assert list(report["drafters"]) == ["float32", "float32+int8-weight"]
    assert "drafter_quant_error" not in report["stamp"]
    check_report(report, gammas=[2], gamma=4, batch_sizes=[1], exits=report["stamp"]["exits"])
    assert "float32+int8-weight T_p" in capsys.readouterr().out


def test_without_the_batched_servers_imports_the_same_forward_is_timed_and_named(tmp_path, monkeypatch):
    """A GPU image without lz4 (the wire codec's) cannot import cloud.batching: the batched figures come from
    DecoderStack.run_batch and the exit heads, and the stamp says which code ran."""
    out = tmp_path / "timing.json"
    assert main(["bench", "gpu-timing", "--repeats", "1", "--warmup", "0", "--gammas", "2", "--batch-sizes", "1,3",
                 "--out", str(out)]) == 0
    assert read(out)["stamp"]["batched_by"] == "cloud.batching.verify_batch"
    monkeypatch.setitem(sys.modules, "edge_spec_ros.cloud.batching", None)
    assert main(["bench", "gpu-timing", "--repeats", "1", "--warmup", "0", "--gammas", "2", "--batch-sizes", "1,3",
                 "--out", str(out)]) == 0
    report = read(out)
    assert report["stamp"]["batched_by"].startswith("models.stack.run_batch + exit heads (cloud.batching not")
    check_report(report, gammas=[2], gamma=4, batch_sizes=[1, 3], exits=report["stamp"]["exits"])


def test_a_scheme_the_device_cannot_run_is_refused_before_loading(capsys):
    assert main(["bench", "gpu-timing", "--drafter-quant", "int4-weight"]) == 2
    err = capsys.readouterr().err
    assert "--drafter-quant" in err and "runs on cuda only" in err and "loading" not in err


def test_a_profile_file_that_is_not_a_timing_result_is_refused(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"tp_s": 0.07}')
    with pytest.raises(ValueError, match="not a bench.gpu_timing result"):
        profile_named(str(bad))
    with pytest.raises(ValueError, match="unknown profile 'lte'"):
        profile_named("lte")
