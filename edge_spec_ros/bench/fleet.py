"""Fleet load: N emulated robots making decisions against one verifier at once.

``edge-spec-ros bench fleet`` starts ``edge-spec-ros
serve`` on 127.0.0.1 with the embedded pair, once per server setting (``--settings``: ``off`` is one
verification forward per round, ``batch8`` gathers up to 8 sessions' pending rounds into one forward,
``cloud/batching.py``), and for each N in ``--robots`` (1, 2, 4, 8, 16, 32 by default) runs N robots at
once, each making ``--decisions`` decisions (M), bounded by ``--time-limit`` seconds per point: a robot
starts no new decision after it. Each robot is a ``VerifierClient`` (its own DEALER connection) and an
``EdgeDecoder`` with the pair's drafter; robots are threads spread over ``--procs`` worker processes
(drafting is CPU: the processes keep one interpreter lock from serialising every robot's drafter).
The robots use the link profile ``--profile`` (bench/profiles.py: emulated uplink/downlink, emulated
T_p on the robot, emulated T_q on the server).

Robot r's d-th decision is prompt (r + d) mod P in mode modes[(r + d) mod len(modes)], so every N mixes
the modes. Before the load, every (prompt, mode) decision is run once by a single robot alone against
the first setting's server: its solo output. Reported per setting and N: throughput (tokens emitted by
all robots / wall time of the point), decisions per second, decision latency p50/p95/p99, errors by
code (the robots' exceptions and the server's error counters), the server's mean batch size, and
whether every decision equalled its solo run ("nothing lost or changed"). Exit status 1 if a decision
differed or failed, or none completed.

Each point reports the FSD decisions' pre-draft cache hit rate and the early exits sent and dropped
(an early exit still queued when its round's final leaves is dropped).

Priorities across robots: with ``--moving F`` a share F of the robots (spread evenly over the robot
indices: robot r when ⌊(r + 1)F⌋ > ⌊rF⌋) are "in motion": their decisions are opened with
``Open.priority`` 1 (``ClientConfig.priority``), the others' with 0, and each point also reports the
latency p50/p95/p99 of the robots in motion and of the others separately.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from edge_spec_ros import warm_start
from edge_spec_ros.config_cli import add_config, config_from, doc
from edge_spec_ros.extras import require

DEFAULT_ROBOTS = (1, 2, 4, 8, 16, 32)
DEFAULT_MODES = ("sd", "fsd", "dssd")
REPLY_S = 120.0  # a robot's longest wait for one reply under load
READY_S = 300.0  # worker processes: load the pair and connect (a loaded machine)


@dataclass(frozen=True)
class FleetConfig:
    """robots: the N values; decisions: M per robot; time_limit_s: no decision starts after it (per
    point); profile: link profile (bench/profiles.py); modes: rotated over decisions; prompts: distinct
    (image, instruction) decisions; settings: server settings (``off``, ``batchK``); procs: worker
    processes the robots are spread over; threads: FSD pre-draft threads per robot; temperature and
    seed: sampling (0: greedy); server_threads: torch threads of the verifier;
    moving: share of the robots in motion (their decisions opened with priority 1)."""

    robots: tuple[int, ...] = field(default=DEFAULT_ROBOTS, metadata=doc("N values"))
    decisions: int = field(default=4, metadata=doc("M decisions per robot", 1, 10**6))
    time_limit_s: float = field(default=120.0, metadata=doc("seconds per point after which no decision starts",
                                                            0.0, 1e9))
    profile: str = field(default="loopback", metadata={**doc("link profile (bench/profiles.py)"),
                                                       "choices": ("loopback", "wifi", "go2-paper")})
    modes: tuple[str, ...] = field(default=DEFAULT_MODES, metadata=doc("modes rotated over decisions"))
    prompts: int = field(default=3, metadata=doc("distinct (image, instruction) decisions", 1, 10_000))
    max_new_tokens: int = field(default=24, metadata=doc("tokens per decision", 1, 100_000))
    gamma: int = field(default=4, metadata=doc("draft length γ", 1, 64))
    settings: tuple[str, ...] = field(default=("off",), metadata=doc(
        "server settings side by side: off or batchK (K sessions per forward); e.g. off,batch8"))
    procs: int = field(default=4, metadata=doc("robot worker processes", 1, 1024))
    threads: int = field(default=1, metadata=doc("FSD pre-draft threads per robot", 1, 1024))
    temperature: float = field(default=0.0, metadata=doc("sampling temperature (0: greedy)", 0.0, 100.0))
    seed: int = field(default=0, metadata=doc("sampling seed"))
    server_threads: int = field(default=1, metadata=doc("torch threads of the verifier", 1, 1024))
    moving: float = field(default=0.0, metadata=doc(
        "share of the robots in motion (their decisions opened with priority 1)", 0.0, 1.0))

    def __post_init__(self) -> None:
        if not 0.0 <= self.moving <= 1.0:
            raise ValueError(f"moving is a share of the robots, in [0, 1], got {self.moving}")


def in_motion(robot: int, share: float) -> bool:
    """Whether robot ``robot`` is in motion when a share ``share`` of the fleet is (spread evenly)."""
    return int((robot + 1) * share) > int(robot * share)


MOVING_PRIORITY = 1  # Open.priority of a robot in motion (0: standing still)


def serve_args(setting: str) -> tuple[str, ...]:
    """``edge-spec-ros serve`` options of a setting name: ``off`` or ``batchK`` (K sessions per forward)."""
    match = re.fullmatch(r"off|batch(\d+)", setting)
    if match and (match[1] is None or int(match[1]) >= 2):
        return ("--batch", "--max-batch", match[1]) if match[1] else ()
    raise ValueError(f"server setting {setting!r}: 'off' or 'batchK' with K >= 2")


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


# --- the robots (in worker processes) ----------------------------------------------------------------
class _Robots:
    """What a worker process builds once: the pair, the prompts, the decode settings."""

    def __init__(self, config: FleetConfig) -> None:
        from edge_spec_ros.bench.profiles import PROFILES
        from edge_spec_ros.bench.runner import bench_prompts
        from edge_spec_ros.decoding.reference import DecodeConfig
        from edge_spec_ros.edge.modes import EdgeConfig
        from edge_spec_ros.models.pairs import load_pair
        from edge_spec_ros.spec.sampling import SamplingConfig

        self.config = config
        self.pair = load_pair("embedded")
        self.profile = PROFILES[config.profile]
        self.work = bench_prompts(self.pair.prompt_encoder(),
                                  config.prompts)
        decode = DecodeConfig(max_new_tokens=config.max_new_tokens, gamma=config.gamma,
                              sampling=SamplingConfig(config.temperature), seed=config.seed,
                              stop_tokens=(self.pair.tokenizer.eos_token_id,))
        self.edge = EdgeConfig(decode=decode, threads=config.threads, tp_s=self.profile.tp_s)

    def client_config(self, endpoint: str, priority: int = 0):
        from edge_spec_ros.edge.client import ClientConfig

        return ClientConfig(endpoint=endpoint, uplink=self.profile.uplink, downlink=self.profile.downlink,
                            open_timeout_s=REPLY_S, reply_timeout_s=REPLY_S, priority=priority)

    def item(self, robot: int, d: int) -> tuple[int, str]:
        """(prompt index, mode) of robot ``robot``'s ``d``-th decision."""
        k = robot + d
        return k % len(self.work), self.config.modes[k % len(self.config.modes)]

    def run(self, endpoint: str, robots: list[int], decisions: int, deadline: float) -> list[dict]:
        """Each robot of ``robots`` a thread with its own client and decoder, making up to ``decisions``
        decisions, none starting after ``deadline`` (monotonic)."""
        from edge_spec_ros.edge.client import VerifierClient
        from edge_spec_ros.edge.modes import EdgeDecoder
        from edge_spec_ros.wire.messages import ErrorCode
        from edge_spec_ros.wire.verifier_link import VerifierError, VerifierTimeout

        rows: list[dict] = []
        lock = threading.Lock()
        moving = {r: in_motion(r, self.config.moving) for r in robots}
        clients = [VerifierClient(self.client_config(endpoint, MOVING_PRIORITY if moving[r] else 0)) for r in robots]
        decoders = [EdgeDecoder(c, self.pair.drafter, self.edge) for c in clients]

        def robot(r: int, decoder) -> None:
            for d in range(decisions):
                if time.monotonic() >= deadline:
                    break
                p, mode = self.item(r, d)
                row = {"robot": r, "decision": d, "prompt": p, "mode": mode, "moving": moving[r]}
                t0 = time.perf_counter()
                try:
                    result = decoder.decode(mode, *self.work[p])
                    row.update(tokens=result.tokens, rounds=result.stats.rounds,
                               cache_hits=result.stats.cache_hits, cache_misses=result.stats.cache_misses)
                except VerifierTimeout:
                    row["error"] = "TIMEOUT"
                except VerifierError as exc:
                    row["error"] = ErrorCode(exc.code).name if exc.code in ErrorCode._value2member_map_ \
                        else str(exc.code)
                except Exception as exc:  # reported: a robot must never fail
                    row["error"] = type(exc).__name__
                row["latency_s"] = time.perf_counter() - t0
                row["end"] = time.monotonic()
                with lock:
                    rows.append(row)

        threads = [threading.Thread(target=robot, args=(r, dec), daemon=True) for r, dec in zip(robots, decoders)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for dec, c in zip(decoders, clients):
            dec.close()
            c.close()
        return rows


def _worker(conn, config: FleetConfig) -> None:
    """A worker process: build the robots' parts once, then serve ("run", endpoint, robots) commands."""
    import torch

    torch.set_num_threads(1)
    robots = _Robots(config)
    conn.send("ready")
    while True:
        cmd = conn.recv()
        if cmd is None:
            return
        endpoint, ids, decisions, start_at, time_limit = cmd
        # every process starts its robots at the same moment of the shared monotonic clock
        time.sleep(max(0.0, start_at - time.monotonic()))
        rows = robots.run(endpoint, ids, decisions, start_at + time_limit)
        conn.send(rows)


class _Pool:
    """``procs`` worker processes that stay up across server settings and N."""

    def __init__(self, config: FleetConfig, procs: int) -> None:
        ctx = warm_start.process_context()  # no copy of this process's threads and torch state
        self.conns, self.procs = [], []
        for _ in range(procs):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, config), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        for conn in self.conns:
            if not conn.poll(READY_S):
                raise RuntimeError("a fleet worker process did not start")
            conn.recv()

    def run(self, endpoint: str, n: int, decisions: int, time_limit: float) -> tuple[list[dict], float]:
        """N robots spread round-robin over the processes, ``decisions`` each; (rows, wall seconds)."""
        groups = [list(range(i, n, len(self.conns))) for i in range(len(self.conns))]
        start_at = time.monotonic() + 1.0  # every process has its sockets up by then
        busy = [conn for conn, ids in zip(self.conns, groups) if ids]
        for conn, ids in zip(self.conns, groups):
            if ids:
                conn.send((endpoint, ids, decisions, start_at, time_limit))
        rows = [row for conn in busy for row in conn.recv()]
        wall = max((row["end"] for row in rows), default=start_at) - start_at
        return rows, wall

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


def _server_counters(endpoint: str) -> dict[str, int]:
    from edge_spec_ros.edge.client import ClientConfig, VerifierClient
    from edge_spec_ros.wire.messages import Stats

    with VerifierClient(ClientConfig(endpoint=endpoint, reply_timeout_s=REPLY_S)) as c:
        c.register(bytes(16))
        c.send(bytes(16), Stats())
        return json.loads(c.receive(bytes(16)).counters)


def _point(rows: list[dict], wall: float, solo: dict, n: int, before: dict, after: dict) -> dict:
    from edge_spec_ros.bench.soak import _errors_by_code

    done = [r for r in rows if "tokens" in r]
    latencies = [r["latency_s"] for r in done]
    tokens = sum(len(r["tokens"]) for r in done)
    errors = Counter(r["error"] for r in rows if "error" in r)
    server = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
    server_errors = _errors_by_code(server)
    different = [(r["robot"], r["decision"], r["mode"]) for r in done if r["tokens"] != solo[(r["prompt"], r["mode"])]]
    batches = server.get("batches", 0)

    def quantiles(rows_: list[dict]) -> dict[str, float]:
        values = [r["latency_s"] for r in rows_]
        return {"p50": _percentile(values, 50) * 1e3, "p95": _percentile(values, 95) * 1e3,
                "p99": _percentile(values, 99) * 1e3, "decisions": len(values)}

    by_motion = {"moving": quantiles([r for r in done if r.get("moving")]),
                 "still": quantiles([r for r in done if not r.get("moving")])}
    busy_s, busy_tokens = _all_busy(rows)
    hits, misses = sum(r.get("cache_hits", 0) for r in done), sum(r.get("cache_misses", 0) for r in done)
    return {
        "robots": n, "decisions": len(done), "tokens": tokens, "wall_s": wall,
        "tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "all_busy_s": busy_s, "tokens_per_s_all_busy": busy_tokens / busy_s if busy_s > 0 else 0.0,
        "decisions_per_s": len(done) / wall if wall > 0 else 0.0,
        "latency_ms": {"p50": _percentile(latencies, 50) * 1e3, "p95": _percentile(latencies, 95) * 1e3,
                       "p99": _percentile(latencies, 99) * 1e3, "max": max(latencies, default=0.0) * 1e3},
        "errors_robot": dict(errors), "errors_server": server_errors,
        "rounds_verified": server.get("rounds_verified", 0),
        "mean_batch": (server.get("batched_rounds", 0) / batches) if batches else 1.0,
        "exact": not different and not errors, "different": different[:20],
        "latency_by_motion_ms": by_motion,
        "cache_hit_rate": hits / (hits + misses) if hits + misses else float("nan"),
        "early_exits_sent": server.get("early_exits_sent", 0),
        "early_exits_dropped": server.get("early_exits_dropped", 0),
    }


def _all_busy(rows: list[dict]) -> tuple[float, int]:
    """The stretch of a run while every robot was still deciding: from the first decision's start to
    the end of the first robot's last decision; (its seconds, the tokens of the decisions that ended in
    it). Throughput over the whole run also counts the tail in which robots that finished early (the
    ones in motion, served first) leave fewer rounds to batch; this is the throughput at N robots."""
    if not rows:
        return 0.0, 0
    start = min(r["end"] - r["latency_s"] for r in rows)
    last: dict[int, float] = {}
    for r in rows:
        last[r["robot"]] = max(last.get(r["robot"], r["end"]), r["end"])
    end = min(last.values())
    return end - start, sum(len(r["tokens"]) for r in rows if "tokens" in r and r["end"] <= end)


def fleet(config: FleetConfig, progress=lambda line: None) -> dict:
    from edge_spec_ros.bench.profiles import PROFILES
    from edge_spec_ros.bench.report import stamp
    from edge_spec_ros.server_process import verifier_server

    for setting in config.settings:
        serve_args(setting)  # refuse a bad name before anything starts
    profile = PROFILES[config.profile]
    robots = _Robots(config)  # the solo runs, in this process
    report: dict = {"stamp": stamp(robots.pair), "config": asdict(config), "profile": profile.name,
                    "emulated": profile.emulated(), "settings": {}, "solo": {}, "exact": True}
    solo: dict[tuple[int, str], list[int]] = {}
    top = max(config.robots)
    pool = _Pool(config, max(1, min(config.procs, top)))
    try:
        for i, setting in enumerate(config.settings):
            args = ["--threads", str(config.server_threads), "--max-sessions", str(max(64, 2 * top)),
                    *profile.serve_args(), *serve_args(setting)]
            with verifier_server(*args, idle_exit_s=max(120.0, config.time_limit_s * 2)) as server:
                if i == 0:  # each distinct decision once, one robot alone: the reference of every run
                    items = sorted({robots.item(r, d) for r in range(top) for d in range(config.decisions)})
                    for p, mode in items:
                        from edge_spec_ros.edge.client import VerifierClient
                        from edge_spec_ros.edge.modes import EdgeDecoder

                        with VerifierClient(robots.client_config(server.endpoint)) as c, \
                                EdgeDecoder(c, robots.pair.drafter, robots.edge) as dec:
                            solo[(p, mode)] = dec.decode(mode, *robots.work[p]).tokens
                    report["solo"] = {f"{p}/{m}": len(t) for (p, m), t in solo.items()}
                    progress(f"solo runs: {len(solo)} distinct decisions")
                points = []
                pool.run(server.endpoint, min(top, len(pool.conns)), 1, config.time_limit_s)  # untimed warm-up
                for n in config.robots:
                    before = _server_counters(server.endpoint)
                    rows, wall = pool.run(server.endpoint, n, config.decisions, config.time_limit_s)
                    point = _point(rows, wall, solo, n, before, _server_counters(server.endpoint))
                    points.append(point)
                    report["exact"] = report["exact"] and point["exact"] and point["decisions"] > 0
                    progress(f"{setting} N={n}: {point['tokens_per_s']:.1f} tok/s "
                             f"({point['tokens_per_s_all_busy']:.1f} while all busy), p50 "
                             f"{point['latency_ms']['p50']:.0f} ms, p99 {point['latency_ms']['p99']:.0f} ms, "
                             f"batch {point['mean_batch']:.2f}, exact {point['exact']}")
                report["settings"][setting] = points
    finally:
        pool.close()
    return report


def forward_costs(batches: tuple[int, ...] = (1, 2, 4, 8), repeats: int = 60, gamma: int = 4) -> list[dict]:
    """The verifier's side alone: time of B sessions' rounds (γ draft tokens each, every exit's logits)
    as B solo forwards and as one batched forward (``DecoderStack.run_batch``), on the embedded pair
    with one torch thread: what batching saves per round on this machine."""
    import torch

    from edge_spec_ros.bench.runner import bench_prompts
    from edge_spec_ros.models.pairs import load_pair

    torch.set_num_threads(1)
    pair = load_pair("embedded", parts=("verifier",))
    verifier, stack = pair.verifier, pair.verifier.stack
    work = bench_prompts(pair.prompt_encoder(), max(batches))
    caches = [stack.prefill(prompt) for prompt, _ in work]
    draft = list(range(300, 300 + gamma))

    def items(b: int):
        return [(kv, prompt.input_ids.tolist() + draft, len(prompt.input_ids) - 1)
                for kv, (prompt, _) in zip(caches[:b], work[:b])]

    def solo(b: int) -> None:
        for kv, seq, first in items(b):
            for _ in verifier.exits(kv, seq, first):
                pass

    def batched(b: int) -> None:
        for outputs in stack.run_batch(items(b)):
            for out in outputs:
                if out.layer == verifier.num_layers:
                    stack.logits(out.hidden)
                elif out.layer in verifier.exit_layers:
                    verifier.exit_logits(out.layer, out.hidden)

    rows = []
    for b in batches:
        row = {"sessions": b}
        for name, run in (("solo_ms", solo), ("batched_ms", batched)):
            run(b)  # warm
            t0 = time.perf_counter()
            for _ in range(repeats):
                run(b)
            row[name] = (time.perf_counter() - t0) / repeats * 1e3
        rows.append(row)
    return rows


def table(report: dict) -> str:
    from edge_spec_ros.bench.report import stamp_line

    c = report["config"]
    lines = [stamp_line(report["stamp"]),
             f"profile {report['profile']}; modes {','.join(c['modes'])}; M = {c['decisions']} decisions per robot "
             f"(none started after {c['time_limit_s']:.0f} s); {c['max_new_tokens']} new tokens at most, γ = "
             f"{c['gamma']}, temperature {c['temperature']}; robots in {c['procs']} processes",
             *[f"  {line}" for line in report["emulated"]],
             "| server | N | decisions | tokens/s | × N=1 | tokens/s all busy | decisions/s | p50 ms | p95 ms | p99 ms | "
             "mean batch | FSD cache hits | early exits sent / dropped | errors | = solo |"
             + (" in motion p50 / p95 / p99 ms | still p50 / p95 / p99 ms |" if c.get("moving") else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if c.get("moving") else "")]
    for setting, points in report["settings"].items():
        base = points[0]["tokens_per_s"] if points and points[0]["tokens_per_s"] else float("nan")
        for p in points:
            errors = {**p["errors_robot"], **{f"server {k}": v for k, v in p["errors_server"].items()}}
            lines.append(f"| {setting} | {p['robots']} | {p['decisions']} | {p['tokens_per_s']:.1f} | "
                         f"{p['tokens_per_s'] / base:.2f} | {p['tokens_per_s_all_busy']:.1f} | "
                         f"{p['decisions_per_s']:.2f} | {p['latency_ms']['p50']:.0f} | "
                         f"{p['latency_ms']['p95']:.0f} | {p['latency_ms']['p99']:.0f} | {p['mean_batch']:.2f} | "
                         f"{_percent(p.get('cache_hit_rate', float('nan')))} | "
                         f"{p.get('early_exits_sent', 0)} / {p.get('early_exits_dropped', 0)} | "
                         f"{', '.join(f'{k} {v}' for k, v in errors.items()) or 'none'} | "
                         f"{'yes' if p['exact'] else 'NO'} |" + (_motion_cells(p) if c.get("moving") else ""))
    lines.append("every decision equal to its solo run" if report["exact"] else "DIFFERENT or failed decisions: "
                 "see the JSON")
    return "\n".join(lines)


def _percent(rate: float) -> str:
    return "–" if rate != rate else f"{100 * rate:.0f} %"


def _motion_cells(point: dict) -> str:
    cells = []
    for group in ("moving", "still"):
        q = point["latency_by_motion_ms"][group]
        cells.append(f" {q['p50']:.0f} / {q['p95']:.0f} / {q['p99']:.0f} |" if q["decisions"] else " – |")
    return "".join(cells)


def plot(report: dict, path: str | Path) -> Path:
    matplotlib = require("matplotlib", "all", "the fleet benchmark's plot (bench/fleet.py)")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from edge_spec_ros.bench.report import stamp_line

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), squeeze=False)
    for i, (setting, points) in enumerate(report["settings"].items()):
        n = [p["robots"] for p in points]
        color = plt.cm.tab10(i)
        axes[0][0].plot(n, [p["tokens_per_s"] for p in points], "o-", color=color, label=setting)
        for q, style in (("p50", "o-"), ("p95", "s--"), ("p99", "^:")):
            axes[0][1].plot(n, [p["latency_ms"][q] for p in points], style, color=color, label=f"{setting} {q}")
    for ax in axes[0]:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("robots N")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("throughput (tokens/s, all robots)")
    axes[0][0].set_title(f"fleet throughput ({report['profile']})")
    axes[0][1].set_ylabel("decision latency (ms)")
    axes[0][1].set_yscale("log")
    axes[0][1].set_title("decision latency")
    fig.text(0.01, 0.005, stamp_line(report["stamp"]), fontsize=6, color="#555", ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """FleetConfig's fields as options (``--time-limit`` keeps its spelling)."""
    add_config(parser, FleetConfig, flags={"time_limit_s": "--time-limit"})


def run(config: FleetConfig, out_dir: str | Path) -> tuple[dict, Path, Path]:
    report = fleet(config, progress=lambda line: print(line, flush=True))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"fleet_{config.profile}.json"
    json_path.write_text(json.dumps(report, indent=2))
    png_path = plot(report, out / f"fleet_{config.profile}.png")
    return report, json_path, png_path


def add_command_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench fleet``: the benchmark's and where its report goes."""
    add_arguments(parser)
    parser.add_argument("--out", default="artifacts/fleet", help="directory for the JSON and PNG")
    parser.add_argument("--forwards", action="store_true",
                        help="only time B sessions' rounds as B solo forwards and as one batched forward")


def command(args: argparse.Namespace) -> int:
    if args.forwards:
        from edge_spec_ros.bench.report import machine_stamp

        print(f"{machine_stamp()}; embedded verifier, γ = {args.gamma}, every exit, 1 torch thread")
        print("| sessions B | B solo forwards ms | one batched forward ms | saved |")
        print("|---|---|---|---|")
        for row in forward_costs(tuple(sorted(set(args.robots) | {1})), gamma=args.gamma):
            print(f"| {row['sessions']} | {row['solo_ms']:.1f} | {row['batched_ms']:.1f} | "
                  f"{row['solo_ms'] / row['batched_ms']:.2f}× |")
        return 0
    report, json_path, png_path = run(config_from(FleetConfig, args), args.out)
    print(table(report))
    print(f"wrote {json_path} and {png_path}")
    return 0 if report["exact"] else 1
