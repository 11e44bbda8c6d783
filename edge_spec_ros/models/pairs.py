"""One loader for every model pair: ``load_pair(source, ...)``.

A source is one string, the same for every command, node and process:

- ``embedded``: the pair shipped in the package (``assets/sim_pair``, made by ``train-sim-pair``);
- ``smollm2``: SmolLM2-135M-Instruct converted into a Qwen2-VL checkpoint (``models/smollm2.py``;
  cached, converted on first use);
- a directory: a ``train-sim-pair`` output (``verifier/``, ``drafter/``, ``exits/``, ``prompt.json``)
  or one Qwen2-VL checkpoint (``config.json`` + safetensors + tokenizer, as ``save_pretrained``
  writes it);
- ``qwen2-vl-2b-shape``, ``qwen2-vl-7b-shape``: Qwen2-VL-2B / -7B at their published shapes with
  fixed-seed random weights, built here (``models/real_shapes.py``); ``:layers=N`` keeps N decoder
  layers, ``vision_layers=M`` M vision blocks (default 1), e.g. ``qwen2-vl-7b-shape:layers=2``;
- anything else: a hub id such as ``Qwen/Qwen2-VL-7B-Instruct``, loaded by ``from_pretrained`` from
  the local Hugging Face cache, or from the hub where the network and ``HF_HUB_OFFLINE`` allow it
  (never in the tests).

What a source gives (``parts`` picks what is loaded: the robot needs only the drafter, the
verifier service only the verifier):

| part | train-sim-pair directory (``embedded`` too) | checkpoint (``smollm2``, a directory, a hub id) | shape |
|---|---|---|---|
| verifier | ``verifier/`` with the trained ``exits/`` | the checkpoint, logit-lens exits | the model, d/8 exits |
| drafter | ``drafter/`` | the checkpoint itself | the model itself |
| tokenizer | the project's (``models/tokenizer.py``) | the checkpoint's | ``shape_tokenizer()`` |
| image pixel budget | the one it was trained at (``prompt.json``) | ``PromptConfig``'s 112 x 112 | the same |
| weights | float32 on the CPU, as trained and tested | ``dtype`` on ``device`` | random, ``dtype`` on ``device`` |

``adapters`` replaces the verifier's exits; ``draft_layers`` K makes the drafter the verifier's
first K layers headed by the exit-K adapter of ``adapters`` (self-speculative drafting);
``drafter`` takes the drafter from another source (it must share the tokenizer).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from torch import nn
from transformers import PreTrainedTokenizerBase

from edge_spec_ros.models.drafter import Drafter, DrafterConfig
from edge_spec_ros.models.prompt import PromptConfig, PromptEncoder
from edge_spec_ros.models.quantize import check_scheme
from edge_spec_ros.models.verifier import EarlyExitVerifier, VerifierConfig

EMBEDDED = "embedded"
SMOLLM2 = "smollm2"
SHAPE = "shape"  # the kind of a published-shape source (models/real_shapes.py)
SIM_PAIR_DIR = Path(__file__).resolve().parent.parent / "assets" / "sim_pair"
PROMPT_FILE = "prompt.json"  # in a train-sim-pair directory: the image pixel budget it was trained at
PAIR_FILES = ("verifier/config.json", "drafter/config.json", "exits/exit_adapters.json")
PARTS = ("drafter", "verifier")
# what a hub id looks like ("org/name" or a bare name); anything else that is no directory is an error
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class ModelSourceError(FileNotFoundError):
    """A source that names nothing loadable here; the message says which source and what to do."""


@dataclass(frozen=True)
class Source:
    """What a source string names. kind: ``pair`` (a train-sim-pair directory), ``checkpoint`` (one
    Qwen2-VL model) or ``shape`` (a published shape built here); location: the directory, the hub id, or
    the shape's canonical source string."""

    name: str
    kind: str
    location: str

    @property
    def hub_id(self) -> bool:
        return self.kind == "checkpoint" and not Path(self.location).is_dir()


@dataclass
class ModelPair:
    """The parts ``load_pair`` was asked for (a part not asked for is None). source: the source as
    given; location: where it was loaded from (a directory or a hub id; another process given it
    loads the same models)."""

    drafter: Drafter | None
    verifier: EarlyExitVerifier | None
    tokenizer: PreTrainedTokenizerBase
    max_pixels: int = PromptConfig.max_pixels  # the image pixel budget the pair was trained at
    source: str = ""
    location: str = ""

    def prompt_encoder(self) -> PromptEncoder:
        """The prompt encoder at the pair's own image budget (a prompt encoded at another budget has
        another number of image tokens than the verifier expects for the same image)."""
        return PromptEncoder(self.tokenizer, PromptConfig(max_pixels=self.max_pixels))

    def parameters(self) -> dict[str, int]:
        """Parameters per part: a loaded part counted (a quantized drafter's weights at their float
        shapes), a verifier not loaded here (the robot's side) counted from its source's config
        without loading weights; a part it cannot know is left out."""
        out = {name: count_parameters(part.stack.model)
               for name, part in (("verifier", self.verifier), ("drafter", self.drafter)) if part is not None}
        if self.verifier is None and self.location:
            try:
                src = resolve(self.location)
                count = shape_parameters(src.location) if src.kind == SHAPE else \
                    config_parameters(_model_dir(src, "verifier"))
                out = {"verifier": count, **out}
            except (OSError, ValueError):
                pass
        return out


def count_parameters(model: nn.Module) -> int:
    """Parameters of ``model``, a quantized weight (torchao's tensor subclasses, models/quantize.py)
    counted at its logical shape, as the float weight it stands for: its packed storage differs."""
    return sum(p.numel() for p in model.parameters())


def config_parameters(checkpoint: str) -> int:
    """Parameters of a Qwen2-VL checkpoint from its config alone (built on the meta device, no weights)."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    config = Qwen2VLConfig.from_pretrained(checkpoint)
    with torch.device("meta"):
        return count_parameters(Qwen2VLForConditionalGeneration(config))


def shape_parameters(source: str) -> int:
    """Parameters of a shape source's model, its exit adapters left out (built on the meta device)."""
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    from edge_spec_ros.models.real_shapes import parse_shape, shape_config

    with torch.device("meta"):
        return count_parameters(Qwen2VLForConditionalGeneration(shape_config(parse_shape(source))))


def resolve(source: str | Path, log: Callable[[str], None] = lambda s: None) -> Source:
    """What ``source`` names (see the module docstring); raises ModelSourceError for a directory
    that holds neither layout, or a string that is neither a directory nor a hub id. Whether a hub id
    is available is known only when it loads (``load_pair``)."""
    name = str(source)
    if name == EMBEDDED:
        return _pair(name, SIM_PAIR_DIR)
    if name == SMOLLM2:
        from edge_spec_ros.models.smollm2 import MissingSmolLM2, default_cache_dir, smollm2_dir

        if not (default_cache_dir() / "config.json").is_file():
            log(f"converting SmolLM2-135M-Instruct into {default_cache_dir()} (once, ~30 s) ...")
        try:
            return Source(name, "checkpoint", str(smollm2_dir()))
        except MissingSmolLM2 as exc:
            raise ModelSourceError(f"model source 'smollm2': {exc}") from None
    from edge_spec_ros.models.real_shapes import ShapeSourceError, is_shape_source, parse_shape

    if is_shape_source(name):
        try:
            return Source(name, SHAPE, parse_shape(name).source)
        except ShapeSourceError as exc:
            raise ModelSourceError(str(exc)) from None
    path = Path(name).expanduser()
    if path.is_dir():
        if any((path / part.split("/")[0]).is_dir() for part in PAIR_FILES):
            return _pair(name, path)
        if (path / "config.json").is_file():
            return Source(name, "checkpoint", str(path))
        raise ModelSourceError(f"model source {name!r}: the directory holds neither a train-sim-pair output "
                               f"({', '.join(PAIR_FILES)}; train one with `edge-spec-ros train-sim-pair --out {name}`) "
                               "nor a Qwen2-VL checkpoint (config.json + safetensors + tokenizer)")
    if path.exists() or not HUB_ID.match(name):
        raise ModelSourceError(f"model source {name!r}: no such directory, and not a hub id (org/name); "
                               f"use '{EMBEDDED}', '{SMOLLM2}', 'qwen2-vl-2b-shape', 'qwen2-vl-7b-shape', "
                               "a directory or a hub id")
    return Source(name, "checkpoint", name)


def _pair(name: str, root: Path) -> Source:
    missing = [p for p in PAIR_FILES if not (root / p).is_file()]
    if missing:
        raise ModelSourceError(f"model source {name!r}: {root} lacks {missing}; train the pair with "
                               f"`edge-spec-ros train-sim-pair --out {root}` (about 35 minutes on 2 CPU cores)")
    return Source(name, "pair", str(root))


def pair_max_pixels(source: Source) -> int:
    """The image pixel budget the robot and the verifier encode images with: a train-sim-pair
    directory's own (``prompt.json``), PromptConfig's for a checkpoint."""
    path = Path(source.location) / PROMPT_FILE
    if source.kind == "pair" and path.is_file():
        return int(json.loads(path.read_text())["max_pixels"])
    return PromptConfig.max_pixels


def load_pair(source: str | Path = EMBEDDED, *, parts: Collection[str] = PARTS, drafter: str | Path | None = None,
              adapters: str | Path | None = None, draft_layers: int = 0, quantize_drafter: str = "none",
              dtype: str = "float32", device: str = "cpu",
              log: Callable[[str], None] = lambda s: None) -> ModelPair:
    """The ``parts`` of ``source`` (see the module docstring), with its tokenizer and pixel budget
    (``parts=()``: those two only, for a caller that brings its own models).

    drafter: another source to take the drafter from (its drafter part; the tokenizer stays
    ``source``'s); adapters: exit-adapter directory replacing the verifier's exits; draft_layers: K > 0
    makes the drafter the verifier's first K layers + the exit-K adapter of ``adapters``;
    quantize_drafter: the drafter's quantization scheme (models/quantize.py; checked before loading);
    dtype, device: of a checkpoint's weights (a train-sim-pair pair runs in float32 on the CPU). Raises
    ModelSourceError naming the source when it cannot be loaded here (e.g. a hub id not in the local
    cache with HF_HUB_OFFLINE=1)."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"parts {sorted(parts)}: choose from {PARTS}")
    if "drafter" in parts:
        check_scheme(quantize_drafter, device)
    src = resolve(source, log)
    tokenizer = _loading(src, lambda: _tokenizer(src))  # first: a hub id that is not here fails at once
    kind_dtype, kind_device = (dtype, device) if src.kind != "pair" else ("float32", "cpu")
    verifier = None
    if "verifier" in parts and src.kind == SHAPE:
        verifier = _shape_verifier(src, adapters, dtype, device)
    elif "verifier" in parts:
        default_exits = Path(src.location) / "exits" if src.kind == "pair" else None
        exits = adapters or default_exits
        verifier = _loading(src, lambda: EarlyExitVerifier.from_config(VerifierConfig(
            model=_model_dir(src, "verifier"), adapters=str(exits) if exits else None,
            dtype=kind_dtype, device=kind_device)))
    draft = None
    if "drafter" in parts:
        dsrc = src if drafter is None else resolve(drafter, log)
        d_dtype, d_device = (dtype, device) if dsrc.kind != "pair" else ("float32", "cpu")
        model = _model_dir(dsrc, "verifier" if draft_layers else "drafter")
        if dsrc.kind == SHAPE:
            draft = _shape_drafter(dsrc, adapters, draft_layers, quantize_drafter, dtype, device)
        else:
            draft = _loading(dsrc, lambda: Drafter.from_config(DrafterConfig(
                model=model, quantize=quantize_drafter, dtype=d_dtype, device=d_device, layers=draft_layers,
                adapters=str(adapters) if adapters and draft_layers else None)))
    return ModelPair(draft, verifier, tokenizer, pair_max_pixels(src), str(source), src.location)


def _shape_verifier(src: Source, adapters: str | Path | None, dtype: str, device: str) -> EarlyExitVerifier:
    """A shape source's model as the verifier, with exits at every layer < L at the paper's width d/8
    (``adapters``: a directory of trained ones instead)."""
    from edge_spec_ros.models.adapters import ExitAdapters
    from edge_spec_ros.models.real_shapes import build_shape_model, parse_shape, shape_exits

    model = build_shape_model(parse_shape(src.location), dtype, device)
    exits = ExitAdapters.load(adapters) if adapters else shape_exits(model)
    return EarlyExitVerifier(model, exits.to(device))


def _shape_drafter(src: Source, adapters: str | Path | None, draft_layers: int, quantize: str,
                   dtype: str, device: str) -> Drafter:
    """A shape source's model as the drafter, or its first ``draft_layers`` layers headed by the exit of
    ``adapters`` at that layer (the logit lens without ``adapters``)."""
    from edge_spec_ros.models.adapters import ExitAdapters
    from edge_spec_ros.models.drafter import self_draft_model
    from edge_spec_ros.models.real_shapes import build_shape_model, parse_shape

    model = build_shape_model(parse_shape(src.location), dtype, device)
    if draft_layers:
        adapter = ExitAdapters.load(adapters)[draft_layers] if adapters else None
        model = self_draft_model(model, draft_layers, adapter).to(device)
    return Drafter(model, quantize)


def _model_dir(src: Source, part: str) -> str:
    """The checkpoint of a source's ``part``: a train-sim-pair directory's sub-directory, else the checkpoint."""
    return str(Path(src.location) / part) if src.kind == "pair" else src.location


def _tokenizer(src: Source) -> PreTrainedTokenizerBase:
    if src.kind == SHAPE:
        from edge_spec_ros.models.real_shapes import shape_tokenizer

        return shape_tokenizer()
    if src.kind == "pair":  # trained with the project's tokenizer (its copies in verifier/ and drafter/ agree)
        from edge_spec_ros.models.tokenizer import load_tokenizer

        return load_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(src.location)


def _loading(src: Source, load):
    """``load()``, with a hub id that cannot be loaded here reported as one line naming it."""
    try:
        return load()
    except OSError as exc:
        if not src.hub_id or isinstance(exc, ModelSourceError):
            raise
        why = ("HF_HUB_OFFLINE is set and it is not in the local Hugging Face cache"
               if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
               else str(exc).strip().splitlines()[0])
        raise ModelSourceError(f"model source {src.name!r} is no directory here and cannot be loaded as a hub id: "
                               f"{why}; download it once (`hf download {src.name}`) or pass a local directory"
                               ) from None
