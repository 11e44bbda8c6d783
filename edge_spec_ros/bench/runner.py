"""AR, SD and FSD side by side on the same prompts, models and link, in one run.

Timing ratios are taken within one run because these machines are noisy; exactness is checked on
the way (greedy outputs must be identical across modes). Prompts are camera image + instruction
pairs, or (``task_set="text"``) the text task set of ``bench/tasks.py``, reported per task kind as
the FSD paper's Table 6: speedups AR→SD and SD→FSD, τ, cache miss rate r and average early exit.
With ``paths=("zmq", "ros")`` every decision also runs through the ROS nodes (``bench/ros_path.py``),
interleaved prompt by prompt with the direct client, and ``ros_vs_zmq`` reports the overhead per round.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import statistics
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Protocol

from transformers import PreTrainedTokenizerBase

from edge_spec_ros.bench.payload import payload_table
from edge_spec_ros.bench.report import stamp
from edge_spec_ros.bench.profiles import Profile, profile_named
from edge_spec_ros.bench.tasks import TASK_KINDS, task_prompts, text_encoder
from edge_spec_ros.config_cli import doc
from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.decoding.reference import DecodeConfig
from edge_spec_ros.edge.client import ClientConfig, VerifierClient
from edge_spec_ros.edge.modes import EXIT_MODES, LOSSY_MODES, MODES, PIPELINED_MODES, EdgeConfig, EdgeDecoder
from edge_spec_ros.edge.pipeline import BRANCHES, DEPTH, MAX_BRANCHES, MAX_DEPTH
from edge_spec_ros.edge.registry import get_mode
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.grammar import book_for
from edge_spec_ros.models.prompt import EncodedPrompt, PromptEncoder, decode_image, encode_image
from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.grammar import parse_action
from edge_spec_ros.sim.samples import SimDataConfig, sim_sample
from edge_spec_ros.spec.pipeline import PipelineTimes, async_cycle, async_throughput, expected_length
from edge_spec_ros.spec.sampling import SamplingConfig

log = logging.getLogger(__name__)

TASK_SETS = ("camera", "text")
PATHS = ("zmq", "ros")
QUEUE_POLICIES = ("priority", "fifo", "random")
BENCH_SEED = 2000  # bench rooms: never in the training data (seed 0) nor held-out evaluation (1000)
# tokens of each mode's untimed warm-up decision: a few rounds for its adaptive γ's estimates (with 4, FSD's
# first block took 3 under wifi, one round left α at 0.88 and its first timed decision drafted γ = 5 where
# SD, with two rounds, drafted 16: 0.74 s against 0.38)
WARM_UP_TOKENS = 16


@dataclass(frozen=True)
class BenchConfig:
    """One run of ``edge-spec-ros bench``: its options are these fields (config_cli.add_config)."""

    profile: str = field(default="loopback", metadata=doc(
        "loopback, wifi, go2-paper, or a JSON file of bench gpu-timing (its T_p and T_q emulated over go2-paper's "
        "link)"))
    modes: tuple[str, ...] = field(default=("ar", "sd", "fsd"), metadata=doc(
        f"comma-separated, of: {', '.join(MODES)}"))
    prompts: int = field(default=3, metadata=doc("number of image + instruction prompts (text set: per kind)",
                                                 1, 10_000))
    max_new_tokens: int = field(default=24, metadata=doc("tokens per decision", 1, 100_000))
    gamma: int = field(default=4, metadata=doc("draft length γ", 1, 64))
    # the paper's Go2 ran 6 early-exit threads (Table 8)
    threads: int = field(default=6, metadata=doc("FSD pre-draft threads N", 1, 1024))
    temperature: float = field(default=0.0, metadata=doc("sampling temperature (0: greedy)", 0.0, 100.0))
    seed: int = field(default=0, metadata=doc("sampling seed"))
    client_policy: str = field(default="priority", metadata={**doc("the robot's queue policy"),
                                                             "choices": QUEUE_POLICIES})
    server_policy: str = field(default="priority", metadata={**doc("the verifier's queue policy"),
                                                             "choices": QUEUE_POLICIES})
    sweep_threads: tuple[int, ...] = field(default=(), metadata=doc("e.g. 1,2,4,6 (FSD Fig. 4a)"))
    sweep_gamma: tuple[int, ...] = field(default=(), metadata=doc("e.g. 2,4,6,8 (FSD Fig. 4b)"))
    sweep_policies: bool = field(default=False, metadata=doc("client × server queue policies (Table 7)"))
    adaptive_gamma: bool = field(default=True, metadata=doc(
        "γ by ODLD, cloud fallback by AS² with probes back (TK-SLT; edge/gamma.py); --no-adaptive-gamma: every "
        "round drafts --gamma, as in the papers' tables (the sweeps always do)"))
    first_block: bool = field(default=True, metadata=doc(
        "the first block rides with the Open: drafted from the prompt while the Open travels and is prefilled "
        "(edge/first_block.py); --no-first-block: Open, Opened, then the first draft"))
    pipeline_gamma: bool = field(default=True, metadata=doc(
        "with adaptive γ, pico and pico-fsd price γ by the pipeline's model (spec.pipeline.pipelined_gamma); "
        "--no-pipeline-gamma: ODLD's serial γ*"))
    branch_blocks: int = field(default=BRANCHES, metadata=doc(
        "pico, pico-fsd: branch blocks per round for the K likeliest other verdicts of the block being verified "
        "(edge/pipeline.py; 0: none)", 0, MAX_BRANCHES))
    pipeline_depth: int = field(default=DEPTH, metadata=doc(
        "pico, pico-fsd: blocks drafted ahead of the one being verified (edge/pipeline.py): 1, the next (PicoSpec); "
        "2, the one after it too", 1, MAX_DEPTH))
    task_set: str = field(default="camera", metadata={**doc(
        "camera: image + instruction prompts; text: conversation, code, maths, instructions, summarisation, QA "
        "(--prompts per kind, bench/tasks.py), reported per kind (FSD Table 6)"), "choices": TASK_SETS})
    tasks: tuple[str, ...] = field(default=TASK_KINDS, metadata=doc("task kinds of the text set"))
    # zmq: EdgeDecoder over the direct ZeroMQ client; ros: the same decoder over RosVerifierLink through a
    # bridge_node process (bench/ros_path.py), interleaved prompt by prompt with the direct path
    paths: tuple[str, ...] = field(default=("zmq",), metadata=doc(
        "zmq,ros: also run every mode through the ROS nodes (RosVerifierLink and a bridge_node process) beside "
        "the direct ZeroMQ client, interleaved, and report the overhead per round"))
    grammar: str = field(default="", metadata=doc(
        "a reply constraint (docs/grammar.md: action, action-brief or EBNF text): every mode runs again under it "
        "in the same run, and the report sets them side by side: parse rate, τ, α, bytes per round, decision "
        "latency"))

    def __post_init__(self) -> None:
        profile_named(self.profile)  # a known name or a readable gpu_timing result, else ValueError
        unknown = set(self.modes) - set(MODES)
        if unknown:
            raise ValueError(f"unknown modes {sorted(unknown)}; choose from {MODES}")
        if self.task_set not in TASK_SETS:
            raise ValueError(f"unknown task set {self.task_set!r}; choose one of {TASK_SETS}")
        unknown = set(self.tasks) - set(TASK_KINDS)
        if unknown:
            raise ValueError(f"unknown task kinds {sorted(unknown)}; choose from {TASK_KINDS}")
        if set(self.paths) - set(PATHS) or "zmq" not in self.paths or len(set(self.paths)) != len(self.paths):
            raise ValueError(f"paths {self.paths}: the direct path zmq, optionally ros beside it ({PATHS})")


class RobotModels(Protocol):
    """What the robot side of the bench needs: the drafter, the tokenizer it shares with the verifier,
    the image pixel budget, and what the stamp names (``models.pairs.ModelPair`` is one)."""

    drafter: Drafter
    tokenizer: PreTrainedTokenizerBase
    max_pixels: int
    source: str

    def parameters(self) -> dict[str, int]: ...


@dataclass
class ModeResult:
    """stats: merged over the prompts; outputs and runs: per prompt, in prompt order."""

    stats: DecodeStats
    outputs: list[list[int]] = field(default_factory=list)
    runs: list[DecodeStats] = field(default_factory=list)
    adaptive: dict[str, float] | None = None  # the γ controller's estimates after the mode's decisions


def adaptive_state(decoder: EdgeDecoder, mode: str) -> dict[str, float] | None:
    """What ``mode``'s adaptive γ controller ended with (None: fixed γ or not speculative): α, the cost
    ratios b (transmission), c (drafting), d (propagation) and a (cloud-only token) over T_LLM, the
    link fit in absolute units, γ*, AS²'s speedup estimate, each regime's measured wall time per token,
    whether it speculates, probes both ways and hand-overs to the cloud."""
    entry = decoder._parts.adaptive.get(mode) if decoder.config.adaptive_gamma else None
    if entry is None:
        return None
    policy = entry[1]
    ctl = policy.controller
    b, c, d, a = ctl.cost_ratios()
    fit = ctl.link.fit()
    choice = ctl.choice()
    return {"alpha": ctl.alpha, "b": b, "c": c, "d": d, "a": a, "t_llm_ms": ctl.t_llm_s * 1e3,
            "propagation_ms": fit.propagation_s * 1e3, "per_kb_ms": fit.per_byte_s * 1e6,
            "gamma": float(choice.gamma), "speedup_estimate": choice.speedup,
            "spec_ms": policy.spec_s * 1e3, "cloud_first_ms": policy.cloud.first_s * 1e3,
            "cloud_ms": policy.cloud.token_s * 1e3,
            "speculate": float(policy.speculates(choice=choice)),
            "probes": float(policy.probes), "cloud_probes": float(policy.cloud_probes),
            "hand_overs": float(policy.hand_overs), "rounds_observed": float(ctl.observations),
            "cloud_tokens": float(ctl.cloud_tokens)}


def bench_prompts(encoder: PromptEncoder, n: int) -> list[tuple[EncodedPrompt, bytes]]:
    """n fixed (prompt, JPEG) pairs: decisions of the closed loop in the simulated room (held-out
    states on the way to the named target, the camera frame and the instruction); the prompt is
    encoded from the decoded JPEG the verifier sees."""
    data = SimDataConfig(seed=BENCH_SEED, random_pose_fraction=0.0, lookalike_fraction=0.0, detour_fraction=0.0)
    out = []
    for i in range(n):
        sample = sim_sample(data, i)
        jpg = encode_image(sample.image)
        out.append((encoder.encode(sample.instruction, decode_image(jpg)), jpg))
    return out


def merge(stats: list[DecodeStats]) -> DecodeStats:
    """Sum counters and times over decodes (lists concatenate; the TTFT becomes a mean)."""
    total = DecodeStats(stats[0].mode)
    for s in stats:
        for f in dataclasses.fields(DecodeStats):
            if f.name != "mode":
                setattr(total, f.name, getattr(total, f.name) + getattr(s, f.name))
    total.ttft_s /= len(stats)
    return total


class Bench:
    def __init__(self, pair: RobotModels, endpoint: str, config: BenchConfig,
                 progress: Callable[[str], None] = lambda s: None) -> None:
        self.pair = pair
        self.endpoint = endpoint
        self.config = config
        self.profile: Profile = profile_named(config.profile)
        self.progress = progress
        if config.task_set == "text":
            text = task_prompts(text_encoder(pair.tokenizer), config.prompts, tasks=config.tasks)
            self.prompts = [(t.prompt, b"") for t in text]  # no image: the Open carries none
            self.labels = [t.task for t in text]
        else:
            self.prompts = bench_prompts(pair.prompt_encoder(),
                                         config.prompts)
            self.labels = ["camera"] * len(self.prompts)

    def parse_rate(self, result: ModeResult) -> float:
        """The share of the mode's decisions whose reply parses (``nav.grammar.parse_action``)."""
        texts = [self.pair.tokenizer.decode(tokens, skip_special_tokens=True) for tokens in result.outputs]
        return sum(parse_action(t, NavConfig()).ok for t in texts) / max(1, len(texts))

    def grammar_rows(self, free: dict[str, ModeResult], constrained: dict[str, ModeResult]) -> dict[str, dict]:
        """Per mode, unconstrained beside under ``--grammar`` (a second pass of the same prompts)."""
        n = len(self.prompts)

        def row(r: ModeResult) -> dict[str, float]:
            s = r.stats
            rounds = max(1, s.rounds)
            return {"parse_rate": self.parse_rate(r), "tau": s.tau, "alpha": s.alpha, "decision_s": s.wall_s / n,
                    "bytes_up_per_round": s.bytes_up / rounds, "bytes_down_per_round": s.bytes_down / rounds}

        return {m: {"free": row(free[m]), "grammar": row(constrained[m])} for m in constrained}

    def run_modes(self, modes: tuple[str, ...], **overrides) -> dict[str, ModeResult]:
        """``modes`` over the direct ZeroMQ client."""
        return self.run_paths(modes, ("zmq",), **overrides)["zmq"]

    def run_paths(self, modes: tuple[str, ...], paths: tuple[str, ...],
                  **overrides) -> dict[str, dict[str, ModeResult]]:
        """path -> mode -> result. After one untimed warm-up decision per mode, the modes alternate
        prompt by prompt (each prompt starts with the next mode in turn) and so do the paths (zmq first
        on even prompts, last on odd ones), so the machine's noise (other work on its cores) hits every
        mode and path alike instead of whichever ran while it lasted."""
        c = self.config
        decode = DecodeConfig(max_new_tokens=c.max_new_tokens, gamma=overrides.pop("gamma", c.gamma),
                              sampling=SamplingConfig(c.temperature), seed=c.seed,
                              stop_tokens=(self.pair.tokenizer.eos_token_id,))
        edge = EdgeConfig(decode=decode, threads=c.threads, client_policy=c.client_policy,
                          server_policy=c.server_policy, tp_s=self.profile.tp_s,  # T_q: Profile.serve_args
                          adaptive_gamma=c.adaptive_gamma, branch_blocks=c.branch_blocks,
                          first_block=c.first_block, pipeline_gamma=c.pipeline_gamma,
                          pipeline_depth=c.pipeline_depth)
        edge = dataclasses.replace(edge, **overrides)
        warm = dataclasses.replace(edge, decode=dataclasses.replace(
            decode, max_new_tokens=min(WARM_UP_TOKENS, decode.max_new_tokens)))
        client_config = ClientConfig(endpoint=self.endpoint, uplink=self.profile.uplink,
                                     downlink=self.profile.downlink, reply_timeout_s=60.0)
        results: dict[str, dict[str, ModeResult]] = {p: {} for p in paths}
        with ExitStack() as stack:
            links = {"zmq": stack.enter_context(VerifierClient(client_config))}
            if "ros" in paths:
                from edge_spec_ros.bench.ros_path import RosPath  # rclpy only when asked for

                self.progress("starting bridge_node for the ROS path")
                links["ros"] = stack.enter_context(RosPath(self.endpoint, self.profile)).link
            grammars = book_for(self.pair.tokenizer, self.pair.drafter.stack.vocab_size) if edge.grammar else None
            decoders = {p: EdgeDecoder(links[p], self.pair.drafter, edge, grammars=grammars) for p in paths}
            for mode in modes:
                for p in paths:  # untimed warm-up, on the timed decoder: its γ controller starts measured
                    decoders[p].config = warm
                    decoders[p].decode(mode, *self.prompts[0])
                    decoders[p].config = edge
            runs: dict[str, dict[str, list]] = {p: {m: [] for m in modes} for p in paths}
            for i, (prompt, jpg) in enumerate(self.prompts):
                shift = i % len(modes)
                for mode in modes[shift:] + modes[:shift]:  # each prompt starts with the next mode
                    for p in (paths if i % 2 == 0 else paths[::-1]):
                        self.progress(f"{mode} γ={decode.gamma} N={edge.threads} prompt {i + 1}/{len(self.prompts)}"
                                      + (f" {p}" if len(paths) > 1 else ""))
                        runs[p][mode].append(decoders[p].decode(mode, prompt, jpg))
            for p in paths:
                for mode in modes:
                    done = runs[p][mode]
                    results[p][mode] = ModeResult(merge([r.stats for r in done]), [r.tokens for r in done],
                                                  [r.stats for r in done], adaptive_state(decoders[p], mode))
        return results

    def run(self) -> dict:
        c = self.config
        by_path = self.run_paths(c.modes, c.paths)
        main = by_path["zmq"]
        report: dict = {
            "stamp": stamp(self.pair),  # commit, machine, pair
            "profile": self.profile.name,
            "description": self.profile.description,
            "emulated": self.profile.emulated(),
            "config": dataclasses.asdict(c),
            "modes": {m: r.stats.as_dict() for m, r in main.items()},
            "adaptive": {m: r.adaptive for m, r in main.items() if r.adaptive is not None},
            "decisions": len(self.prompts),
            "speedups": speedups({m: r.stats for m, r in main.items()}),
            "exact": exactness(main, c.temperature),
            "payload": payload_table(gamma=c.gamma),
            "sweeps": {},
        }
        if "ros" in by_path:
            report["paths"] = {"ros": {m: r.stats.as_dict() for m, r in by_path["ros"].items()}}
            report["ros_vs_zmq"] = ros_vs_zmq(by_path["zmq"], by_path["ros"], c.temperature, c.adaptive_gamma)
            report["paths_exact"] = paths_exactness(report["ros_vs_zmq"])
        if "pico" in main:
            report["picospec_model"] = picospec_check(main, c.gamma)
        if c.task_set == "text":
            report["tasks"] = per_task(main, self.labels)
        if c.grammar:
            constrained = self.run_modes(c.modes, grammar=c.grammar)
            report["grammar"] = self.grammar_rows(main, constrained)
            report["grammar_exact"] = exactness(constrained, c.temperature)
        # the sweeps are the FSD paper's Fig. 4 at a fixed γ (every round drafts γ): AS² off
        fixed = {"adaptive_gamma": False}
        if c.sweep_threads:
            base = main["sd"].stats if "sd" in main and not c.adaptive_gamma else \
                self.run_modes(("sd",), **fixed)["sd"].stats
            rows = []
            for n in c.sweep_threads:
                fsd = self.run_modes(("fsd",), threads=n, **fixed)["fsd"].stats
                rows.append({"threads": n, "speedup_sd_fsd": base.wall_s / fsd.wall_s, "miss_rate": fsd.miss_rate})
            report["sweeps"]["threads"] = rows
        if c.sweep_gamma:
            rows = []
            for g in c.sweep_gamma:
                res = self.run_modes(("ar", "sd", "fsd"), gamma=g, **fixed)
                rows.append({"gamma": g, **speedups({m: r.stats for m, r in res.items()}),
                             "tau": res["sd"].stats.tau, "miss_rate": res["fsd"].stats.miss_rate})
            report["sweeps"]["gamma"] = rows
        if c.sweep_policies:
            rows = []
            for client, server in itertools.product(("priority", "random", "fifo"), ("priority", "fifo")):
                for n in c.sweep_threads or (c.threads,):
                    fsd = self.run_modes(("fsd",), threads=n, client_policy=client, server_policy=server,
                                         **fixed)["fsd"]
                    rows.append({"client": client, "server": server, "threads": n, "miss_rate": fsd.stats.miss_rate})
            report["sweeps"]["policies"] = rows
        return report


def timing_dependent(mode: str, temperature: float, adaptive_gamma: bool) -> bool:
    """Whether ``mode``'s tokens may change with timing alone (between two runs on one path): sampled
    PicoSpec modes cut blocks where the verdict arrives, and ODLD picks γ from measured times; both
    stay exact in distribution. Greedy output never depends on timing, nor cloud-only AR's."""
    return temperature > 0 and (mode in PIPELINED_MODES or (adaptive_gamma and get_mode(mode).speculative))


def ros_vs_zmq(zmq: dict[str, ModeResult], ros: dict[str, ModeResult], temperature: float = 0.0,
               adaptive_gamma: bool = False) -> dict[str, dict]:
    """Per mode: mean decision latency and open (prefill) time on each path, rounds, the ROS path's
    overhead per round (t_ros − t_zmq) / rounds over all prompts (rounds: the direct path's; a
    PicoSpec round count may differ between paths, both are given), the median of the per-prompt
    figures, the same without the open (rounds only), whether the two paths emitted the same
    tokens for every prompt (``must_match``: unless timing-dependent, see ``timing_dependent``) and
    whether they put about the same bytes on the wire (``similar_traffic``; None where rounds or
    early exits follow timing): a wire field the ROS path does not carry shows there (the lossy mode's Open.p_top_k
    brings p_δ down whole through the bridge)."""
    rows = {}
    for mode, z in zmq.items():
        r = ros[mode]
        n = len(z.runs)
        per_prompt = [(rs.wall_s - zs.wall_s) / zs.rounds for zs, rs in zip(z.runs, r.runs, strict=True) if zs.rounds]
        rounds = z.stats.rounds or float("nan")
        # rounds (PicoSpec, ODLD) and early exits sent before the next draft cancels them (FSD) follow timing
        loose = mode in PIPELINED_MODES or mode in EXIT_MODES or adaptive_gamma
        rows[mode] = {
            "decision_ms_zmq": z.stats.wall_s / n * 1e3,
            "decision_ms_ros": r.stats.wall_s / n * 1e3,
            "open_ms_zmq": z.stats.prefill_s / n * 1e3,
            "open_ms_ros": r.stats.prefill_s / n * 1e3,
            "rounds_zmq": z.stats.rounds,
            "rounds_ros": r.stats.rounds,
            "overhead_ms_per_round": (r.stats.wall_s - z.stats.wall_s) / rounds * 1e3,
            "overhead_ms_per_round_median": statistics.median(per_prompt) * 1e3 if per_prompt else float("nan"),
            "overhead_ms_per_round_after_open": ((r.stats.wall_s - r.stats.prefill_s)
                                                 - (z.stats.wall_s - z.stats.prefill_s)) / rounds * 1e3,
            "identical": z.outputs == r.outputs,
            "must_match": not timing_dependent(mode, temperature, adaptive_gamma),
            "same_traffic": None if loose else similar_traffic(z.stats, r.stats),
            "bytes_down_per_round_zmq": z.stats.bytes_down_per_round,
            "bytes_down_per_round_ros": r.stats.bytes_down_per_round,
        }
    return rows


TRAFFIC_TOLERANCE = (0.15, 100.0)  # relative, and bytes per round: scalars travel as JSON, their length varies


def similar_traffic(a: DecodeStats, b: DecodeStats) -> bool:
    """Bytes up and down per decision agree within ``TRAFFIC_TOLERANCE`` (either bound suffices)."""
    rel, per_round = TRAFFIC_TOLERANCE
    rounds = max(a.rounds, 1)
    return all(abs(x - y) <= max(rel * max(x, y), per_round * rounds)
               for x, y in ((a.bytes_up, b.bytes_up), (a.bytes_down, b.bytes_down)))


def paths_exactness(rows: dict[str, dict]) -> str:
    """One line: DIFFERENT where a mode that must match did not; notes for the rest."""
    different = [m for m, row in rows.items() if row["must_match"] and not row["identical"]]
    loose = [m for m, row in rows.items() if not row["must_match"] and not row["identical"]]
    traffic = [m for m, row in rows.items() if row["same_traffic"] is False]
    out = f"DIFFERENT outputs on the ROS path in {', '.join(different)}" if different else \
        f"identical outputs on the ROS and direct ZeroMQ paths in {', '.join(m for m in rows if m not in loose)}"
    if loose:
        out += f"; {', '.join(loose)} differ but are timing-dependent when sampled (as between two ZeroMQ runs)"
    if traffic:
        out += f"; the ROS path put different bytes on the wire in {', '.join(traffic)} (a wire field not carried?)"
    return out


def per_task(results: dict[str, ModeResult], labels: list[str]) -> dict[str, dict[str, float]]:
    """FSD Table 6 per task kind: speedups AR→every mode, AR→the kind's best, SD→FSD (wall-time
    ratios over the kind's prompts), τ (tokens per round; FSD's equals SD's, same drafts), cache miss
    rate r and average early exit of the hits (FSD; absent without hits), α; plus ``average``, the
    mean of the rows that have the figure, as in the paper."""
    rows: dict[str, dict[str, float]] = {}
    for task in dict.fromkeys(labels):
        stats = {m: merge([s for s, label in zip(r.runs, labels, strict=True) if label == task])
                 for m, r in results.items()}
        spec = stats.get("fsd") or stats.get("sd")
        row = dict(speedups(stats))
        to_modes = [v for k, v in row.items() if k.startswith("speedup_ar_")]
        if len(to_modes) > 1:
            row["speedup_ar_best"] = max(to_modes)
        if spec is not None:
            row |= {"tau": spec.tau, "alpha": spec.alpha, "tokens": float(spec.tokens)}
        if "fsd" in stats:
            row["miss_rate"] = stats["fsd"].miss_rate
            if stats["fsd"].cache_hits:  # no hit, no hit exit
                row["avg_hit_exit"] = stats["fsd"].avg_hit_exit
        rows[task] = row
    keys = dict.fromkeys(k for row in rows.values() for k in row)
    rows["average"] = {k: sum(values) / len(values) for k in keys
                       for values in [[row[k] for row in rows.values() if k in row]]}
    return rows


def speedups(stats: dict[str, DecodeStats]) -> dict[str, float]:
    """speedup_A_B = wall(A) / wall(B): AR → every mode, and SD → FSD."""
    pairs = [("ar", m) for m in stats if m != "ar"] + [("sd", "fsd")]
    return {f"speedup_{a}_{b}": stats[a].wall_s / stats[b].wall_s
            for a, b in pairs if a in stats and b in stats and stats[b].wall_s > 0}


def exactness(results: dict[str, ModeResult], temperature: float) -> str:
    """Greedy: every exact mode must produce the same tokens. Sampled: SD, FSD and DSSD must (same
    seed, same q); the other modes are exact in distribution only (their q differs)."""
    same_tokens = [m for m in results if m not in LOSSY_MODES] if temperature == 0 else \
        [m for m in results if m in ("sd", "fsd", "dssd")]
    if len(same_tokens) < 2:
        return "not checked"
    same = all(results[m].outputs == results[same_tokens[0]].outputs for m in same_tokens)
    return f"{'identical' if same else 'DIFFERENT'} outputs across {', '.join(same_tokens)}"


def picospec_check(results: dict[str, ModeResult], gamma: int) -> dict[str, float]:
    """PicoSpec's predicted throughput (eqs. 5-9) from the run's own α, T_p, T_c and T_q, beside the
    measured one. Eq. 5's EL counts accepted draft tokens only; every round also yields the target's
    own token, so the prediction is given both as printed (EL(γ)) and with it (EL(γ + 1))."""
    pico = results["pico"].stats
    times = PipelineTimes(t_draft=gamma * pico.tp_s, t_rtt=2 * pico.tc_s, t_verify=pico.tq_s)
    alpha = pico.alpha_mle
    cycle = async_cycle(alpha, gamma, times)
    out = {"alpha": alpha, "t_draft_s": times.t_draft, "t_rtt_s": times.t_rtt, "t_verify_s": times.t_verify,
           "predicted_async_tokens_per_s_eq5": async_throughput(alpha, gamma, times),
           "predicted_async_tokens_per_s_with_target_token": expected_length(alpha, gamma + 1) / cycle,
           "measured_async_tokens_per_s": pico.tokens / pico.wall_s if pico.wall_s else 0.0}
    if "sd" in results:
        sd = results["sd"].stats
        out["predicted_sync_tokens_per_s_with_target_token"] = expected_length(alpha, gamma + 1) / times.sync_cycle
        out["measured_sync_tokens_per_s"] = sd.tokens / sd.wall_s if sd.wall_s else 0.0
    return out
