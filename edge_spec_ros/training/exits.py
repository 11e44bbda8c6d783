"""Early-exit adapter training (FSD paper, Fig. 3, Table 2, Appendix D).

The base model is frozen. Exit l's adapter maps the hidden state h^(l) of decoder layer l to
z^(l) = LMHead(Norm(Adapter_l(h^(l)))); its loss is the KL divergence from the final exit's
distribution to softmax(z^(l)) (self-distillation: an exit is useful exactly when it predicts what
the final exit will say), and it reaches only Adapter_l: the hidden states are detached and each
adapter feeds only its own exit. Training is resumable: adapters, optimiser state and step are
checkpointed, and the batch of step k depends only on (seed, k), so a resumed run is the same run.

Departure: the paper trains on ShareGPT / SpaceLLaVA with the next-token loss; here the data are the
project's own sentences and the target is the final exit's distribution, which is what the
pre-draft cache needs the exits to agree with (Appendix D measures exactly that agreement).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase, Qwen2VLForConditionalGeneration

from edge_spec_ros.config_cli import doc
from edge_spec_ros.extras import require
from edge_spec_ros.models.adapters import ExitAdapters

STATE_FILE = "trainer_state.pt"


@dataclass(frozen=True)
class ExitTrainingConfig:
    steps: int = field(default=300, metadata=doc("training steps", 1, 10**9))
    batch_size: int = field(default=8, metadata=doc("sequences per step", 1, 1_000_000))
    seq_len: int = field(default=32, metadata=doc("tokens per sequence", 2, 1_000_000))
    lr: float = field(default=3e-3, metadata=doc("learning rate", 0.0, 10.0))
    seed: int = field(default=0, metadata=doc("data and initialisation seed"))
    checkpoint_every: int = field(default=50, metadata=doc("steps between checkpoints (a run resumes from the last)",
                                                           1, 10**9))


@dataclass(frozen=True)
class ExitReport:
    """Per exit (FSD Fig. 7): token match % with the final exit and average confidence S^(l)."""

    layers: list[int]
    match_pct: list[float]
    confidence: list[float]
    final_confidence: float


def token_batches(tokenizer: PreTrainedTokenizerBase, texts: list[str], config: ExitTrainingConfig
                  ) -> Callable[[int], torch.Tensor]:
    """batch(k) → (B, T) token ids, a deterministic function of (seed, k)."""
    stream = [t for text in texts for t in tokenizer(text + "\n")["input_ids"]]
    if len(stream) <= config.seq_len:
        raise ValueError("not enough text for one training sequence")

    def batch(step: int) -> torch.Tensor:
        rng = random.Random(config.seed * 1_000_003 + step)
        starts = [rng.randrange(len(stream) - config.seq_len) for _ in range(config.batch_size)]
        return torch.tensor([stream[s:s + config.seq_len] for s in starts])

    return batch


@dataclass(frozen=True)
class TokenBatch:
    """Model inputs (``input_ids`` (B, T) and, for image prompts, the vision inputs) and the (B, T)
    positions that count (None: all). A plain (B, T) id tensor is a text batch where all count."""

    inputs: dict[str, torch.Tensor]
    mask: torch.Tensor | None = None


def _as_batch(batch: torch.Tensor | TokenBatch) -> TokenBatch:
    return TokenBatch({"input_ids": batch}) if isinstance(batch, torch.Tensor) else batch


def _exit_outputs(model: Qwen2VLForConditionalGeneration, adapters: ExitAdapters, batch: TokenBatch):
    """(final logits (N, V), {layer: exit logits (N, V)}) over the N counted positions, base model
    without gradients."""
    with torch.no_grad():
        out = model(**batch.inputs, output_hidden_states=True)
    keep = (lambda t: t[batch.mask]) if batch.mask is not None else (lambda t: t.flatten(0, 1))
    text = model.model.language_model
    exits = {l: model.lm_head(text.norm(adapters[l](keep(out.hidden_states[l]).detach()))) for l in adapters.layers}
    return keep(out.logits).detach(), exits


def exit_losses(model, adapters: ExitAdapters, batch: torch.Tensor | TokenBatch) -> dict[int, torch.Tensor]:
    """KL(p_final ‖ p_exit) per exit layer, averaged over the counted positions."""
    final, exits = _exit_outputs(model, adapters, _as_batch(batch))
    target = torch.log_softmax(final.float(), -1)
    return {l: torch.nn.functional.kl_div(torch.log_softmax(z.float(), -1), target, log_target=True,
                                           reduction="batchmean")
            for l, z in exits.items()}


@torch.no_grad()
def evaluate(model, adapters: ExitAdapters, batches: list[torch.Tensor | TokenBatch]) -> ExitReport:
    match = {l: 0.0 for l in adapters.layers}
    conf = {l: 0.0 for l in adapters.layers}
    final_conf = n = 0.0
    for batch in batches:
        final, exits = _exit_outputs(model, adapters, _as_batch(batch))
        best = final.argmax(-1)
        final_conf += torch.softmax(final.float(), -1).amax(-1).sum().item()
        for l, z in exits.items():
            match[l] += (z.argmax(-1) == best).sum().item()
            conf[l] += torch.softmax(z.float(), -1).amax(-1).sum().item()
        n += best.numel()
    return ExitReport(adapters.layers, [100 * match[l] / n for l in adapters.layers],
                      [conf[l] / n for l in adapters.layers], final_conf / n)


def train_exits(model: Qwen2VLForConditionalGeneration, adapters: ExitAdapters,
                batch: Callable[[int], torch.Tensor | TokenBatch],
                config: ExitTrainingConfig, out_dir: str | Path,
                progress: Callable[[int, float], None] = lambda step, loss: None) -> int:
    """Train (or resume training) until ``config.steps``; returns the step reached. Checkpoints to
    ``out_dir`` every ``checkpoint_every`` steps and at the end."""
    out = Path(out_dir)
    model.requires_grad_(False).eval()
    adapters.requires_grad_(True).train()
    optimiser = torch.optim.AdamW(adapters.parameters(), lr=config.lr, weight_decay=0.0)
    step = 0
    if (out / STATE_FILE).is_file():
        state = torch.load(out / STATE_FILE, weights_only=True)
        if state["config"] != asdict(config) | {"steps": state["config"]["steps"]}:
            raise ValueError(f"{out} holds a run with another configuration: {state['config']}")
        adapters.load_state_dict(ExitAdapters.load(out).state_dict())
        optimiser.load_state_dict(state["optimiser"])
        step = state["step"]
    while step < config.steps:
        losses = exit_losses(model, adapters, batch(step))
        total = torch.stack(list(losses.values())).sum()  # disjoint adapters: each gets its own gradient
        optimiser.zero_grad(set_to_none=True)
        total.backward()
        optimiser.step()
        step += 1
        progress(step, float(total.detach()))
        if step % config.checkpoint_every == 0 or step == config.steps:
            adapters.save(out)
            torch.save({"step": step, "optimiser": optimiser.state_dict(), "config": asdict(config)}, out / STATE_FILE)
    adapters.eval().requires_grad_(False)
    return step


def write_report(report: ExitReport, out_dir: str | Path) -> tuple[Path, Path]:
    """The Fig. 7-style table (JSON) and plot (PNG)."""
    matplotlib = require("matplotlib", "all", "the exit report's plot (training/exits.py)")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    json_path = out / "exit_report.json"
    json_path.write_text(json.dumps(asdict(report), indent=2))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(report.layers, report.match_pct, color="#37c", label="token match with final exit (%)")
    ax.set_xlabel("exit layer")
    ax.set_ylabel("token match (%)")
    ax2 = ax.twinx()
    ax2.plot(report.layers, report.confidence, "o-", color="#c53", label="average confidence S")
    ax2.set_ylabel("average confidence")
    ax2.set_ylim(0, 1)
    ax.set_title("early exits (cf. FSD Fig. 7)")
    fig.tight_layout()
    png_path = out / "exit_report.png"
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return json_path, png_path
