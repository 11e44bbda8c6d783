"""Qwen2-VL-2B and -7B at their published shapes, with random weights: nothing is downloaded.

``load_pair("qwen2-vl-7b-shape")`` (``models/pairs.py``) builds ``Qwen2VLForConditionalGeneration``
from the configuration the published checkpoint carries, with weights drawn from a fixed seed, so
every size that the deployment's costs depend on is the real one: the hidden width d, the heads and
KV heads (the KV cache per position), the MLP, the vocabulary V (the LM head, the q sent per round),
the vision tower's patch, merge and width (the image tokens per frame). What random weights cannot
give is what the trained ones know: acceptance (τ, the exits' release rates) is not measured here.

A source string may reduce the depth so a CPU can run the model at full width and vocabulary:
``qwen2-vl-7b-shape:layers=2`` keeps the first 2 of the 28 decoder layers,
``...:layers=2,vision_layers=4`` 4 of the vision tower's 32 blocks. The vision tower is built with
``VISION_LAYERS_DEFAULT`` = 1 block unless ``vision_layers`` says otherwise: it runs once per decision
(the prefill), its width, patch and merge stay the published ones (so a frame gives the real number
of image tokens), and its 32 published blocks (~630M parameters) would otherwise outweigh a reduced
decoder. ``vision_layers=32`` gives the published tower.

The tokenizer: the project has no Qwen2 tokenizer offline. ``shape_tokenizer()`` is a byte-level BPE
of Qwen2-VL's length (151,657 ids) with Qwen2's special tokens at Qwen2's ids (151,643..151,656):
the project tokenizer's merges and tokens first (so text is split as the shipped pair splits it),
then fixed-seed pseudo-words that text never produces (each decodes to its own string). The
model's output size V (151,936 or 152,064) exceeds it, as in the published checkpoints.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2VLConfig, Qwen2VLForConditionalGeneration

from edge_spec_ros.models.adapters import ExitAdapters
from edge_spec_ros.models.loading import torch_dtype

SEED = 0  # the weights of every shape source: torch.manual_seed(SEED) before the model is built
TOKENIZER_SIZE = 151_657  # len(tokenizer) of Qwen/Qwen2-VL-2B-Instruct and -7B-Instruct
VISION_LAYERS_DEFAULT = 1

# Qwen2's special tokens in the order of their ids, from 151,643 (the tokenizer's added tokens).
QWEN2_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
)
FIRST_SPECIAL_ID = TOKENIZER_SIZE - len(QWEN2_SPECIAL_TOKENS)  # 151,643 = <|endoftext|>


@dataclass(frozen=True)
class PublishedShape:
    """The sizes of one published Qwen2-VL checkpoint (its config.json)."""

    checkpoint: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    tie_word_embeddings: bool


# Source: config.json of Qwen/Qwen2-VL-2B-Instruct and Qwen/Qwen2-VL-7B-Instruct on the Hugging Face hub.
SHAPES = {
    "qwen2-vl-2b-shape": PublishedShape("Qwen/Qwen2-VL-2B-Instruct", vocab_size=151_936, hidden_size=1536,
                                        num_layers=28, num_heads=12, num_kv_heads=2, intermediate_size=8960,
                                        tie_word_embeddings=True),
    "qwen2-vl-7b-shape": PublishedShape("Qwen/Qwen2-VL-7B-Instruct", vocab_size=152_064, hidden_size=3584,
                                        num_layers=28, num_heads=28, num_kv_heads=4, intermediate_size=18944,
                                        tie_word_embeddings=False),
}
# Common to both config.json files: the text decoder's other settings, the token ids and the vision tower
# (its hidden_size is the decoder's: the patch merger projects into it).
TEXT_COMMON = {"max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "hidden_act": "silu",
               "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24], "initializer_range": 0.02}
TOKEN_IDS = {"bos_token_id": 151643, "eos_token_id": 151645, "vision_start_token_id": 151652,
             "vision_end_token_id": 151653, "image_token_id": 151655, "video_token_id": 151656}
VISION = {"depth": 32, "embed_dim": 1280, "num_heads": 16, "mlp_ratio": 4, "patch_size": 14,
          "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3, "hidden_act": "quick_gelu"}
OPTIONS = ("layers", "vision_layers")


class ShapeSourceError(ValueError):
    """A shape source string whose name or options are wrong; the message says what is allowed."""


@dataclass(frozen=True)
class ShapeSpec:
    """A shape source parsed: the published shape, the decoder layers kept and the vision blocks built."""

    name: str
    shape: PublishedShape
    layers: int
    vision_layers: int = VISION_LAYERS_DEFAULT

    @property
    def source(self) -> str:
        """The canonical source string (what another process is given to build the same model)."""
        options = []
        if self.layers != self.shape.num_layers:
            options.append(f"layers={self.layers}")
        if self.vision_layers != VISION_LAYERS_DEFAULT:
            options.append(f"vision_layers={self.vision_layers}")
        return self.name + (":" + ",".join(options) if options else "")


def is_shape_source(source: str) -> bool:
    return str(source).split(":", 1)[0] in SHAPES


def parse_shape(source: str) -> ShapeSpec:
    """``name[:option=N[,option=N]]`` → ShapeSpec; ShapeSourceError naming what is wrong."""
    name, _, rest = str(source).partition(":")
    if name not in SHAPES:
        raise ShapeSourceError(f"model source {source!r}: no shape named {name!r}; choose one of {sorted(SHAPES)}")
    shape = SHAPES[name]
    limits = {"layers": shape.num_layers, "vision_layers": VISION["depth"]}
    values = {"layers": shape.num_layers, "vision_layers": VISION_LAYERS_DEFAULT}
    seen = set()
    for item in rest.split(",") if rest else []:
        key, eq, value = item.partition("=")
        key = key.strip()
        if key not in OPTIONS or not eq:
            raise ShapeSourceError(f"model source {source!r}: {item!r} is not an option; "
                                   f"write {name}:layers=N,vision_layers=M (options: {', '.join(OPTIONS)})")
        if key in seen:
            raise ShapeSourceError(f"model source {source!r}: {key} given twice")
        seen.add(key)
        try:
            number = int(value.strip())
        except ValueError:
            raise ShapeSourceError(f"model source {source!r}: {key}={value!r} is not an integer") from None
        if not 1 <= number <= limits[key]:
            raise ShapeSourceError(f"model source {source!r}: {key}={number} outside 1..{limits[key]} "
                                   f"(the published {shape.checkpoint} has {limits[key]})")
        values[key] = number
    return ShapeSpec(name, shape, values["layers"], values["vision_layers"])


def shape_config(spec: ShapeSpec) -> Qwen2VLConfig:
    """The published configuration of ``spec.shape``, with the decoder and vision depths of ``spec``."""
    s = spec.shape
    text = {k: v for k, v in TEXT_COMMON.items() if k not in ("rope_theta", "mrope_section")}
    ids = {k: v for k, v in TOKEN_IDS.items() if k.startswith(("image", "video", "vision"))}
    vision = {**VISION, "depth": spec.vision_layers, "hidden_size": s.hidden_size,
              "initializer_range": TEXT_COMMON["initializer_range"]}
    return Qwen2VLConfig(
        text_config={
            **text,
            "vocab_size": s.vocab_size,
            "hidden_size": s.hidden_size,
            "intermediate_size": s.intermediate_size,
            "num_hidden_layers": spec.layers,
            "num_attention_heads": s.num_heads,
            "num_key_value_heads": s.num_kv_heads,
            "rope_parameters": {"rope_type": "default", "rope_theta": TEXT_COMMON["rope_theta"],
                                "mrope_section": list(TEXT_COMMON["mrope_section"])},
            "bos_token_id": TOKEN_IDS["bos_token_id"],
            "eos_token_id": TOKEN_IDS["eos_token_id"],
            "pad_token_id": TOKEN_IDS["bos_token_id"],
            "tie_word_embeddings": s.tie_word_embeddings,
        },
        vision_config=vision,
        **ids,
        tie_word_embeddings=s.tie_word_embeddings,
    )


def build_shape_model(spec: ShapeSpec, dtype: str = "float32", device: str = "cpu",
                      seed: int = SEED) -> Qwen2VLForConditionalGeneration:
    """``Qwen2VLForConditionalGeneration`` of ``spec`` with fixed-seed random weights (HF's initialisation:
    normal, std 0.02), built in ``dtype`` on the CPU then moved to ``device``; the same (spec, dtype, seed)
    gives the same weights in every process. Eval mode, SDPA attention.

    The layers are constructed without torch's own initialisation (``no_init_weights``), then HF's runs
    once (``init_weights``, which also ties the 2B's embeddings): a third less time than both."""
    from transformers.initialization import no_init_weights

    config = shape_config(spec)
    config._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        torch.set_default_dtype(torch_dtype(dtype))
        try:
            with no_init_weights():
                model = Qwen2VLForConditionalGeneration(config)
            model.init_weights()
        finally:
            torch.set_default_dtype(previous)
    return model.to(device).eval().requires_grad_(False)


def shape_exits(model: Qwen2VLForConditionalGeneration, seed: int = SEED) -> ExitAdapters:
    """Exit adapters at every layer 1..L-1 with the paper's bottleneck d/8 (``ExitAdapters``): W_down drawn
    from ``seed``, W_up zero (an untrained exit is the logit lens; its cost is a trained one's)."""
    text = model.config.text_config
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        adapters = ExitAdapters(text.hidden_size, list(range(1, text.num_hidden_layers)))
    return adapters


def _pseudo_words(count: int, taken: set[str], seed: int = 0) -> list[str]:
    """``count`` byte-level token strings not in ``taken``: 2-12 lowercase letters, half of them after a
    space (``Ġ`` in the byte-level alphabet), drawn from ``seed``."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    out: list[str] = []
    while len(out) < count:
        word = ("" if rng.random() < 0.5 else "Ġ") + "".join(rng.choice(letters) for _ in range(rng.randint(2, 12)))
        if word not in taken:
            taken.add(word)
            out.append(word)
    return out


@lru_cache(maxsize=1)
def shape_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE of Qwen2-VL's length (``TOKENIZER_SIZE``) with Qwen2's special tokens at Qwen2's
    ids (see the module docstring). Deterministic; built in about a second, then cached."""
    from edge_spec_ros.models.tokenizer import CHAT_TEMPLATE, load_tokenizer

    state = json.loads(load_tokenizer().backend_tokenizer.to_str())
    vocab = sorted(state["model"]["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab if t not in QWEN2_SPECIAL_TOKENS]
    tokens += _pseudo_words(FIRST_SPECIAL_ID - len(tokens), set(tokens))
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in state["model"]["merges"]]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(QWEN2_SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=list(QWEN2_SPECIAL_TOKENS[1:]))
    fast.chat_template = CHAT_TEMPLATE
    return fast
