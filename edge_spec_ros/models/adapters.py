"""Early-exit adapters (FSD paper, Fig. 3, Table 2).

An adapter after decoder layer l maps h^(l) to h̃^(l) = h^(l) + W_up σ(W_down h^(l)), which then
goes through the model's own final norm and LM head: z^(l) = LMHead(Norm(h̃^(l))). W_up starts at
zero, so an untrained exit is exactly the logit lens LMHead(Norm(h^(l))). Only adapter weights are
trainable; each exit's loss reaches only its own adapter.

Sizing: with a bottleneck of d/8, Qwen2-VL-7B (d = 3584, 27 exits) gets 27·2·3584·448 ≈ 87M adapter
parameters, the paper's 88M (Table 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

ADAPTER_WEIGHTS = "exit_adapters.safetensors"
ADAPTER_CONFIG = "exit_adapters.json"


class ExitAdapter(nn.Module):
    """Residual bottleneck adapter, identity at initialisation."""

    def __init__(self, hidden_size: int, bottleneck: int) -> None:
        super().__init__()
        self.down = nn.Linear(hidden_size, bottleneck, bias=False)
        self.up = nn.Linear(bottleneck, hidden_size, bias=False)
        nn.init.normal_(self.down.weight, std=hidden_size**-0.5)
        nn.init.zeros_(self.up.weight)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (..., d) → (..., d)
        return h + self.up(nn.functional.silu(self.down(h)))


class ExitAdapters(nn.Module):
    """One adapter per early-exit layer; ``layers`` are 1-based decoder layer indices < L."""

    def __init__(self, hidden_size: int, layers: list[int], bottleneck: int | None = None) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.bottleneck = bottleneck or max(1, hidden_size // 8)
        self.layers = sorted(layers)
        self.adapters = nn.ModuleDict({str(l): ExitAdapter(hidden_size, self.bottleneck) for l in self.layers})

    def __getitem__(self, layer: int) -> ExitAdapter:
        return self.adapters[str(layer)]

    def save(self, directory: str | Path) -> None:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(out / ADAPTER_WEIGHTS))
        meta = {"hidden_size": self.hidden_size, "layers": self.layers, "bottleneck": self.bottleneck}
        (out / ADAPTER_CONFIG).write_text(json.dumps(meta, indent=2))

    @classmethod
    def load(cls, directory: str | Path) -> "ExitAdapters":
        src = Path(directory)
        meta = json.loads((src / ADAPTER_CONFIG).read_text())
        adapters = cls(meta["hidden_size"], meta["layers"], meta["bottleneck"])
        adapters.load_state_dict(load_file(str(src / ADAPTER_WEIGHTS)))
        return adapters
