"""Training the small Qwen2-VL navigation pair on the simulated room (one seeded command).

1. Verifier M_q (``SIM_VERIFIER_SPEC``): next-token cross-entropy on the expert's replies.
2. Drafter M_p (``SIM_DRAFTER_SPEC``, narrower and shallower, its own vision tower): distilled from
   the trained verifier, loss KL(p ‖ q) on the reply positions. Distillation is what speculative
   decoding asks of a drafter: the acceptance rate is α = 1 − TV(p, q) per token (Leviathan et al.).
3. Early-exit adapters on the frozen verifier (``training/exits.py``), on the same image prompts.

Every phase is resumable (model, optimiser and step checkpointed under ``out/.train``) and a
finished phase is skipped, so an interrupted command continues where it stopped. Weights are saved
as float16 safetensors (a few MB) and load as float32.

Departure from the papers: Qwen2-VL-2B/-7B are pretrained on web-scale data; this pair learns only
the simulated room. Its job is to make acceptance rates, exit agreement and the closed loop mean
something on this machine, not to be a general model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase, Qwen2VLForConditionalGeneration

from edge_spec_ros.models.tiny import TinyModelSpec
from edge_spec_ros.training.sim_data import LMBatch

STATE_FILE = "trainer_state.pt"

# M_q is twice as wide and deep as M_p, as Qwen2-VL-7B's 3584-wide decoder is to -2B's 1536.
SIM_VERIFIER_SPEC = TinyModelSpec(hidden_size=128, num_layers=6, num_heads=4, num_kv_heads=2, intermediate_size=256,
                                  vision_depth=2, vision_embed_dim=64, vision_heads=4, init_std=0.02)
SIM_DRAFTER_SPEC = TinyModelSpec(hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=128,
                                 vision_depth=1, vision_embed_dim=32, vision_heads=2, init_std=0.02)


@dataclass(frozen=True)
class LMTrainingConfig:
    steps: int = 1500
    batch_size: int = 32
    lr: float = 2e-3
    warmup: int = 50
    weight_decay: float = 0.01
    checkpoint_every: int = 100


def lr_at(step: int, config: LMTrainingConfig) -> float:
    """Linear warm-up, then cosine decay to a tenth."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    t = (step - config.warmup) / max(1, config.steps - config.warmup)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def lm_loss(model: Qwen2VLForConditionalGeneration, batch: LMBatch,
            teacher: Qwen2VLForConditionalGeneration | None = None) -> torch.Tensor:
    """Cross-entropy on the reply tokens, or with a teacher KL(p_teacher ‖ q_model) on the same positions."""
    mask = batch.mask  # (B, T)
    logits = model(**batch.inputs).logits[mask].float()  # (N, V)
    if teacher is None:
        return torch.nn.functional.cross_entropy(logits, batch.labels[mask])
    with torch.no_grad():
        target = torch.log_softmax(teacher(**batch.inputs).logits[mask].float(), -1)
    return torch.nn.functional.kl_div(torch.log_softmax(logits, -1), target, log_target=True, reduction="batchmean")


def train_lm(model: Qwen2VLForConditionalGeneration, batch: Callable[[int], LMBatch], config: LMTrainingConfig,
             work_dir: str | Path, teacher: Qwen2VLForConditionalGeneration | None = None,
             progress: Callable[[int, float], None] = lambda step, loss: None) -> list[float]:
    """Train (or resume) until ``config.steps``; returns the loss of every step of this run."""
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    if teacher is not None:
        teacher.eval().requires_grad_(False)
    model.train().requires_grad_(True)
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    step, losses = 0, []
    if (work / STATE_FILE).is_file():
        state = torch.load(work / STATE_FILE, weights_only=True)
        if state["config"] != asdict(config):
            raise ValueError(f"{work} holds a run with another configuration: {state['config']}")
        model.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        step, losses = state["step"], state["losses"]
    while step < config.steps:
        for group in optimiser.param_groups:
            group["lr"] = lr_at(step, config)
        loss = lm_loss(model, batch(step), teacher)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        step += 1
        losses.append(float(loss.detach()))
        progress(step, losses[-1])
        if step % config.checkpoint_every == 0 or step == config.steps:
            torch.save({"step": step, "model": model.state_dict(), "optimiser": optimiser.state_dict(),
                        "config": asdict(config), "losses": losses}, work / STATE_FILE)
    model.eval().requires_grad_(False)
    return losses


def save_model(model: Qwen2VLForConditionalGeneration, directory: str | Path,
               tokenizer: PreTrainedTokenizerBase | None = None) -> Path:
    """config.json + float16 model.safetensors (+ the tokenizer, so the directory loads on its own)."""
    out = Path(directory)
    half = Qwen2VLForConditionalGeneration(model.config).to(torch.float16)
    half.load_state_dict({k: v.to(torch.float16) for k, v in model.state_dict().items()})
    half.save_pretrained(out)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    (out / "generation_config.json").unlink(missing_ok=True)
    return out


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
