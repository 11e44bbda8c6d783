"""CURVE key files (ZeroMQ's certificate format, made and read by ``zmq.auth``)."""

from __future__ import annotations

from pathlib import Path

import zmq.auth

from edge_spec_ros.wire.link import CurveKeys


def make_keys(directory: str | Path, robots: list[str]) -> list[Path]:
    """Create ``server`` and one key pair per robot; authorise every robot in ``authorized/``."""
    out = Path(directory)
    authorized = out / "authorized"
    authorized.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ["server", *robots]:
        public, secret = zmq.auth.create_certificates(str(out), name)
        written += [Path(public), Path(secret)]
        if name != "server":
            (authorized / Path(public).name).write_bytes(Path(public).read_bytes())
    return written


def server_keys(secret_file: str | Path, authorized_dir: str | Path) -> CurveKeys:
    public, secret = zmq.auth.load_certificate(str(secret_file))
    if secret is None:
        raise ValueError(f"{secret_file} holds no secret key")
    if not Path(authorized_dir).is_dir():
        raise ValueError(f"no directory of authorised robot keys at {authorized_dir}")
    return CurveKeys(public, secret, authorized_dir=str(authorized_dir))


def client_keys(secret_file: str | Path, server_public_file: str | Path) -> CurveKeys:
    public, secret = zmq.auth.load_certificate(str(secret_file))
    if secret is None:
        raise ValueError(f"{secret_file} holds no secret key")
    server_public, _ = zmq.auth.load_certificate(str(server_public_file))
    return CurveKeys(public, secret, server_public=server_public)
