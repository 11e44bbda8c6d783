"""edge_spec_ros.warm_start: a child forked from the warm server is a process like a fresh one (its
output, environment, directory, argv, exit status and signals), and what it cannot start warm goes
through subprocess.Popen."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from edge_spec_ros import warm_start

from waiting import wait_until


@pytest.fixture
def warm(monkeypatch):
    monkeypatch.setenv(warm_start.ENV_FLAG, "1")


def run(args, **kwargs) -> tuple[int, str]:
    proc = warm_start.popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)
    assert isinstance(proc, warm_start.WarmProcess)
    out = proc.stdout.read()
    return proc.wait(timeout=60), out


def test_a_child_takes_its_argv_environment_directory_and_exit_status(warm, tmp_path):
    code = ("import os, sys; print(sys.argv[1:], os.environ['WARM_TEST'], os.getcwd(), flush=True); "
            "print('to stderr', file=sys.stderr); sys.exit(3)")
    env = dict(os.environ, WARM_TEST="here")
    status, out = run([sys.executable, "-c", code, "a", "b"], env=env, cwd=tmp_path)
    assert status == 3
    assert f"['a', 'b'] here {tmp_path}" in out and "to stderr" in out


def test_a_module_runs_as_main_and_its_atexit_functions_run(warm, tmp_path):
    (tmp_path / "warm_probe.py").write_text(
        "import atexit, sys\natexit.register(lambda: print('atexit ran', flush=True))\n"
        "if __name__ == '__main__':\n    print('main', sys.argv[1:])\n")
    status, out = run([sys.executable, "-m", "warm_probe", "x"], env=dict(os.environ, PYTHONPATH=str(tmp_path)),
                      cwd=tmp_path)
    assert status == 0 and "main ['x']" in out and "atexit ran" in out
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint('script', sys.argv[1:])\nimport os\nos._exit(5)\n")
    status, out = run([sys.executable, str(script), "y"])
    assert status == 5 and "script ['y']" in out  # os._exit's status comes from the fork server's wait


def test_signals_end_it_as_they_end_any_process(warm, tmp_path):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc = warm_start.popen([sys.executable, "-c", "import time\nprint('up', flush=True)\ntime.sleep(60)"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout.readline().strip() == "up"
        assert proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == -sig
        proc.kill()  # after the end: nothing happens


def test_output_to_a_file_and_a_grandchild_works(warm, tmp_path):
    log = tmp_path / "out.log"
    code = ("import subprocess, sys; print('child', flush=True); "
            "sys.exit(subprocess.run([sys.executable, '-c', 'print(7 * 6)']).returncode)")
    with open(log, "w") as out:
        proc = warm_start.popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT)
    assert proc.wait(timeout=60) == 0
    wait_until(lambda: "42" in log.read_text(), 10, "the grandchild's output")
    assert "child" in log.read_text()


def test_what_cannot_start_warm_goes_through_subprocess(warm, monkeypatch):
    other = warm_start.popen(["true"])
    assert isinstance(other, subprocess.Popen) and other.wait(timeout=10) == 0
    monkeypatch.setenv(warm_start.ENV_FLAG, "0")
    cold = warm_start.popen([sys.executable, "-c", "pass"])
    assert isinstance(cold, subprocess.Popen) and cold.wait(timeout=60) == 0


def test_a_warm_start_skips_the_imports(warm):
    """The point of it: a child that imports torch and transformers' Qwen2-VL starts without paying
    for them again (a fresh interpreter takes seconds of CPU for these imports here)."""
    code = ("import resource, time, torch, transformers.models.qwen2_vl.modeling_qwen2_vl\n"
            "u = resource.getrusage(resource.RUSAGE_SELF)\nprint(u.ru_utime + u.ru_stime)")
    run([sys.executable, "-c", "pass"])  # the fork server is up
    status, out = run([sys.executable, "-c", code])
    assert status == 0
    cpu_s = float(out.split()[-1])
    assert cpu_s < 1.0, f"the child spent {cpu_s:.2f} s of CPU: its imports were not done warm"


def test_run_captures_stdout_and_stderr_apart_and_keeps_subprocess_run_s_contract(warm):
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(2)"
    done = warm_start.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (2, "out\n", "err\n")
    with pytest.raises(subprocess.CalledProcessError):
        warm_start.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=True)
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        warm_start.run([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
                       capture_output=True, text=True, timeout=2)
    assert timed_out.value.output == "started\n"
