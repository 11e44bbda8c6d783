"""Training batches from the simulated room's samples (``sim/samples.py``): the prompt exactly as the
robot encodes it, the expert's reply, labels on the reply only."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.sim.samples import SimSample
from edge_spec_ros.training.exits import TokenBatch

IGNORE = -100  # label of positions that carry no loss (prompt, padding)


@dataclass(frozen=True)
class LMBatch:
    """inputs: model kwargs (input_ids, attention_mask (B, T), pixel_values, image_grid_thw,
    mm_token_type_ids); labels: (B, T) the next token at each position, IGNORE where no loss."""

    inputs: dict[str, torch.Tensor]
    labels: torch.Tensor

    @property
    def mask(self) -> torch.Tensor:
        return self.labels != IGNORE

    def token_batch(self) -> TokenBatch:
        return TokenBatch(self.inputs, self.mask)


def collate(samples: list[SimSample], encoder: PromptEncoder, tokenizer: PreTrainedTokenizerBase) -> LMBatch:
    """Encode each prompt exactly as the robot does (chat template + image) and append the reply and
    the end-of-turn token; right padding; labels on the positions that predict the reply."""
    rows = []
    for s in samples:
        prompt = encoder.encode(s.instruction, s.image)
        reply = tokenizer(s.text)["input_ids"] + [tokenizer.eos_token_id]
        rows.append((prompt, torch.tensor(reply)))
    B, T = len(rows), max(len(p) + len(r) for p, r in rows)
    ids = torch.full((B, T), tokenizer.pad_token_id)
    labels = torch.full((B, T), IGNORE)
    attention = torch.zeros(B, T, dtype=torch.long)
    mm = torch.zeros(B, T, dtype=torch.int32)
    for i, (prompt, reply) in enumerate(rows):
        n, m = len(prompt), len(reply)
        ids[i, :n], ids[i, n:n + m] = prompt.input_ids, reply
        labels[i, n - 1:n + m - 1] = reply  # position j predicts token j + 1
        attention[i, :n + m] = 1
        mm[i, :n] = prompt.mm_token_type_ids
    inputs = dict(input_ids=ids, attention_mask=attention, mm_token_type_ids=mm,
                  pixel_values=torch.cat([p.pixel_values for p, _ in rows]),
                  image_grid_thw=torch.cat([p.image_grid_thw for p, _ in rows]))
    return LMBatch(inputs, labels)
