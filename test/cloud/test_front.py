"""The replicas' front (cloud/replicas.py ``Front``) without Ray: two in-process verifier servers as
replicas, a health check the test controls. Sessions go to the least-loaded replica and stay there;
robots decode through the front exactly as through one server; a lost replica's robot re-opens on
the other and finishes; CURVE on the robots' endpoint admits authorised robots only."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from edge_spec_ros.bench.runner import bench_prompts
from edge_spec_ros.cloud.replicas import Front
from edge_spec_ros.cloud.server import ServerConfig, VerifierServer
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.edge.client import ClientConfig, VerifierAuthError, VerifierClient
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.wire.curve import client_keys, make_keys, server_keys
from edge_spec_ros.wire.messages import Open

TQ_S = 0.2


@pytest.fixture(scope="module")
def pair():
    return load_pair("embedded")


@pytest.fixture(scope="module")
def work(pair):
    return bench_prompts(pair.prompt_encoder(), 2)


class Replicas:
    def __init__(self, pair, n: int = 2, **server) -> None:
        encoder = pair.prompt_encoder()
        self.servers = [VerifierServer(pair.verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*", **server))
                        for _ in range(n)]
        self.endpoints = [s.start() for s in self.servers]
        self.dead: set[int] = set()

    def ping(self, i: int) -> None:
        if i in self.dead:
            raise RuntimeError("replica lost")

    def kill(self, i: int) -> None:
        self.dead.add(i)
        self.servers[i].stop()

    def entries(self):
        return [(f"replica-{i}", i, e) for i, e in enumerate(self.endpoints)]

    def stop(self) -> None:
        for i, s in enumerate(self.servers):
            if i not in self.dead:
                s.stop()


def _text_ids(pair) -> np.ndarray:
    return PromptEncoder(pair.tokenizer).encode("stop").input_ids.numpy().astype(np.int32)


def _config(pair) -> DecodeConfig:
    return DecodeConfig(max_new_tokens=24, gamma=2, stop_tokens=(pair.tokenizer.eos_token_id,))


def test_sessions_are_placed_least_loaded_and_stay_on_their_replica(pair, work):
    replicas = Replicas(pair)
    front = Front(replicas.entries(), "tcp://127.0.0.1:*", ping=replicas.ping)
    endpoint = front.start()
    try:
        ids = _text_ids(pair)
        with VerifierClient(ClientConfig(endpoint=endpoint)) as c:
            sids = [c.open(Open(input_ids=ids))[0] for _ in range(4)]
            assert front.load() == {"replica-0": 2, "replica-1": 2}
            (identity,) = {robot for robot, _ in front.placement}
            assert [front.replica_of((identity, sid)) for sid in sids] == ["replica-0", "replica-1"] * 2
            assert [s.stats()["sessions_open"] for s in replicas.servers] == [2, 2]
            for sid in sids[:3]:
                c.end(sid)
            time.sleep(0.3)
            assert sum(front.load().values()) == 1
            # a decision through the front is the verifier's own greedy output
            decoder = EdgeDecoder(c, pair.drafter, EdgeConfig(decode=_config(pair), threads=1))
            expected = autoregressive(pair.verifier, work[1][0], _config(pair)).tokens
            for mode in ("sd", "fsd", "dssd"):
                assert decoder.decode(mode, *work[1]).tokens == expected, mode
            decoder.close()
    finally:
        front.stop()
        replicas.stop()


def test_a_lost_replica_s_robot_reopens_on_the_other_and_finishes(pair, work):
    replicas = Replicas(pair, emulate_tq_s=TQ_S)
    front = Front(replicas.entries(), "tcp://127.0.0.1:*", health_period_s=0.2, ping=replicas.ping)
    endpoint = front.start()
    expected = [autoregressive(pair.verifier, prompt, _config(pair)).tokens for prompt, _ in work]
    results, errors = {}, []

    def robot(i: int) -> None:
        try:
            with VerifierClient(ClientConfig(endpoint=endpoint, reply_timeout_s=30.0)) as c, \
                    EdgeDecoder(c, pair.drafter, EdgeConfig(decode=_config(pair), threads=1)) as decoder:
                results[i] = decoder.decode("fsd", *work[i]).tokens
        except Exception as exc:  # reported below
            errors.append(f"{type(exc).__name__}: {exc}")

    try:
        threads = [threading.Thread(target=robot, args=(i,), daemon=True) for i in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while sum(front.load().values()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(3 * TQ_S)
        replicas.kill(0)
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert [results[0], results[1]] == expected
        assert front.counters["sessions_orphaned"] == 1 and front.load() == {"replica-1": 0}
    finally:
        front.stop()
        replicas.stop()


def test_curve_on_the_front_admits_authorised_robots_only(pair, work, tmp_path):
    make_keys(tmp_path / "keys", ["robot"])
    make_keys(tmp_path / "intruder", ["robot"])
    replicas = Replicas(pair, n=1)
    front = Front(replicas.entries(), "tcp://127.0.0.1:*", ping=replicas.ping,
                  curve=server_keys(tmp_path / "keys" / "server.key_secret", tmp_path / "keys" / "authorized"))
    endpoint = front.start()
    ids = _text_ids(pair)
    try:
        good = client_keys(tmp_path / "keys" / "robot.key_secret", tmp_path / "keys" / "server.key")
        with VerifierClient(ClientConfig(endpoint=endpoint, curve=good)) as c:
            sid, _ = c.open(Open(input_ids=ids))
            c.end(sid)
        bad = client_keys(tmp_path / "intruder" / "robot.key_secret", tmp_path / "keys" / "server.key")
        with VerifierClient(ClientConfig(endpoint=endpoint, curve=bad, open_timeout_s=8.0)) as c:
            with pytest.raises(VerifierAuthError):
                c.open(Open(input_ids=ids))
    finally:
        front.stop()
        replicas.stop()


def test_idle_robot_connections_to_replicas_are_closed(pair, monkeypatch):
    from edge_spec_ros.cloud import replicas as replicas_module

    monkeypatch.setattr(replicas_module, "DEALER_IDLE_S", 0.3)
    replicas = Replicas(pair, n=1)
    front = Front(replicas.entries(), "tcp://127.0.0.1:*", ping=replicas.ping)
    endpoint = front.start()
    try:
        with VerifierClient(ClientConfig(endpoint=endpoint)) as c:
            sid, _ = c.open(Open(input_ids=_text_ids(pair)))
            time.sleep(0.8)
            assert front.counters["dealers_closed"] == 0  # it holds a session: kept
            c.end(sid)
            deadline = time.monotonic() + 5
            while front.counters["dealers_closed"] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert front.counters["dealers_closed"] == 1
            sid, _ = c.open(Open(input_ids=_text_ids(pair)))  # a new connection when it comes back
            c.end(sid)
    finally:
        front.stop()
        replicas.stop()
