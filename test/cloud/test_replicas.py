"""Scale-out on Ray (cloud/replicas.py): a local Ray instance with 2 verifier replicas behind one
ZeroMQ front, every Ray service on 127.0.0.1.

- new sessions go to the least-loaded replica and stay there;
- a replica killed mid-decision: the robot it served re-opens the decision on the other replica and
  finishes with the verifier's own greedy output;
- no TCP/UDP socket of this test's processes (the driver, Ray's services, the replicas; read from
  /proc) binds or connects to an address outside the loopback range.
"""

from __future__ import annotations

import os
import ipaddress
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed: pip install -r requirements.txt (it pins ray)")

from edge_spec_ros.bench.runner import bench_prompts  # noqa: E402
from edge_spec_ros.cloud.replicas import Front, local_ray, start_replicas  # noqa: E402
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive  # noqa: E402
from edge_spec_ros.edge.client import ClientConfig, VerifierClient  # noqa: E402
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder  # noqa: E402
from edge_spec_ros.models.pairs import load_pair  # noqa: E402

pytestmark = pytest.mark.timeout(240)
TQ_S = 0.25  # emulated verification per round: a decision lasts long enough to lose its replica mid-way


@pytest.fixture(scope="module")
def cluster():
    local_ray(num_cpus=4)
    replicas = start_replicas(2, server_args={"emulate_tq_s": TQ_S})
    front = Front(replicas, "tcp://127.0.0.1:*", health_period_s=0.3)
    front.start()
    yield front, replicas
    front.stop()
    ray.shutdown()


@pytest.fixture(scope="module")
def pair():
    return load_pair("embedded")


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo += children.get(pid, [])
    return out


def _address(hex_address: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """/proc/net/{tcp,udp}[6] address ``HEX:PORT`` (the IP in host byte order, 32-bit words)."""
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip, int(port, 16)


def _sockets(pids: set[int]) -> list[tuple[str, str, tuple, tuple]]:
    """(protocol, TCP state, local, remote) of every TCP/UDP socket the processes ``pids`` hold."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    out = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:
                out.append((proto, fields[3], _address(fields[1]), _address(fields[2])))
    return out


def test_sessions_go_to_the_least_loaded_replica_and_a_lost_replica_s_robot_finishes_elsewhere(cluster, pair):
    front, replicas = cluster
    work = bench_prompts(pair.prompt_encoder(), 2)
    config = DecodeConfig(max_new_tokens=24, gamma=2, stop_tokens=(pair.tokenizer.eos_token_id,))
    expected = [autoregressive(pair.verifier, prompt, config).tokens for prompt, _ in work]
    results: dict[int, list[int]] = {}
    errors: list[str] = []

    def robot(i: int) -> None:
        try:
            with VerifierClient(ClientConfig(endpoint=front.endpoint, reply_timeout_s=30.0)) as c, \
                    EdgeDecoder(c, pair.drafter, EdgeConfig(decode=config, threads=1)) as decoder:
                results[i] = decoder.decode("sd", *work[i])
        except Exception as exc:  # reported below
            errors.append(f"robot {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=robot, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while sum(front.load().values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert front.load() == {"replica-0": 1, "replica-1": 1}  # one session each: least loaded first
    time.sleep(3 * TQ_S)  # a few rounds into both decisions
    ray.kill(replicas[0][1], no_restart=True)
    for t in threads:
        t.join(120)
    assert not errors, errors
    for i in range(2):
        assert results[i].tokens == expected[i]
    assert front.counters["sessions_orphaned"] == 1
    assert front.load() == {"replica-1": 0}  # the re-opened decision went to the live replica, and closed


def test_every_socket_of_ray_and_the_replicas_stays_on_loopback(cluster):
    front, _ = cluster
    assert front.endpoint.startswith("tcp://127.0.0.1:")
    pids = _descendants(os.getpid())
    assert len(pids) > 3  # Ray's services and the replica processes are this test's descendants
    checked = 0
    for proto, _, (local, local_port), (remote, remote_port) in _sockets(pids):
        if not local_port:  # created, never bound: it neither listens nor sends
            continue
        checked += 1
        assert local.is_loopback, (proto, str(local), local_port)  # 0.0.0.0 / :: (every interface) fails
        if remote_port:  # connected: the peer too
            assert remote.is_loopback, (proto, str(local), str(remote), remote_port)
    assert checked > 5
