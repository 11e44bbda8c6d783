"""A drafter distilled from its verifier: the verifier's first K layers, fine-tuned, with a pruned LM head.

The self-drafter (``models/drafter.self_draft_model``) trains only a small exit adapter on a frozen
base, and its LM head over the whole vocabulary (49,152 × 576 for SmolLM2) is most of its cost:
with K = 6 of 30 layers it costs about 37 % of a verifier token. This drafter:

- starts from the verifier's embeddings and first K decoder layers and fine-tunes the layers and the
  final norm on the verifier's own greedy answers (``training/drafter_distill.py``), so the whole
  draft path learns to say what the verifier says, not one adapter;
- heads them with a *pruned* LM head (as FR-Spec, Zhao et al. 2025): the rows of N token ids only
  (the vocabulary's first N ids, which byte-level BPE orders roughly by frequency, plus every id the
  verifier wrote in the training answers). It returns logits over the whole vocabulary with −∞ outside
  those ids, so a greedy draft is the argmax over them and a sampled draft's q is zero outside them:
  every consumer of a ``Drafter`` works unchanged, and the verdict stays the verifier's.

Per token it costs K layers + N·d multiply-accumulates (K = 6, N = 8,192: about 19 % of the verifier's).

Legend: K — kept decoder layers; N — head rows; d — hidden size; V — vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import Qwen2VLForConditionalGeneration

from edge_spec_ros.models.drafter import Drafter

CONFIG_FILE = "distilled_drafter.json"
WEIGHTS_FILE = "distilled_drafter.pt"
DEFAULT_LAYERS = 6
DEFAULT_HEAD_ROWS = 8192


class PrunedHead(nn.Module):
    """LM head over ``ids`` only: h (…, d) → logits (…, V), −∞ outside ``ids``."""

    def __init__(self, weight: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> None:
        super().__init__()
        if weight.shape[0] != ids.numel():
            raise ValueError(f"{weight.shape[0]} head rows for {ids.numel()} ids")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
            raise ValueError(f"head ids must lie in [0, {vocab_size})")
        self.weight = nn.Parameter(weight.detach().clone())
        self.register_buffer("ids", ids.to(torch.long).clone())
        self.vocab_size = vocab_size

    @property
    def rows(self) -> int:
        return self.ids.numel()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        z = h @ self.weight.T  # (…, N)
        full = torch.full((*h.shape[:-1], self.vocab_size), float("-inf"), dtype=z.dtype, device=z.device)
        return full.index_copy(full.dim() - 1, self.ids, z)


@dataclass(frozen=True)
class DistilledConfig:
    """What a distilled drafter is: the verifier it came from, K, its head ids' count, the steps trained."""

    verifier: str
    layers: int
    head_rows: int
    steps: int = 0


def head_ids(vocab_size: int, rows: int, seen: list[int] | tuple[int, ...] = (), always: tuple[int, ...] = ()
             ) -> torch.Tensor:
    """The pruned head's ids, sorted: every id in ``seen`` and ``always``, then the lowest ids up to ``rows``."""
    chosen = {int(t) for t in (*seen, *always) if 0 <= int(t) < vocab_size}
    if len(chosen) > rows:
        raise ValueError(f"the answers use {len(chosen)} distinct ids but the head has {rows} rows "
                         f"(distill-drafter --head-rows)")
    i = 0
    while len(chosen) < min(rows, vocab_size):
        chosen.add(i)
        i += 1
    return torch.tensor(sorted(chosen), dtype=torch.long)


def build_student(verifier_model: Qwen2VLForConditionalGeneration, layers: int, ids: torch.Tensor
                  ) -> Qwen2VLForConditionalGeneration:
    """The verifier's first ``layers`` layers, embeddings and final norm with a pruned head initialised
    from the verifier's LM head rows ``ids`` (untied from the input embeddings)."""
    from edge_spec_ros.models.tiny import truncated_copy

    total = verifier_model.config.text_config.num_hidden_layers
    if not 1 <= layers < total:
        raise ValueError(f"a distilled drafter keeps 1..{total - 1} of the {total} layers, got {layers}")
    student = truncated_copy(verifier_model, layers)
    vocab = student.config.text_config.vocab_size
    weight = verifier_model.lm_head.weight.detach()[ids]
    student.config.tie_word_embeddings = False
    student.config.text_config.tie_word_embeddings = False
    student.lm_head = PrunedHead(weight, ids, vocab)
    return student


def trainable_parameters(student: Qwen2VLForConditionalGeneration) -> list[nn.Parameter]:
    """What distillation trains: the decoder layers, the final norm and the head rows (not the input
    embeddings, which stay the verifier's)."""
    text = student.model.language_model
    return [*text.layers.parameters(), *text.norm.parameters(), student.lm_head.weight]


def trained_state(student: Qwen2VLForConditionalGeneration) -> dict[str, torch.Tensor]:
    text = student.model.language_model
    return {**{f"layers.{k}": v for k, v in text.layers.state_dict().items()},
            **{f"norm.{k}": v for k, v in text.norm.state_dict().items()},
            "head.weight": student.lm_head.weight.detach(), "head.ids": student.lm_head.ids}


def save_student(student: Qwen2VLForConditionalGeneration, config: DistilledConfig, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (WEIGHTS_FILE + ".tmp")
    torch.save(trained_state(student), tmp)
    tmp.replace(out / WEIGHTS_FILE)
    (out / CONFIG_FILE).write_text(json.dumps(asdict(config), indent=2))
    return out


def load_student(verifier_model: Qwen2VLForConditionalGeneration, out_dir: str | Path
                 ) -> tuple[Qwen2VLForConditionalGeneration, DistilledConfig]:
    out = Path(out_dir)
    config = DistilledConfig(**json.loads((out / CONFIG_FILE).read_text()))
    state = torch.load(out / WEIGHTS_FILE, weights_only=True)
    student = build_student(verifier_model, config.layers, state["head.ids"])
    text = student.model.language_model
    text.layers.load_state_dict({k[len("layers."):]: v for k, v in state.items() if k.startswith("layers.")})
    text.norm.load_state_dict({k[len("norm."):]: v for k, v in state.items() if k.startswith("norm.")})
    with torch.no_grad():
        student.lm_head.weight.copy_(state["head.weight"])
    return student.eval().requires_grad_(False), config


class DistilledDrafter(Drafter):
    """A ``Drafter`` over a distilled student; ``token_macs`` its per-token Linear multiply-accumulates."""

    def __init__(self, student: Qwen2VLForConditionalGeneration, config: DistilledConfig) -> None:
        super().__init__(student)
        self.config = config

    def token_macs(self) -> int:
        text = self.stack.model.model.language_model
        layers = sum(m.in_features * m.out_features for m in text.layers.modules() if isinstance(m, nn.Linear))
        return layers + self.stack.model.lm_head.rows * text.config.hidden_size


def load_distilled(out_dir: str | Path, verifier: str | None = None) -> DistilledDrafter:
    """The distilled drafter in ``out_dir`` on top of its verifier's checkpoint (``verifier``: a model
    source; default the one it was distilled from)."""
    from edge_spec_ros.models.loading import load_qwen2vl
    from edge_spec_ros.models.pairs import resolve

    config = DistilledConfig(**json.loads((Path(out_dir) / CONFIG_FILE).read_text()))
    base = load_qwen2vl(resolve(verifier or config.verifier).location, "float32", "cpu")
    student, config = load_student(base, out_dir)
    return DistilledDrafter(student, config)
