"""Scale-out: verifier replicas as Ray actors behind the robots' one ZeroMQ endpoint.

Beyond one machine the verifiers run on an existing distributed engine, Ray: each replica is a Ray
actor (``VerifierReplica``) holding a ``VerifierServer`` bound on its own node's address; the
``Front`` binds the endpoint the robots already use (a ZeroMQ ROUTER, same protocol, CURVE optional)
and relays frames unchanged:

- a new session (an ``Open`` or ``DragonOpen`` with a session id the front has not placed) goes to
  the replica with the fewest sessions placed on it (least loaded), and stays there: every later
  frame of that session goes to the same replica, and the session is forgotten at its ``Close``;
- each robot reaches a replica through a DEALER of its own (one connection per robot and replica), so
  the replica's per-client quotas and its per-session outboxes work as with a direct connection;
- the front pings every replica (``ping``) every ``health_period_s``; a replica that fails to answer
  (killed, its node lost) is dropped, and every session placed on it is answered with
  ``UNKNOWN_SESSION``: the robot's decoder opens the decision again (``EdgeDecoder.decode``,
  ``RETRYABLE_CODES``), the front places it on a live replica, and the decision finishes exactly as
  it would have (every mode's output is a function of the prompt, the seed and position-indexed
  draws). A request for a session the front does not know is answered ``UNKNOWN_SESSION`` too.

``edge-spec-ros replicas --replicas 2 --bind tcp://127.0.0.1:5555`` starts a local
Ray instance bound to 127.0.0.1 (dashboard and usage reporting off) and serves; ``--address`` joins
an existing Ray cluster instead (docs/fleet.md: head node, GPU workers).
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator

from edge_spec_ros.extras import require
from edge_spec_ros.wire.codec import HEADER, MAGIC, SESSION_BYTES, encode
from edge_spec_ros.wire.link import CurveKeys
from edge_spec_ros.wire.messages import Envelope, Error, ErrorCode, MsgType

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
HEALTH_PERIOD_S = 0.5
PING_TIMEOUT_S = 2.0
POLL_MS = 50
DEALER_IDLE_S = 60.0  # a robot's DEALER to a replica holding none of its sessions is closed after this
RECEIVE_HWM = 100  # as the server's: frame sets buffered per robot connection before reading stops
OPEN_TYPES = (int(MsgType.OPEN), 32)  # Open, DragonOpen (dragon/wire.py): a session starts
CLOSE_TYPE = int(MsgType.CLOSE)
STATS_TYPE = int(MsgType.STATS)
RAY_USER = "the verifier's Ray replicas (cloud/replicas.py)"  # what needs the cloud extra's Ray


def local_ray(num_cpus: int | None = None, **init_kwargs) -> None:
    """Start Ray on this machine with every service on 127.0.0.1 (or join a cluster, with ``address``):
    no dashboard, no usage reporting. Replicas import this package from the checkout, as the driver
    does.

    Ray's default node address is the machine's own network address, even for a local instance, and
    ``ray.init(_node_ip_address="127.0.0.1")`` alone is turned back into it; with
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` Ray keeps a local instance's node on the loopback address
    (as it does on a laptop), and its processes bind and connect to 127.0.0.1 only."""
    local = "address" not in init_kwargs
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if local:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read by every Ray process at import
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = os.environ.get("PYTHONPATH", "")
    if str(REPO) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), path) if p)
    ray = require("ray", "cloud", RAY_USER)
    from ray._private import ray_constants

    if local:
        ray_constants.ENABLE_RAY_CLUSTER = False  # this process imported Ray before the variable was set
        init_kwargs.update(_node_ip_address="127.0.0.1", num_cpus=num_cpus)
    ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False, **init_kwargs)


def replica_class():
    """The Ray actor class (built lazily: importing this module needs no Ray)."""
    ray = require("ray", "cloud", RAY_USER)

    @ray.remote(max_restarts=0)
    class VerifierReplica:
        """A ``VerifierServer`` (the pair of ``source``) bound on this node's address."""

        def __init__(self, source: str = "embedded", server_args: dict | None = None, threads: int = 1,
                     device: str = "cpu", dtype: str = "float32") -> None:
            import torch

            from edge_spec_ros.cloud.server import ServerConfig, VerifierServer
            from edge_spec_ros.models.pairs import load_pair

            torch.set_num_threads(threads)
            pair = load_pair(source, parts=("verifier",), device=device, dtype=dtype)
            host = ray.util.get_node_ip_address()
            config = ServerConfig(bind=f"tcp://{host}:*", **(server_args or {}))
            self.server = VerifierServer(pair.verifier, pair.prompt_encoder(), config)
            self.endpoint = self.server.start()

        def address(self) -> str:
            return self.endpoint

        def ping(self) -> dict:
            return self.server.stats()

        def pid(self) -> int:
            return os.getpid()

    return VerifierReplica


@dataclass
class _Replica:
    name: str
    actor: object
    endpoint: str
    sessions: set = field(default_factory=set)  # (robot identity, session id) placed here
    dealers: dict = field(default_factory=dict)  # robot identity -> its own DEALER to this replica
    used: dict = field(default_factory=dict)  # robot identity -> last time its DEALER carried a frame
    alive: bool = True


def ray_ping(actor) -> None:
    """A replica actor's health check: its ``ping`` answered within ``PING_TIMEOUT_S``, else raises."""
    ray = require("ray", "cloud", RAY_USER)

    ray.get(actor.ping.remote(), timeout=PING_TIMEOUT_S)


class Front:
    """The robots' endpoint in front of Ray replicas (see the module docstring). ``start`` binds and
    returns the endpoint; ``stop`` ends the relay thread. ``replicas``: (name, handle, endpoint) each;
    ``ping(handle)`` raises when a replica is lost (default: the Ray actor's ``ping``); ``curve``: the
    robots' endpoint under CURVE (the server's pair and its ``authorized/`` robot keys, as ``serve
    --curve-keys``; the links from the front to the replicas stay inside the cluster)."""

    def __init__(self, replicas: list[tuple[str, object, str]], bind: str = "tcp://127.0.0.1:5555",
                 health_period_s: float = HEALTH_PERIOD_S, ping=ray_ping, curve: CurveKeys | None = None) -> None:
        self.replicas = [_Replica(name, actor, endpoint) for name, actor, endpoint in replicas]
        self.bind = bind
        self.health_period_s = health_period_s
        self.ping = ping
        self.curve = curve
        self._auth: ThreadAuthenticator | None = None
        self.counters: Counter[str] = Counter()
        self.placement: dict[tuple[bytes, bytes], _Replica] = {}
        self._ctx = zmq.Context()
        self._stop = threading.Event()
        self._lost: list[_Replica] = []  # found dead by the health thread, handled by the relay thread
        self._opening: set[tuple[bytes, bytes]] = set()  # placed sessions without a reply yet
        self._lock = threading.Lock()
        self.endpoint = ""

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> str:
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self._router.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        if self.curve is not None:
            self._auth = ThreadAuthenticator(self._ctx)
            self._auth.start()
            self._auth.configure_curve(domain="*", location=self.curve.authorized_dir)
            self._router.curve_server = True
            self._router.curve_publickey = self.curve.public
            self._router.curve_secretkey = self.curve.secret
        self._router.bind(self.bind)
        self.endpoint = self._router.getsockopt_string(zmq.LAST_ENDPOINT)
        self._relay = threading.Thread(target=self._run, name="front-relay", daemon=True)
        self._health = threading.Thread(target=self._watch, name="front-health", daemon=True)
        self._relay.start()
        self._health.start()
        return self.endpoint

    def stop(self) -> None:
        self._stop.set()
        self._relay.join(timeout=5)
        self._health.join(timeout=5)
        if self._auth is not None:
            self._auth.stop()
        self._ctx.destroy(linger=0)

    def load(self) -> dict[str, int]:
        """Sessions placed on each live replica."""
        with self._lock:
            return {r.name: len(r.sessions) for r in self.replicas if r.alive}

    def replica_of(self, robot_sid: tuple[bytes, bytes]) -> str | None:
        with self._lock:
            replica = self.placement.get(robot_sid)
            return replica.name if replica is not None else None

    # --- health ---------------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.wait(self.health_period_s):
            for replica in [r for r in self.replicas if r.alive]:
                try:
                    self.ping(replica.actor)
                except Exception as exc:  # noqa: BLE001 - any failure to answer: the replica is lost
                    log.warning("replica %s lost (%s): its sessions re-open elsewhere", replica.name,
                                type(exc).__name__)
                    with self._lock:
                        replica.alive = False
                        self._lost.append(replica)

    # --- relay (one thread owns every socket) ----------------------------------------------------
    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        owners: dict[zmq.Socket, bytes] = {}
        swept = time.monotonic()
        while not self._stop.is_set():
            self._handle_lost(poller, owners)
            if time.monotonic() - swept > DEALER_IDLE_S / 4:
                swept = time.monotonic()
                self._sweep(poller, owners, swept)
            for sock, _ in poller.poll(POLL_MS):
                if sock is self._router:
                    self._from_robot(self._router.recv_multipart(), poller, owners)
                else:
                    frames = sock.recv_multipart()
                    self.counters["replies"] += 1
                    self._router.send_multipart([owners[sock], *frames])
                    self._track_reply(owners[sock], frames)

    def _from_robot(self, frames: list[bytes], poller: zmq.Poller, owners: dict) -> None:
        identity, body = frames[0], frames[1:]
        self.counters["requests"] += 1
        header = body[0] if body else b""
        if len(header) < HEADER.size or header[:2] != MAGIC:
            replica = self._any()  # malformed: the replica answers it as a direct server would
            sid, mtype = bytes(SESSION_BYTES), -1
        else:
            _, _, mtype, sid = HEADER.unpack_from(header)
            with self._lock:
                replica = self.placement.get((identity, sid))
                if replica is None and mtype in OPEN_TYPES:
                    replica = self._least_loaded()
                    if replica is not None:
                        replica.sessions.add((identity, sid))
                        self.placement[(identity, sid)] = replica
                        self._opening.add((identity, sid))
                        self.counters[f"placed_{replica.name}"] += 1
                if replica is not None and mtype == CLOSE_TYPE:
                    replica.sessions.discard((identity, sid))
                    self.placement.pop((identity, sid), None)
                    self._opening.discard((identity, sid))
            if replica is None and mtype == STATS_TYPE:
                replica = self._any()
            if replica is None:
                self.counters["unknown_session"] += 1
                reason = "no live verifier replica" if not self.load() else \
                    "no open decision with this session id (its replica may have been lost: open it again)"
                self._router.send_multipart([identity, *encode(Envelope(sid, Error(int(ErrorCode.UNKNOWN_SESSION),
                                                                                   reason)))])
                return
        if replica is None:
            return
        dealer = replica.dealers.get(identity)
        if dealer is None:
            dealer = self._ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            # no routing id of ours: the replica names each connection itself, so a robot's new
            # connection after a closed one is never taken for a duplicate of it
            dealer.connect(replica.endpoint)
            replica.dealers[identity] = dealer
            owners[dealer] = identity
            poller.register(dealer, zmq.POLLIN)
        replica.used[identity] = time.monotonic()
        dealer.send_multipart(body)

    def _sweep(self, poller: zmq.Poller, owners: dict, now: float) -> None:
        """Close the DEALERs of robots that hold no session on a replica and sent nothing through it
        for ``DEALER_IDLE_S`` (robots come and go; each connection would otherwise stay)."""
        with self._lock:
            busy = {(replica.name, identity) for replica in self.replicas for identity, _ in replica.sessions}
        for replica in self.replicas:
            for identity in list(replica.dealers):
                if (replica.name, identity) not in busy and now - replica.used.get(identity, now) > DEALER_IDLE_S:
                    dealer = replica.dealers.pop(identity)
                    replica.used.pop(identity, None)
                    poller.unregister(dealer)
                    owners.pop(dealer, None)
                    dealer.close(linger=0)
                    self.counters["dealers_closed"] += 1

    def _track_reply(self, identity: bytes, frames: list[bytes]) -> None:
        """A session's first reply being an Error (its Open refused: BUSY, QUOTA, ...): the replica
        kept nothing, and the robot sends no Close; forget the placement."""
        header = frames[0] if frames else b""
        if len(header) < HEADER.size or header[:2] != MAGIC:
            return
        _, _, mtype, sid = HEADER.unpack_from(header)
        key = (identity, sid)
        with self._lock:
            if key not in self._opening:
                return
            self._opening.discard(key)
            replica = self.placement.get(key)
            if mtype == int(MsgType.ERROR) and replica is not None:
                replica.sessions.discard(key)
                del self.placement[key]

    def _handle_lost(self, poller: zmq.Poller, owners: dict) -> None:
        with self._lock:
            lost, self._lost = self._lost, []
            orphans = []
            for replica in lost:
                orphans += sorted(replica.sessions)
                for key in replica.sessions:
                    self.placement.pop(key, None)
                    self._opening.discard(key)
                replica.sessions.clear()
        for replica in lost:
            for dealer in replica.dealers.values():
                poller.unregister(dealer)
                owners.pop(dealer, None)
                dealer.close(linger=0)
            replica.dealers.clear()
            replica.used.clear()
        for identity, sid in orphans:  # the robot opens the decision again, on a live replica
            self.counters["sessions_orphaned"] += 1
            self._router.send_multipart([identity, *encode(Envelope(sid, Error(
                int(ErrorCode.UNKNOWN_SESSION), "the verifier replica serving this decision was lost: open it again")))])

    def _least_loaded(self) -> _Replica | None:
        live = [r for r in self.replicas if r.alive]
        return min(live, key=lambda r: len(r.sessions)) if live else None

    def _any(self) -> _Replica | None:
        with self._lock:
            return self._least_loaded()


def start_replicas(n: int, source: str = "embedded", server_args: dict | None = None, threads: int = 1,
                   num_cpus: float = 1, num_gpus: float = 0, device: str = "cpu",
                   dtype: str = "float32") -> list[tuple[str, object, str]]:
    """``n`` replica actors (Ray must be up), placed by Ray's scheduler on nodes with the resources
    asked for (``num_gpus=1``: one GPU each); (name, actor handle, endpoint) each, once all listen."""
    ray = require("ray", "cloud", RAY_USER)

    cls = replica_class()
    actors = [cls.options(num_cpus=num_cpus, num_gpus=num_gpus).remote(source, server_args, threads, device, dtype)
              for _ in range(n)]
    endpoints = ray.get([a.address.remote() for a in actors])
    return [(f"replica-{i}", a, e) for i, (a, e) in enumerate(zip(actors, endpoints))]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros replicas``."""
    parser.add_argument("--replicas", type=int, default=2, help="verifier replicas (Ray actors)")
    parser.add_argument("--bind", default="tcp://127.0.0.1:5555", help="the robots' endpoint")
    parser.add_argument("--verifier", default="embedded", help="model source of every replica")
    parser.add_argument("--address", help="join this Ray cluster (e.g. auto, or HEAD_IP:6379) instead of starting "
                                          "a local one on 127.0.0.1")
    parser.add_argument("--replica-gpus", type=float, default=0.0, help="GPUs each replica reserves (Ray places "
                                                                        "each replica on a node that has them)")
    parser.add_argument("--device", default="cpu", help="each replica's torch device (cuda on GPU workers)")
    parser.add_argument("--dtype", default="float32", help="each replica's weights dtype for a checkpoint")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per replica")
    parser.add_argument("--batch", type=int, default=1, help="max_batch of each replica (1: off)")
    parser.add_argument("--emulate-tq-s", type=float, default=0.0,
                        help="benchmarks: every verification forward takes at least this long (s; 0: off)")
    parser.add_argument("--curve-keys", help="directory made by `edge-spec-ros keys`: CURVE on the robots' endpoint")


def command(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ray = require("ray", "cloud", RAY_USER)

    from edge_spec_ros.wire.curve import server_keys

    curve = server_keys(Path(args.curve_keys) / "server.key_secret", Path(args.curve_keys) / "authorized") \
        if args.curve_keys else None
    local_ray(**({"address": args.address} if args.address else {}))
    server_args = {"max_batch": args.batch, "emulate_tq_s": args.emulate_tq_s}
    replicas = start_replicas(args.replicas, args.verifier, server_args, args.threads, num_gpus=args.replica_gpus,
                              device=args.device, dtype=args.dtype)
    front = Front(replicas, args.bind, curve=curve)
    print(f"listening on {front.start()} ({args.replicas} replicas: {', '.join(e for _, _, e in replicas)})",
          flush=True)
    import signal

    # SIGTERM ends the loop like Ctrl-C: the handler only appends (no lock in a signal handler), and
    # the finally below shuts Ray down, so no Ray process outlives the command
    terminated: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: terminated.append(signum))
    try:
        last = time.monotonic()
        while not terminated:
            time.sleep(0.2)
            if time.monotonic() - last >= 5:
                last = time.monotonic()
                log.info("sessions per replica: %s; %s", front.load(), dict(front.counters))
    except KeyboardInterrupt:
        pass
    finally:
        front.stop()
        ray.shutdown()
    return 0
