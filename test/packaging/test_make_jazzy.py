"""`make test-jazzy` on a machine without a Python 3.10 stops before it builds anything, with one line
that says what it needs and how to name one (the Makefile's PYTHON310); with one it would build
.venv-jazzy with it. Dry runs (`make -n`) into a directory of the test's own: nothing is built."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def dry_run(tmp_path: Path, python310: str) -> subprocess.CompletedProcess:
    """A top-level make's dry run, also when the suite itself runs under `make test` (whose MAKELEVEL
    and MAKEFLAGS would make this one a sub-make that prints "Entering directory")."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    return subprocess.run(["make", "-n", "test-jazzy", f"PYTHON310={python310}", f"JAZZY={tmp_path / 'venv'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_without_a_python_3_10_it_stops_with_one_line(tmp_path):
    done = dry_run(tmp_path, "")
    assert done.returncode != 0 and done.stdout == "", done
    (line,) = done.stderr.strip().splitlines()
    assert "make test-jazzy needs a Python 3.10 and found none" in line and "PYTHON310=" in line, line
    assert not (tmp_path / "venv").exists()


def test_a_named_python_builds_the_jazzy_venv_with_it(tmp_path):
    done = dry_run(tmp_path, sys.executable)
    assert done.returncode == 0, done.stderr
    assert f"{sys.executable} -m venv {tmp_path / 'venv'}" in done.stdout
    assert "-r requirements-jazzy.txt" in done.stdout and "scripts/build_interfaces.sh" in done.stdout
