"""Quantization schemes of the drafter's Linear layers (torchao, the library PyTorch points to for it).

A scheme is named by the drafter node's ``quantize`` parameter and ``DrafterConfig.quantize``:

- ``none``: the model as loaded;
- ``int8-dynamic``: int8 weights, activations quantized to int8 per token at run time
  (torchao ``Int8DynamicActivationInt8WeightConfig``; CPU and CUDA);
- ``int8-weight``: int8 weights, float activations (``Int8WeightOnlyConfig``; CPU and CUDA);
- ``int4-weight``: int4 weights in groups of ``INT4_GROUP`` input features, bfloat16 activations, the
  tinygemm kernel (``Int4WeightOnlyConfig``, tile-packed; CUDA of compute capability >= 8.0, as a
  Jetson Orin's; the model in bfloat16). torchao 0.18 has no CPU int4 layout: the CPU refuses it.

Which one a robot should use: docs/quantization.md (measured by ``edge-spec-ros bench quant-survey``).
Quantization changes the drafter's q, never the verdict's exactness: the verifier decides every token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the table is read without torch (the command line's options)
    import torch
    from torch import nn

INT4_GROUP = 64  # divides every Linear input width of SmolLM2 (576) and Qwen2-VL-2B/7B (1536, 8960, 3584, 18944)


@dataclass(frozen=True)
class Scheme:
    """name: the parameter's value; devices: the device types it runs on; config: the torchao config
    (built on use: torchao is imported only when a scheme needs it), None for no change."""

    name: str
    devices: tuple[str, ...]
    help: str
    config: Callable[[], object] | None = None
    dtype: str | None = None  # the weights' torch dtype the scheme needs, None: any


def _int8_dynamic() -> object:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig

    return Int8DynamicActivationInt8WeightConfig()


def _int8_weight() -> object:
    from torchao.quantization import Int8WeightOnlyConfig

    return Int8WeightOnlyConfig()


def _int4_weight() -> object:
    from torchao.quantization import Int4WeightOnlyConfig

    return Int4WeightOnlyConfig(group_size=INT4_GROUP, int4_packing_format="tile_packed_to_4d")


SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("none", ("cpu", "cuda"), "no quantization"),
    Scheme("int8-dynamic", ("cpu", "cuda"), "int8 weights and per-token int8 activations (torchao)", _int8_dynamic),
    Scheme("int8-weight", ("cpu", "cuda"), "int8 weights, float activations (torchao)", _int8_weight),
    Scheme("int4-weight", ("cuda",), f"int4 weights in groups of {INT4_GROUP}, bfloat16 activations (torchao, "
                                     "CUDA)", _int4_weight, "bfloat16"),
)}


def scheme(name: str) -> Scheme:
    """The scheme named ``name``; ValueError naming the valid ones otherwise."""
    if name not in SCHEMES:
        raise ValueError(f"unknown quantization scheme {name!r}: choose from {', '.join(SCHEMES)}")
    return SCHEMES[name]


def check_scheme(name: str, device: str | torch.device = "cpu") -> Scheme:
    """``scheme(name)``, refused (ValueError) on a device type it does not run on."""
    import torch

    found = scheme(name)
    kind = torch.device(device).type
    if kind not in found.devices:
        raise ValueError(f"quantization scheme {name!r} runs on {' and '.join(found.devices)} only, not on "
                         f"{kind} (torchao has no {kind} kernel for it); on {kind} choose from "
                         f"{', '.join(n for n, s in SCHEMES.items() if kind in s.devices)}")
    return found


def quantize(model: nn.Module, name: str, device: str | torch.device = "cpu") -> nn.Module:
    """``model`` (on ``device``) with every nn.Linear quantized by the scheme ``name``, in place;
    ``model`` itself is returned. Weights tied to a Linear's (an LM head tied to the embeddings) are
    untied: the embedding keeps its float weight."""
    found = check_scheme(name, device)
    if found.config is None:
        return model
    if found.dtype is not None:
        from torch import nn

        wrong = {str(m.weight.dtype).removeprefix("torch.") for m in model.modules() if isinstance(m, nn.Linear)}
        wrong -= {found.dtype}
        if wrong:
            raise ValueError(f"quantization scheme {name!r} needs {found.dtype} weights, the model has "
                             f"{sorted(map(str, wrong))}: load it with that dtype")
    from torchao.quantization import quantize_

    quantize_(model, found.config())
    return model
