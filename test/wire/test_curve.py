"""Key hygiene: ``edge-spec-ros keys`` writes secret keys 0600; a secret key others can read is refused
(as ssh refuses an open private key) by the client, the server loader and ``serve`` itself."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from edge_spec_ros import warm_start
from edge_spec_ros.wire.curve import KeyFileError, client_keys, make_keys, server_keys

SERVE_REFUSAL_TIMEOUT_S = 120  # serve refuses before it loads a model; bounded all the same


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_keys_command_writes_secret_keys_owner_only(tmp_path):
    out = tmp_path / "keys"
    warm_start.run([sys.executable, "-m", "edge_spec_ros.cli", "keys", "--out", str(out), "--robot", "go2"],
                   check=True, capture_output=True, timeout=SERVE_REFUSAL_TIMEOUT_S)
    for name in ("server", "go2"):
        assert mode(out / f"{name}.key_secret") == 0o600
        assert mode(out / f"{name}.key") == 0o644
    assert mode(out / "authorized" / "go2.key") == 0o644
    assert client_keys(out / "go2.key_secret", out / "server.key").secret


@pytest.mark.parametrize("too_open", [0o640, 0o604, 0o660, 0o644, 0o666, 0o610])
def test_secret_keys_others_can_access_are_refused(tmp_path, too_open):
    make_keys(tmp_path, ["robot"])
    os.chmod(tmp_path / "robot.key_secret", too_open)
    with pytest.raises(KeyFileError, match="too open.*chmod 600"):
        client_keys(tmp_path / "robot.key_secret", tmp_path / "server.key")
    os.chmod(tmp_path / "server.key_secret", too_open)
    with pytest.raises(KeyFileError, match="too open"):
        server_keys(tmp_path / "server.key_secret", tmp_path / "authorized")


def test_owner_only_modes_are_accepted(tmp_path):
    make_keys(tmp_path, ["robot"])
    os.chmod(tmp_path / "robot.key_secret", 0o400)
    assert client_keys(tmp_path / "robot.key_secret", tmp_path / "server.key").secret


def test_missing_or_broken_key_files_are_clear_errors(tmp_path):
    with pytest.raises(KeyFileError, match="no secret key file"):
        client_keys(tmp_path / "nope.key_secret", tmp_path / "server.key")
    make_keys(tmp_path, ["robot"])
    with pytest.raises(KeyFileError, match="holds no secret key"):
        os.chmod(tmp_path / "robot.key", 0o600)
        client_keys(tmp_path / "robot.key", tmp_path / "server.key")
    with pytest.raises(KeyFileError, match="no directory of authorised"):
        server_keys(tmp_path / "server.key_secret", tmp_path / "missing")


def test_serve_refuses_a_world_readable_server_key(tmp_path):
    make_keys(tmp_path, ["robot"])
    os.chmod(tmp_path / "server.key_secret", 0o644)
    done = warm_start.run([sys.executable, "-m", "edge_spec_ros.cli", "serve", "--bind", "tcp://127.0.0.1:*",
                           "--curve-keys", str(tmp_path)], capture_output=True, text=True,
                          timeout=SERVE_REFUSAL_TIMEOUT_S)
    assert done.returncode == 2 and "too open" in done.stderr + done.stdout
