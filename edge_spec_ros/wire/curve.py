"""CURVE key files (ZeroMQ's certificate format, made and read by ``zmq.auth``).

Secret key files are written readable by their owner only (0600) and, as ssh does with private
keys, refused when group or others may read or write them: a key others can read authenticates
them too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import zmq.auth

from edge_spec_ros.wire.link import CurveKeys

SECRET_MODE = 0o600
PUBLIC_MODE = 0o644
DIRECTORY_MODE = 0o755


class KeyFileError(ValueError):
    """A key file that is missing, malformed or too open."""


def check_secret_permissions(path: str | Path) -> None:
    """Refuse a secret key file that group or others can access (POSIX only)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise KeyFileError(f"no secret key file at {path}") from None
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(f"permissions {stat.S_IMODE(mode):04o} for {path} are too open: a secret key must be "
                           f"accessible by its owner only (chmod 600 {path})")


def make_keys(directory: str | Path, robots: list[str]) -> list[Path]:
    """Create ``server`` and one key pair per robot; authorise every robot in ``authorized/``.
    Secret files are 0600 from the moment they exist (written under a 0077 umask)."""
    out = Path(directory)
    authorized = out / "authorized"
    authorized.mkdir(parents=True, exist_ok=True)
    written = []
    old_umask = os.umask(0o077)
    try:
        for name in ["server", *robots]:
            public, secret = zmq.auth.create_certificates(str(out), name)
            os.chmod(secret, SECRET_MODE)
            os.chmod(public, PUBLIC_MODE)
            written += [Path(public), Path(secret)]
            if name != "server":
                copy = authorized / Path(public).name
                copy.write_bytes(Path(public).read_bytes())
                os.chmod(copy, PUBLIC_MODE)
    finally:
        os.umask(old_umask)
    return written


def _load_secret(secret_file: str | Path) -> tuple[bytes, bytes]:
    check_secret_permissions(secret_file)
    try:
        public, secret = zmq.auth.load_certificate(str(secret_file))
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read the key file {secret_file}: {exc}") from None
    if secret is None:
        raise KeyFileError(f"{secret_file} holds no secret key")
    return public, secret


def server_keys(secret_file: str | Path, authorized_dir: str | Path) -> CurveKeys:
    public, secret = _load_secret(secret_file)
    if not Path(authorized_dir).is_dir():
        raise KeyFileError(f"no directory of authorised robot keys at {authorized_dir}")
    return CurveKeys(public, secret, authorized_dir=str(authorized_dir))


def client_keys(secret_file: str | Path, server_public_file: str | Path) -> CurveKeys:
    public, secret = _load_secret(secret_file)
    try:
        server_public, _ = zmq.auth.load_certificate(str(server_public_file))
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read the server's public key {server_public_file}: {exc}") from None
    return CurveKeys(public, secret, server_public=server_public)
