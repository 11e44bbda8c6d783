"""``edge-spec-ros train-sim-pair``: verifier, distilled drafter and exit adapters for the simulated room.

Phases (each resumable, a finished phase is skipped):

1. ``verifier``: M_q on the expert's samples (``sim/samples.py``);
2. ``dagger1`` … ``daggerN``: DAgger rounds (``training/dagger.py``): roll the verifier out in training
   rooms, then fine-tune it on the states it visited (labelled by the expert) mixed with fresh expert
   samples; the closed-loop success on validation rooms is recorded after every stage;
3. ``drafter``: M_p distilled from the final verifier on the same mix;
4. ``exits``: the verifier's early-exit adapters.

Output (``out``): ``verifier/`` and ``drafter/`` (config.json, float16 model.safetensors, tokenizer),
``exits/`` (exit adapters + the Fig. 7-style report), ``prompt.json`` (the image pixel budget the pair
was trained at; the robot and the verifier must encode images with it), ``training_report.json``
(losses, held-out accuracy, closed-loop validation success per stage, CPU seconds per phase).
Checkpoints live in ``out/.train``. Same seed, same machine type → same weights.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from edge_spec_ros.config_cli import doc
from edge_spec_ros.models.adapters import ExitAdapters
from edge_spec_ros.models.embedded import PROMPT_FILE
from edge_spec_ros.models.loading import load_qwen2vl
from edge_spec_ros.models.prompt import PromptConfig, PromptEncoder
from edge_spec_ros.models.tiny import build_tiny_qwen2vl
from edge_spec_ros.models.tokenizer import load_tokenizer
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.nav import NavConfig, parse_action
from edge_spec_ros.sim.closed_loop import MAX_DECISIONS, ModelPolicy, evaluate
from edge_spec_ros.sim.samples import FAR_MAX_BEARING_DEG, FAR_MIN_M, SimDataConfig, SimSample, sim_sample
from edge_spec_ros.training.dagger import (
    check_fractions, dagger_sample, far_states, load_states, rollout_states, save_states,
)
from edge_spec_ros.training.exits import (
    ExitTrainingConfig,
    evaluate as evaluate_exits,
    train_exits,
    write_report,
)
from edge_spec_ros.training.sim_data import collate
from edge_spec_ros.training.vlm import (
    SIM_DRAFTER_SPEC,
    SIM_VERIFIER_SPEC,
    LMTrainingConfig,
    save_model,
    train_lm,
    write_json,
)

log = logging.getLogger(__name__)

HELD_OUT_SEED_OFFSET = 1000  # held-out samples come from data seed + this, never trained on
VALIDATION_ROOMS_FROM = 100_000  # closed-loop validation rooms during training: evaluation seeds, but far
# from the 0-99 that sim-eval reports, so choosing nothing on them touches the reported figure
LABELS = {"compare": True, "seen": False}  # labels → SimDataConfig.compare
DAGGER_OFFSET = 10_000_000  # expert-mix sample indices of DAgger round r start at r × this


@dataclass(frozen=True)
class SimPairConfig:
    """One ``train-sim-pair`` stage: its options are these fields (config_cli.add_config)."""

    seed: int = field(default=0, metadata=doc("data and initialisation seed"))
    verifier_steps: int = field(default=3000, metadata=doc(
        "the verifier's training steps (with --init-from: fine-tuning steps)", 0, 10**9))
    dagger_rounds: int = field(default=0, metadata=doc(
        "DAgger rounds after the verifier's first phase (the shipped pair: none; rounds of fine-tuning on its own "
        "states lowered validation)", 0, 1000))
    dagger_rooms: int = field(default=200, metadata=doc("training rooms rolled out per DAgger round", 1, 10**6))
    dagger_steps: int = field(default=1000, metadata=doc("fine-tuning steps per DAgger round", 0, 10**9))
    dagger_fraction: float = field(default=0.5, metadata=doc(
        "of each DAgger batch: visited states; the rest expert-mix samples", 0.0, 1.0))
    dagger_final_fraction: float = field(default=0.0, metadata=doc(
        "of the visited states a DAgger batch draws: episodes' final states (where it stopped)", 0.0, 1.0))
    dagger_far_fraction: float = field(default=0.0, metadata=doc(
        "of the visited states a DAgger batch draws: states with the target in view but --far-min-m or more away "
        "(small in the image)", 0.0, 1.0))
    far_fraction: float = field(default=0.0, metadata=doc(
        "of the expert-mix samples (every phase's, not the held-out ones): the target in view, --far-min-m to 6 m "
        "away (sim/samples.far_target_pose; 0: the mix the shipped pair was trained on)", 0.0, 1.0))
    far_min_m: float = field(default=FAR_MIN_M, metadata=doc(
        "distance (centre to centre, m) from which a target in view counts as far"))
    far_max_bearing_deg: float = field(default=FAR_MAX_BEARING_DEG, metadata=doc(
        "the far samples' target bearing, uniform within +-this (10 or less: the target ahead, every label a walk "
        "at it; 30: anywhere in view)", 0.0, 90.0))
    synthetic_fraction: float = field(default=0.0, metadata=doc(
        "of the expert-mix samples (every phase's, not the held-out ones): the camera node's synthetic frame (not a "
        "room) with the expert's search reply, turn left 45 degrees (sim/samples.synthetic_sample; 0: none)",
        0.0, 1.0))
    near_fraction: float = field(default=0.0, metadata=doc(
        "of the expert-mix samples (every phase's, not the held-out ones): the target in view, 0.3-1.0 m from its "
        "surface, where the expert says a short walk or stop (sim/samples.near_target_pose; 0: none)", 0.0, 1.0))
    drafter_steps: int = field(default=1000, metadata=doc("the drafter's training steps", 0, 10**9))
    exit_steps: int = field(default=300, metadata=doc("the exit adapters' training steps", 0, 10**9))
    batch_size: int = field(default=32, metadata=doc("samples per step", 1, 1_000_000))
    lr: float = field(default=2e-3, metadata=doc("peak learning rate", 0.0, 10.0))
    dagger_lr: float = field(default=1e-3, metadata=doc("peak learning rate of the DAgger rounds", 0.0, 10.0))
    exit_bottleneck: int = field(default=32, metadata=doc("exit adapter width", 1, 100_000))
    eval_samples: int = field(default=200, metadata=doc("held-out samples scored at the end", 0, 10**7))
    validation_rooms: int = field(default=50, metadata=doc("closed-loop validation rooms per stage", 0, 10**6))
    max_pixels: int = field(default=224 * 168, metadata=doc(
        "image pixel budget (one token per 28x28 px; the camera's full frame: 8 x 6 = 48 image tokens)",
        28 * 28, 10**8))
    labels: str = field(default="compare", metadata={**doc(
        "the expert's replies: 'compare' (the nearest object in view compared with the instruction before the "
        "decision) or 'seen' (the earlier replies, the shipped pair's base stage)"), "choices": ("compare", "seen")})
    init_from: str = field(default="", metadata=doc(
        "a train-sim-pair directory to fine-tune: its verifier, drafter and exits are the starting weights "
        "(--verifier-steps then counts fine-tuning steps)"))
    average_with: tuple[str, ...] = field(default=(), metadata={**doc(
        "with --init-from: train-sim-pair directories whose verifiers (same architecture, fine-tuned from one "
        "lineage) are averaged with --init-from's, weight by weight (a model soup of fine-tuning rounds), before "
        "this stage"), "nargs": "+", "metavar": "DIR"})

    def data_config(self, **kw) -> SimDataConfig:
        """The expert mix with this stage's far, synthetic and near options (and ``kw``)."""
        return SimDataConfig(far_fraction=self.far_fraction, far_min_m=self.far_min_m,
                             far_max_bearing_deg=self.far_max_bearing_deg, synthetic_fraction=self.synthetic_fraction,
                             near_fraction=self.near_fraction, **kw)

    def __post_init__(self) -> None:
        check_fractions(self.dagger_final_fraction, self.dagger_far_fraction, "dagger_")  # before hours of training
        self.data_config()  # refuses bad far, synthetic and near options likewise
        if self.labels not in LABELS:
            raise ValueError(f"labels must be one of {sorted(LABELS)}, got {self.labels!r}")
        if self.average_with and not self.init_from:
            raise ValueError("average_with needs init_from (the pair whose drafter and exits the stage starts from)")
        for source in (self.init_from, *self.average_with) if self.init_from else ():
            if not (Path(source) / "verifier" / "config.json").is_file():
                raise ValueError(f"{source!r} is not a train-sim-pair directory (no verifier/config.json)")


def average_weights(model: torch.nn.Module, others: list[torch.nn.Module]) -> None:
    """Set ``model``'s weights to the mean of its own and ``others``' (a uniform model soup, Wortsman et
    al. 2022: fine-tuned models of one lineage averaged; each DAgger round changes which rooms succeed,
    their mean keeps what they share). Same architecture required."""
    state = model.state_dict()
    states = [other.state_dict() for other in others]
    for state_ in states:
        if state_.keys() != state.keys() or any(state_[k].shape != v.shape for k, v in state.items()):
            raise ValueError("average_with: the verifiers differ in architecture")
    with torch.no_grad():
        model.load_state_dict({k: (v.float() + sum(s[k].float() for s in states)) / (1 + len(states))
                               for k, v in state.items()})


@dataclass(frozen=True)
class HeldOutScore:
    """Greedy replies on held-out samples: exact text match and same parsed action, in %."""

    text_match_pct: float
    action_match_pct: float


def held_out_score(model, encoder: PromptEncoder, data: SimDataConfig, n: int) -> HeldOutScore:
    policy, nav = ModelPolicy(EarlyExitVerifier(model), encoder), NavConfig()
    text = action = 0
    for i in range(n):
        s = sim_sample(data, i)
        out = policy.reply(s.image, s.instruction)
        text += out == s.text
        action += parse_action(out, nav).action == parse_action(s.text, nav).action
    return HeldOutScore(100 * text / n, 100 * action / n)


def validation_success(model, encoder: PromptEncoder, rooms: int) -> float:
    """Closed-loop success rate (%) of the model's greedy policy in validation rooms."""
    if rooms <= 0:
        return float("nan")
    policy = ModelPolicy(EarlyExitVerifier(model), encoder)
    return 100 * evaluate(policy, list(range(VALIDATION_ROOMS_FROM, VALIDATION_ROOMS_FROM + rooms))).success_rate


class _CpuTimer:
    """CPU seconds of this process per phase (the figure docs/sim.md quotes)."""

    def __init__(self, report: dict) -> None:
        self.seconds = report.setdefault("cpu_s", {})

    def __call__(self, phase: str):
        timer = self

        class _Phase:
            def __enter__(self):
                self.t0 = time.process_time()

            def __exit__(self, *exc):
                timer.seconds[phase] = timer.seconds.get(phase, 0.0) + time.process_time() - self.t0

        return _Phase()


@dataclass
class _Training:
    """What the phases of one ``train_sim_pair`` run share: where it writes, the stage's options, the
    prompt encoder, the expert mix and held-out data, and the report so far (with its CPU timer)."""

    out: Path
    work: Path  # checkpoints, states and the report so far: out/.train
    config: SimPairConfig
    tokenizer: object
    encoder: PromptEncoder
    compare: bool
    data: SimDataConfig  # the expert mix every phase trains on
    held_out: SimDataConfig
    init: Path | None  # the pair a fine-tuning stage starts from
    report: dict
    cpu: _CpuTimer
    progress: Callable[[str, int, int, float], None]

    @classmethod
    def start(cls, out_dir: str | Path, config: SimPairConfig,
              progress: Callable[[str, int, int, float], None]) -> _Training:
        out, work = Path(out_dir), Path(out_dir) / ".train"
        work.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(config.seed)  # the exit adapters' initialisation
        tokenizer = load_tokenizer()
        encoder = PromptEncoder(tokenizer, PromptConfig(max_pixels=config.max_pixels))
        compare = LABELS[config.labels]
        data = config.data_config(seed=config.seed, compare=compare)
        held_out = SimDataConfig(seed=config.seed + HELD_OUT_SEED_OFFSET, compare=compare)
        init = Path(config.init_from) if config.init_from else None
        report_path = work / "report.json"  # the report so far: survives an interruption
        report: dict = json.loads(report_path.read_text()) if report_path.is_file() else {}
        report["config"] = asdict(config)
        return cls(out, work, config, tokenizer, encoder, compare, data, held_out, init, report, _CpuTimer(report),
                   progress)

    def samples_batch(self, samples: list[SimSample]):
        return collate(samples, self.encoder, self.tokenizer)

    def batch(self, step: int, source: SimDataConfig | None = None):
        """Batch ``step`` of ``source`` (default: the expert mix)."""
        n = self.config.batch_size
        return self.samples_batch([sim_sample(self.data if source is None else source, step * n + i) for i in range(n)])

    def lm(self, steps: int, lr: float) -> LMTrainingConfig:
        return LMTrainingConfig(steps=steps, batch_size=self.config.batch_size, lr=lr)

    def steps(self, phase: str, total: int) -> Callable[[int, float], None]:
        """The progress callback of a phase of ``total`` steps."""
        return lambda step, loss: self.progress(phase, step, total, loss)

    def save_report(self) -> None:
        write_json(self.work / "report.json", self.report)


@dataclass(frozen=True)
class _DaggerBatches:
    """DAgger round ``r``'s batches: ``dagger_fraction`` of each drawn from the visited states ``pool``
    (``far`` of them with the target far), the rest expert-mix samples of the round's own indices."""

    run: _Training
    pool: list
    far: list
    r: int

    def __call__(self, step: int):
        config, n = self.run.config, self.run.config.batch_size
        k = round(config.dagger_fraction * n)
        own = [dagger_sample(self.pool, config.seed * 100 + self.r, step * n + i, self.run.data.jpeg_quality,
                             self.run.compare, config.dagger_final_fraction, self.far, config.dagger_far_fraction)
               for i in range(k)]
        mix = [sim_sample(self.run.data, self.r * DAGGER_OFFSET + step * n + i) for i in range(n - k)]
        return self.run.samples_batch(own + mix)


def _validate(run: _Training, model, stage: str, states: list | None = None) -> None:
    """Closed-loop validation success after ``stage`` (once: a resumed run keeps the recorded figure)."""
    stages = run.report.setdefault("validation_success_pct", {})
    if stage in stages:
        return
    with run.cpu("validation"):
        stages[stage] = validation_success(model, run.encoder, run.config.validation_rooms)
    if states is not None:
        run.report.setdefault("dagger_states", {})[stage] = len(states)
    run.save_report()


def _initial_verifier(run: _Training):
    """M_q before training: --init-from's verifier (averaged with --average-with's), else a new one."""
    if run.init is None:
        return build_tiny_qwen2vl(SIM_VERIFIER_SPEC, run.tokenizer, seed=run.config.seed)
    model = load_qwen2vl(str(run.init / "verifier"))
    if run.config.average_with:
        average_weights(model, [load_qwen2vl(str(Path(p) / "verifier")) for p in run.config.average_with])
    return model


def _round_states(run: _Training, model, r: int, name: str) -> list:
    """The states the verifier visits in DAgger round ``r``'s training rooms (stored: a resumed run reads them)."""
    states = load_states(run.work / name)
    if states is None:
        with run.cpu(f"{name} rollouts"):
            states = rollout_states(
                lambda verb: ModelPolicy(EarlyExitVerifier(model), run.encoder, instruction=f"{verb} {{target}}"),
                run.config.seed * 100 + r, run.config.dagger_rooms, MAX_DECISIONS,
                lambda done, total: run.progress(f"{name} rollouts", done, total, float("nan")))
        save_states(states, run.work / name)
    return states


def _dagger_round(run: _Training, model, r: int, visited: list) -> None:
    """DAgger round ``r``: roll out, aggregate the visited states into ``visited``, fine-tune, validate."""
    config, name = run.config, f"dagger{r}"
    states = _round_states(run, model, r, name)
    visited += states  # DAgger aggregates every round's states
    pool = list(visited)
    far = far_states(pool, config.far_min_m) if config.dagger_far_fraction > 0 else []
    if far:
        run.report.setdefault("dagger_far_states", {})[name] = len(far)
    with run.cpu(name):
        train_lm(model, _DaggerBatches(run, pool, far, r), run.lm(config.dagger_steps, config.dagger_lr),
                 run.work / name, None, run.steps(name, config.dagger_steps))
    _validate(run, model, name, states)


def _train_verifier(run: _Training) -> None:
    """Phases 1 and 2: M_q on the expert mix, then the DAgger rounds; saved to out/verifier."""
    config, model = run.config, _initial_verifier(run)
    with run.cpu("verifier"):
        train_lm(model, run.batch, run.lm(config.verifier_steps, config.lr), run.work / "verifier", None,
                 run.steps("verifier", config.verifier_steps))
    _validate(run, model, "verifier")
    visited: list = []
    for r in range(1, config.dagger_rounds + 1):
        _dagger_round(run, model, r, visited)
    save_model(model, run.out / "verifier", run.tokenizer)


def _train_drafter(run: _Training) -> None:
    """Phase 3: M_p distilled from the final verifier; saved to out/drafter."""
    teacher = load_qwen2vl(str(run.out / "verifier"))  # distil from what ships: the float16 weights
    if run.init is not None:
        model = load_qwen2vl(str(run.init / "drafter"))
    else:
        model = build_tiny_qwen2vl(SIM_DRAFTER_SPEC, run.tokenizer, seed=run.config.seed + 1)
    with run.cpu("drafter"):
        train_lm(model, run.batch, run.lm(run.config.drafter_steps, run.config.lr), run.work / "drafter", teacher,
                 run.steps("drafter", run.config.drafter_steps))
    save_model(model, run.out / "drafter", run.tokenizer)


def _score_held_out(run: _Training) -> dict:
    """Load what ships (the float16 weights) and score it on held-out samples; the loaded models."""
    models = {}
    for name in ("verifier", "drafter"):
        models[name] = load_qwen2vl(str(run.out / name))
        if name not in run.report or run.report[name].get("eval_samples") != run.config.eval_samples:
            with run.cpu("held-out"):
                score = held_out_score(models[name], run.encoder, run.held_out, run.config.eval_samples)
            run.report[name] = {"parameters": sum(p.numel() for p in models[name].parameters()),
                                "eval_samples": run.config.eval_samples, **asdict(score)}
            run.save_report()
        log.info("%s: held-out text match %.1f%%, action match %.1f%%", name, run.report[name]["text_match_pct"],
                 run.report[name]["action_match_pct"])
    return models


def _exit_adapters(run: _Training, verifier) -> ExitAdapters:
    """Phase 4: the verifier's exit adapters, trained (from --init-from's, if it has them) unless out has them."""
    config, exits = run.config, run.out / "exits"
    L = verifier.config.text_config.num_hidden_layers
    adapters = ExitAdapters(verifier.config.text_config.hidden_size, list(range(1, L)), config.exit_bottleneck)
    exits_cfg = ExitTrainingConfig(steps=config.exit_steps, batch_size=config.batch_size, lr=3e-3, seed=config.seed)
    if (exits / "exit_adapters.json").is_file():
        return ExitAdapters.load(exits)
    if run.init is not None and (run.init / "exits" / "exit_adapters.json").is_file():
        adapters = ExitAdapters.load(run.init / "exits")
    with run.cpu("exits"):
        train_exits(verifier, adapters, lambda k: run.batch(k).token_batch(), exits_cfg, run.work / "exits",
                    run.steps("exits", config.exit_steps))
    adapters.save(exits)
    return adapters


def train_sim_pair(out_dir: str | Path, config: SimPairConfig = SimPairConfig(),
                   progress: Callable[[str, int, int, float], None] = lambda phase, step, total, loss: None) -> dict:
    """Run (or resume) every phase; returns the training report (also written to ``out``)."""
    run = _Training.start(out_dir, config, progress)
    if not (run.out / "verifier" / "config.json").is_file():
        _train_verifier(run)
    if not (run.out / "drafter" / "config.json").is_file():
        _train_drafter(run)
    (run.out / PROMPT_FILE).write_text(json.dumps({"max_pixels": config.max_pixels}) + "\n")
    verifier = _score_held_out(run)["verifier"]
    adapters = _exit_adapters(run, verifier)
    exit_report = evaluate_exits(verifier, adapters, [run.batch(i, run.held_out).token_batch() for i in range(4)])
    write_report(exit_report, run.out / "exits")
    run.report["exits"] = asdict(exit_report)
    run.save_report()
    write_json(run.out / "training_report.json", run.report)
    return run.report
