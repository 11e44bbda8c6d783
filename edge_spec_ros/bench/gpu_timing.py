r"""Real compute times of a drafter and an early-exit verifier, for the ``go2-paper``-style profiles.

The ``go2-paper`` profile emulates the FSD paper's Go2 figures (Table 8(a), Unitree Go2 with a Jetson
Orin and an A100 server): drafting γT_p = 288 ms at γ = 4 (T_p = 72 ms, a quantized Qwen2-VL-2B on the
Orin), verification T_q = 620 ms (Qwen2-VL-7B with 27 exits), c = T_p/T_q = 0.11, T_c = 120 ms, exit l
of L released at l/L of T_q; its Table 9 gives an A100's latency per batch of B verifications (Vicuna-7B:
17.94, 24.63, 45.79, 96.94 ms at B = 1, 4, 16, 32). This command measures these figures on the hardware
it runs on. With the real-shape sources (``models/real_shapes.py``: the published shapes, random
weights, nothing downloaded) it times the deployment's sizes on one GPU; ``scripts/gpu_timing.sh`` is
that run under a timeout of 8 minutes (docs/real_shapes.md, "GPU timing", with the figures to expect)::

    edge-spec-ros bench gpu-timing --verifier qwen2-vl-7b-shape:vision_layers=32 \
        --drafter qwen2-vl-2b-shape:vision_layers=32 --dtype bfloat16 --device cuda \
        --drafter-quant int4-weight --out artifacts/gpu_timing_profile.json

(the script calls ``main`` with these options: it needs neither ZeroMQ nor rosbags, which the command
line's ``bench`` imports and a GPU image with PyTorch may lack). Per measured round, and as medians, it
writes:

- the prefill of each model (the verifier's and each drafter variant's; image + prompt);
- per γ of ``gammas`` (default 2, 4, 8) and per drafter variant (``dtype``, and ``drafter_quant``'s
  scheme when given, ``models.quantize``): γT_p, γ tokens drafted greedily after the prompt, and
  T_p = γT_p / γ;
- per γ: T_q, one verification of γ + 1 positions with every exit's head run (the final exit's time),
  and each exit's release time, the moment its logits are ready, in seconds and as a fraction of T_q
  (the profile's "exit l at l/L" assumption, measured);
- per B of ``batch_sizes`` (default 1, 4, 16, 32): one batched verification of B sessions' blocks at
  the profile's γ, through the batched server's own code (``cloud.batching.verify_batch``: one forward
  per layer over the B blocks, every exit's head per session), its time and the time per session.
  Where ``cloud.batching`` cannot be imported (its wire codec needs lz4, which a bare GPU image may
  lack) the same forward runs without the server's job bookkeeping (``DecoderStack.run_batch`` and the
  exit heads) and the stamp's ``batched_by`` says so.

The top-level ``tp_s`` and ``tq_s`` are the first drafter variant's T_p and T_q at ``gamma`` (default
4, Table 8's γ): ``edge-spec-ros bench --profile <the JSON file>`` emulates them over ``go2-paper``'s
link (``bench.profiles.profile_named``). On the CPU the same command runs with the shipped pair or a
reduced depth (``qwen2-vl-7b-shape:layers=2``); the tests do. On CUDA the models are built and run
under ``torch.device(device)``, so the tensors the model code creates without a device land on it
(``DecoderStack`` itself moves its inputs to the weights' device and returns logits on the CPU).

Legend: γ — draft length; T_p — one draft forward; T_q — one verification; L — final exit layer;
B — sessions verified in one batched forward.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from edge_spec_ros.bench.report import machine_stamp, pair_stamp
from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.config_cli import UsageError, add_config, config_from, doc
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.models.verifier import BlockForward, EarlyExitVerifier, ExitLogits
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig

INSTRUCTION = "find the silver bottle"
GREEDY = SamplingConfig(0.0)


@dataclass
class TimingConfig:
    """verifier / drafter: model sources (``load_pair``; drafter empty: the verifier source's own);
    adapters: exit-adapter directory for the verifier; dtype, device: of checkpoint weights; gammas:
    the draft lengths γ timed; gamma: the γ of the profile's T_p and T_q (timed too if not in gammas);
    batch_sizes: sessions B per batched verification (empty: none); drafter_quant: the scheme of a second,
    quantized drafter variant (``models.quantize``; empty: none); repeats: measured rounds (after
    ``warmup``)."""

    verifier: str = field(default="embedded", metadata=doc("verifier source (load_pair)"))
    drafter: str = field(default="", metadata=doc("drafter source (empty: the verifier's own)"))
    adapters: str = field(default="", metadata=doc("exit-adapter directory for the verifier"))
    dtype: str = field(default="float32", metadata=doc("checkpoint weights: float32, bfloat16, float16"))
    device: str = field(default="cpu", metadata=doc("cpu, cuda, cuda:1, ..."))
    gammas: tuple[int, ...] = field(default=(2, 4, 8), metadata=doc("draft lengths γ timed"))
    gamma: int = field(default=4, metadata=doc("γ of the profile's T_p and T_q, and of the batched rounds", 1, 64))
    batch_sizes: tuple[int, ...] = field(default=(1, 4, 16, 32), metadata=doc(
        "sessions B verified in one batched forward (empty: none)"))
    drafter_quant: str = field(default="", metadata=doc(
        "a second drafter variant timed beside the dtype one, quantized by this scheme (models/quantize.py: "
        "int8-dynamic, int8-weight, int4-weight on CUDA; empty: none)"))
    repeats: int = field(default=10, metadata=doc("measured rounds", 1, 10**6))
    warmup: int = field(default=2, metadata=doc("rounds before the measured ones", 0, 10**6))

    def __post_init__(self) -> None:
        if self.gamma < 1 or self.repeats < 1 or self.warmup < 0:
            raise ValueError(f"need gamma >= 1, repeats >= 1, warmup >= 0; got {self.gamma}, {self.repeats}, "
                             f"{self.warmup}")
        if not all(1 <= g <= 64 for g in self.gammas) or not all(b >= 1 for b in self.batch_sizes):
            raise ValueError(f"need every γ in 1..64 and every batch size >= 1; got gammas {self.gammas}, "
                             f"batch sizes {self.batch_sizes}")

    @property
    def timed_gammas(self) -> tuple[int, ...]:
        """``gammas`` with the profile's ``gamma``, ascending."""
        return tuple(sorted({*self.gammas, self.gamma}))


@dataclass
class Timings:
    """Seconds, medians over the repeats. The top-level T_p, γT_p, T_q and exits are at the profile's γ
    and the first drafter variant; ``by_gamma[γ]``: T_q, exit release (s and fraction of T_q) and each
    drafter variant's γT_p and T_p; ``drafters[name]``: that variant's prefill and T_p per γ;
    ``batched[B]``: one batched verification of B blocks and its time per session."""

    prefill_verifier_s: float
    prefill_drafter_s: float
    tp_s: float
    draft_gamma_s: float
    tq_s: float
    exit_fraction: dict[int, float]
    exit_ready_s: dict[int, float] = field(default_factory=dict)
    by_gamma: dict[int, dict] = field(default_factory=dict)
    drafters: dict[str, dict] = field(default_factory=dict)
    batched: dict[int, dict] = field(default_factory=dict)
    rounds: list[dict] = field(default_factory=list)


@dataclass
class _TimedJob:
    """A block for the batched forward (``cloud.batching.BatchJob``) whose verdicts are not needed here."""

    forward: BlockForward

    def begin(self) -> BlockForward:
        return self.forward

    def exit(self, out: ExitLogits) -> None:
        pass


def _clock(device: str) -> Callable[[], float]:
    """perf_counter after the device's queued work is done (CUDA kernels run asynchronously)."""
    if device.startswith("cuda"):
        def now() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()
        return now
    return time.perf_counter


def on_device(device: str) -> contextlib.AbstractContextManager:
    """``torch.device(device)`` as the default device (tensors made without one land there), or nothing
    on the CPU."""
    return torch.device(device) if device != "cpu" else contextlib.nullcontext()


def _prompt_on(prompt: EncodedPrompt, device: str) -> EncodedPrompt:
    """The prompt's tensors on ``device``."""
    return replace(prompt, **{f: getattr(prompt, f).to(device) for f in
                              ("input_ids", "mm_token_type_ids", "pixel_values", "image_grid_thw")
                              if getattr(prompt, f) is not None})


def _verify_solo(verifier: EarlyExitVerifier, kv, sequence: list[int], first: int,
                 now: Callable[[], float]) -> dict[int, float]:
    """One verification streaming every exit: the release time (s) of each exit, the final one = T_q."""
    ready: dict[int, float] = {}
    t0 = now()
    with torch.inference_mode():
        for out in verifier.exits(kv, sequence, first):
            ready[out.layer] = now() - t0
    return ready


def _verify_batched(verifier: EarlyExitVerifier, kv, sequence: list[int], first: int, sessions: int,
                    now: Callable[[], float]) -> float:
    """``sessions`` copies of one block (each its own KV cache, forked from the prompt's) verified in one
    batched forward (``batch_runner``); seconds for the whole batch."""
    exits = frozenset(verifier.exit_layers)
    blocks = [BlockForward(kv.fork(kv.floor), sequence, first, exits) for _ in range(sessions)]
    run, _ = batch_runner()
    t0 = now()
    run(verifier, blocks)
    return now() - t0


def _server_batch(verifier: EarlyExitVerifier, blocks: list[BlockForward]) -> None:
    """The blocks as the batched server runs them: ``cloud.batching.verify_batch``, one job per block."""
    from edge_spec_ros.cloud.batching import verify_batch

    failed = [e for e in verify_batch(verifier, [_TimedJob(block) for block in blocks]) if e is not None]
    if failed:
        raise RuntimeError(f"batched verification of {len(blocks)} blocks failed: {failed[0]!r}") from failed[0]


def _stack_batch(verifier: EarlyExitVerifier, blocks: list[BlockForward]) -> None:
    """The same forward without the server's job bookkeeping: ``DecoderStack.run_batch`` and, per block,
    each exit's head and the final one, as ``verify_batch`` computes them."""
    L = verifier.num_layers
    for outputs in verifier.stack.run_batch([(b.kv, b.sequence, b.first) for b in blocks]):
        for block, out in zip(blocks, outputs):
            if out.layer == L:
                verifier.stack.logits(out.hidden)
            elif out.layer in block.exits:
                verifier.exit_logits(out.layer, out.hidden)


def batch_runner() -> tuple[Callable[[EarlyExitVerifier, list[BlockForward]], None], str]:
    """The batched server's own code (``cloud.batching.verify_batch``) and its name, or, where that cannot
    be imported (the wire codec's lz4, which a bare GPU image may lack), the same forward without the
    job bookkeeping (``_stack_batch``) and why."""
    try:
        import edge_spec_ros.cloud.batching  # noqa: F401
    except ImportError as exc:
        return _stack_batch, f"models.stack.run_batch + exit heads (cloud.batching not importable: {exc})"
    return _server_batch, "cloud.batching.verify_batch"


def _round(pair, drafters: dict[str, object], prompt: EncodedPrompt, config: TimingConfig,
           now: Callable[[], float]) -> dict:
    """One measured round: every prefill, every variant's draft at every γ, a verification per γ and a
    batched verification per B."""
    row: dict = {"prefill_drafter_s": {}, "draft_gamma_s": {}, "tq_s": {}, "exit_ready_s": {}, "batched_s": {}}
    t0 = now()
    vkv = pair.verifier.start(prompt)
    row["prefill_verifier_s"] = now() - t0
    kvs = {}
    for name, drafter in drafters.items():
        t0 = now()
        kvs[name] = drafter.start(prompt)
        row["prefill_drafter_s"][name] = now() - t0
    prefix = prompt.input_ids.tolist()
    first = len(prefix) - 1
    blocks = {}
    for gamma in config.timed_gammas:
        row["draft_gamma_s"][gamma] = {}
        for name, drafter in drafters.items():
            t0 = now()
            draft = drafter.draft(kvs[name], prefix, gamma, GREEDY, PositionalRNG(0))
            row["draft_gamma_s"][gamma][name] = now() - t0
            blocks.setdefault(gamma, prefix + list(draft.tokens))
        ready = _verify_solo(pair.verifier, vkv, blocks[gamma], first, now)  # γ + 1 positions
        row["tq_s"][gamma] = ready[pair.verifier.num_layers]
        row["exit_ready_s"][gamma] = ready
    for sessions in config.batch_sizes:
        row["batched_s"][sessions] = _verify_batched(pair.verifier, vkv, blocks[config.gamma], first, sessions, now)
    return row


def _median(rows: list[dict], *keys) -> float:
    def at(row: dict):
        for key in keys:
            row = row[key]
        return row
    return statistics.median(at(r) for r in rows)


def summarize(rows: list[dict], config: TimingConfig, names: list[str], layers: list[int]) -> Timings:
    """Medians of the measured rounds (see ``Timings``)."""
    by_gamma = {}
    for g in config.timed_gammas:
        ready = {l: _median(rows, "exit_ready_s", g, l) for l in layers}
        fraction = {l: statistics.median(r["exit_ready_s"][g][l] / r["tq_s"][g] for r in rows) for l in layers}
        draft = {n: _median(rows, "draft_gamma_s", g, n) for n in names}
        by_gamma[g] = {"tq_s": _median(rows, "tq_s", g), "exit_ready_s": ready, "exit_fraction": fraction,
                       "draft_gamma_s": draft, "tp_s": {n: s / g for n, s in draft.items()}}
    drafters = {n: {"prefill_s": _median(rows, "prefill_drafter_s", n),
                    "tp_s": {g: by_gamma[g]["tp_s"][n] for g in config.timed_gammas}} for n in names}
    batched = {}
    for b in config.batch_sizes:
        t = _median(rows, "batched_s", b)
        batched[b] = {"gamma": config.gamma, "tq_s": t, "per_session_s": t / b}
    main, at = names[0], by_gamma[config.gamma]
    return Timings(prefill_verifier_s=_median(rows, "prefill_verifier_s"),
                   prefill_drafter_s=drafters[main]["prefill_s"], tp_s=at["tp_s"][main],
                   draft_gamma_s=at["draft_gamma_s"][main], tq_s=at["tq_s"], exit_fraction=at["exit_fraction"],
                   exit_ready_s=at["exit_ready_s"], by_gamma=by_gamma, drafters=drafters, batched=batched, rounds=rows)


def measure(config: TimingConfig, progress: Callable[[str], None] = lambda s: None) -> tuple[Timings, dict]:
    """Load the pair, then time ``warmup + repeats`` rounds (``_round``); returns the timings and the stamp.
    The prompt is encoded on the CPU (as a server decodes a request) and moved to the device."""
    progress(f"loading {config.verifier}" + (f" + drafter {config.drafter}" if config.drafter else ""))
    with on_device(config.device):
        pair = load_pair(config.verifier, drafter=config.drafter or None, adapters=config.adapters or None,
                         dtype=config.dtype, device=config.device)
    drafters = {config.dtype: pair.drafter}
    prompt = _prompt_on(pair.prompt_encoder().encode(INSTRUCTION, synthetic_camera_image(seed=0)), config.device)
    quant_error = ""
    if config.drafter_quant:
        with on_device(config.device):
            try:
                drafters[f"{config.dtype}+{config.drafter_quant}"] = _quantized_drafter(config, prompt)
            except Exception as exc:  # noqa: BLE001 - the other figures are still measured, the stamp says why
                quant_error = f"{type(exc).__name__}: {exc}"
                progress(f"drafter {config.drafter_quant}: {quant_error}; timing the {config.dtype} drafter only")
    progress(f"prompt of {len(prompt)} tokens; verifier L = {pair.verifier.num_layers} with "
             f"{len(pair.verifier.exit_layers)} exits; batched verification by {batch_runner()[1]}")
    now = _clock(config.device)
    rows = []
    for i in range(config.warmup + config.repeats):
        with on_device(config.device):
            row = _round(pair, drafters, prompt, config, now)
        if i >= config.warmup:
            rows.append(row)
        g, draft = config.gamma, row["draft_gamma_s"][config.gamma][config.dtype]
        progress(f"round {i + 1}/{config.warmup + config.repeats}: γT_p {draft * 1e3:.1f} ms, T_q "
                 f"{row['tq_s'][g] * 1e3:.1f} ms (γ = {g})" + (" (warm-up)" if i < config.warmup else ""))
    layers = sorted(rows[0]["exit_ready_s"][config.gamma])
    timings = summarize(rows, config, list(drafters), layers)
    stamp = {"machine": machine_stamp(), "pair": pair_stamp(config.verifier, pair.parameters()),
             "device": config.device, "dtype": config.dtype, "prompt_tokens": len(prompt),
             "verifier_layers": pair.verifier.num_layers, "exits": len(pair.verifier.exit_layers),
             "batched_by": batch_runner()[1]}
    if quant_error:
        stamp["drafter_quant_error"] = quant_error
    return timings, stamp


def _quantized_drafter(config: TimingConfig, prompt: EncodedPrompt):
    """The drafter loaded again (a shape source builds the same weights) and quantized by
    ``config.drafter_quant`` (``models.quantize.quantize``), checked by drafting one token."""
    from edge_spec_ros.models.drafter import Drafter
    from edge_spec_ros.models.quantize import quantize

    again = load_pair(config.verifier, parts=("drafter",), drafter=config.drafter or None, dtype=config.dtype,
                      device=config.device).drafter
    drafter = Drafter(quantize(again.stack.model, config.drafter_quant, config.device))
    drafter.draft(drafter.start(prompt), prompt.input_ids.tolist(), 1, GREEDY, PositionalRNG(0))
    return drafter


def summary_lines(timings: Timings, config: TimingConfig) -> Iterator[str]:
    """The printed summary: per γ, per drafter variant, per batch size; the exits at the profile's γ."""
    ms = 1e3
    yield (f"prefill: verifier {timings.prefill_verifier_s * ms:.1f} ms, " + ", ".join(
        f"drafter {n} {d['prefill_s'] * ms:.1f} ms" for n, d in timings.drafters.items()))
    for g, at in timings.by_gamma.items():
        drafts = ", ".join(f"{n} T_p {at['tp_s'][n] * ms:.1f} ms (γT_p {at['draft_gamma_s'][n] * ms:.1f})"
                           for n in timings.drafters)
        yield f"γ = {g}: T_q {at['tq_s'] * ms:.1f} ms; {drafts}"
    for b, at in timings.batched.items():
        yield (f"batched verification, B = {b} at γ = {at['gamma']}: {at['tq_s'] * ms:.1f} ms, "
               f"{at['per_session_s'] * ms:.1f} ms per session")
    yield (f"exit ready at fraction of T_q (γ = {config.gamma}): "
           + ", ".join(f"{l}: {f:.2f}" for l, f in timings.exit_fraction.items()))
    yield (f"profile (γ = {config.gamma}): T_p {timings.tp_s * ms:.1f} ms, γT_p {timings.draft_gamma_s * ms:.1f} ms, "
           f"T_q {timings.tq_s * ms:.1f} ms, c = T_p/T_q {timings.tp_s / timings.tq_s:.3f} "
           "(FSD Table 8: 72, 288, 620 ms, c = 0.11)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench gpu-timing``."""
    add_config(parser, TimingConfig)
    parser.add_argument("--out", default="", help="write the figures as JSON here")


def command(args: argparse.Namespace) -> int:
    config = config_from(TimingConfig, args)
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {config.device}: no CUDA device is visible to torch {torch.__version__}")
    if config.drafter_quant:
        from edge_spec_ros.models.quantize import check_scheme

        try:
            check_scheme(config.drafter_quant, config.device)
        except ValueError as exc:
            raise UsageError(f"--drafter-quant: {exc}") from None
    if args.out:  # before minutes of measuring: an output that cannot be written fails now
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    timings, stamp = measure(config, lambda s: print(s, file=sys.stderr, flush=True))
    report = {"config": asdict(config), "stamp": stamp, **asdict(timings)}
    for line in summary_lines(timings, config):
        print(line)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
        print(f"wrote {args.out}; emulate these figures with: edge-spec-ros bench --profile {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command without the command line's other imports (``scripts/gpu_timing.sh`` calls it: the
    CLI's ``bench`` needs ZeroMQ and rosbags, which a GPU image with PyTorch may lack)."""
    parser = argparse.ArgumentParser(prog="edge-spec-ros bench gpu-timing",
                                     description="real compute times of a drafter and an early-exit verifier, "
                                                 "for bench --profile FILE")
    add_arguments(parser)
    try:
        return command(parser.parse_args(argv))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
