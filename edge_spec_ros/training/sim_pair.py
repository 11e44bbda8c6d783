"""``edge-spec-ros train-sim-pair``: verifier, distilled drafter and exit adapters for the simulated room.

Output (``out``): ``verifier/`` and ``drafter/`` (config.json, float16 model.safetensors, tokenizer),
``exits/`` (exit adapters + the Fig. 7-style report), ``training_report.json`` (losses and held-out
accuracy). Checkpoints live in ``out/.train`` and make the command resumable; a phase whose output
exists is skipped. Same seed, same machine type → same weights.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from edge_spec_ros.models.adapters import ExitAdapters
from edge_spec_ros.models.loading import load_qwen2vl
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.tiny import build_tiny_qwen2vl
from edge_spec_ros.models.tokenizer import load_tokenizer
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.nav import NavConfig, parse_action
from edge_spec_ros.sim.closed_loop import ModelPolicy
from edge_spec_ros.sim.samples import SimDataConfig, sim_sample
from edge_spec_ros.training.exits import (
    ExitTrainingConfig,
    evaluate,
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


@dataclass(frozen=True)
class SimPairConfig:
    seed: int = 0
    verifier_steps: int = 2500
    drafter_steps: int = 1000
    exit_steps: int = 300
    batch_size: int = 32
    lr: float = 2e-3
    exit_bottleneck: int = 32
    eval_samples: int = 200


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


def train_sim_pair(out_dir: str | Path, config: SimPairConfig = SimPairConfig(),
                   progress: Callable[[str, int, int, float], None] = lambda phase, step, total, loss: None) -> dict:
    """Run (or resume) every phase; returns the training report (also written to ``out``)."""
    out, work = Path(out_dir), Path(out_dir) / ".train"
    torch.manual_seed(config.seed)  # the exit adapters' initialisation
    tokenizer = load_tokenizer()
    encoder = PromptEncoder(tokenizer)
    data = SimDataConfig(seed=config.seed)
    held_out = SimDataConfig(seed=config.seed + HELD_OUT_SEED_OFFSET)

    def batch(step: int, source: SimDataConfig = data):
        return collate([sim_sample(source, step * config.batch_size + i) for i in range(config.batch_size)],
                       encoder, tokenizer)

    report: dict = {"config": asdict(config)}
    models = {}
    for name, spec, steps, teacher in (("verifier", SIM_VERIFIER_SPEC, config.verifier_steps, None),
                                       ("drafter", SIM_DRAFTER_SPEC, config.drafter_steps, "verifier")):
        done = out / name / "config.json"
        if not done.is_file():
            model = build_tiny_qwen2vl(spec, tokenizer, seed=config.seed + (name == "drafter"))
            lm = LMTrainingConfig(steps=steps, batch_size=config.batch_size, lr=config.lr)
            losses = train_lm(model, batch, lm, work / name, models.get(teacher),
                              lambda s, loss, n=name, t=steps: progress(n, s, t, loss))
            save_model(model, out / name, tokenizer)
            write_json(work / name / "losses.json", {"losses": losses})
        models[name] = load_qwen2vl(str(out / name))  # evaluate (and teach) what ships: the float16 weights
        score = held_out_score(models[name], encoder, held_out, config.eval_samples)
        report[name] = {"parameters": sum(p.numel() for p in models[name].parameters()), **asdict(score)}
        log.info("%s: held-out text match %.1f%%, action match %.1f%%", name, score.text_match_pct,
                 score.action_match_pct)

    verifier = models["verifier"]
    L = verifier.config.text_config.num_hidden_layers
    adapters = ExitAdapters(verifier.config.text_config.hidden_size, list(range(1, L)), config.exit_bottleneck)
    exits_cfg = ExitTrainingConfig(steps=config.exit_steps, batch_size=config.batch_size, lr=3e-3, seed=config.seed)
    if (out / "exits" / "exit_adapters.json").is_file():
        adapters = ExitAdapters.load(out / "exits")
    else:
        train_exits(verifier, adapters, lambda k: batch(k).token_batch(), exits_cfg, work / "exits",
                    lambda s, loss: progress("exits", s, config.exit_steps, loss))
        adapters.save(out / "exits")
    exit_report = evaluate(verifier, adapters, [batch(i, held_out).token_batch() for i in range(4)])
    write_report(exit_report, out / "exits")
    report["exits"] = asdict(exit_report)
    write_json(out / "training_report.json", report)
    return report
