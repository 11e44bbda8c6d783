"""The embedded default model pair: small Qwen2-VL models shipped with the package, no download.

``embedded_pair()`` loads the pair ``edge-spec-ros train-sim-pair`` trained on the simulated room
(``assets/sim_pair``: a 6-layer, 128-wide verifier with trained exit adapters at layers 1..5 and a
3-layer, 64-wide drafter distilled from it, float16 safetensors, a few MB). It reads a camera frame
of that room and an instruction and answers with one line of reasoning and one action.

``random_pair()`` is the untrained pair the protocol tests use: a 6-layer, 64-wide random verifier
(logit-lens exits) and its first ``DRAFT_LAYERS`` layers as a self-speculative drafter, because two
unrelated random models would almost never agree. Real deployments load Qwen2-VL-2B / -7B instead
(``--drafter/--verifier``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from edge_spec_ros.models.adapters import ExitAdapters
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.loading import load_qwen2vl
from edge_spec_ros.models.prompt import PromptConfig
from edge_spec_ros.models.tiny import VERIFIER_SPEC, build_tiny_qwen2vl, truncated_copy
from edge_spec_ros.models.tokenizer import load_tokenizer
from edge_spec_ros.models.verifier import EarlyExitVerifier

DRAFT_LAYERS = 4
VERIFIER_SEED = 0
SIM_PAIR_DIR = Path(__file__).resolve().parent.parent / "assets" / "sim_pair"


PROMPT_FILE = "prompt.json"  # in a train-sim-pair directory: the image pixel budget it was trained at


@dataclass
class ModelPair:
    drafter: Drafter
    verifier: EarlyExitVerifier
    tokenizer: PreTrainedTokenizerBase
    max_pixels: int = PromptConfig.max_pixels  # the image pixel budget the pair was trained at


def load_pair(directory: str | Path = "embedded", quantize_drafter: bool = False) -> ModelPair:
    """A ``train-sim-pair`` output directory (``verifier/``, ``drafter/``, ``exits/``); 'embedded' is
    the shipped one."""
    root = SIM_PAIR_DIR if str(directory) == "embedded" else Path(directory)
    missing = [p for p in ("verifier/config.json", "drafter/config.json", "exits/exit_adapters.json")
               if not (root / p).is_file()]
    if missing:
        raise FileNotFoundError(f"{root} lacks {missing}; train the pair with `edge-spec-ros train-sim-pair "
                                f"--out {root}` (about 35 minutes on 2 CPU cores)")
    verifier = EarlyExitVerifier(load_qwen2vl(str(root / "verifier")), ExitAdapters.load(root / "exits"))
    drafter = Drafter(load_qwen2vl(str(root / "drafter")), quantize=quantize_drafter)
    return ModelPair(drafter, verifier, load_tokenizer(), pair_max_pixels(root))


def pair_max_pixels(directory: str | Path = "embedded") -> int:
    """The image pixel budget a train-sim-pair directory was trained at ('embedded': the shipped one);
    the robot and the verifier encode images with it."""
    root = SIM_PAIR_DIR if str(directory) == "embedded" else Path(directory)
    path = root / PROMPT_FILE
    return int(json.loads(path.read_text())["max_pixels"]) if path.is_file() else PromptConfig.max_pixels


def embedded_max_pixels() -> int:
    return pair_max_pixels("embedded")


def embedded_pair(quantize_drafter: bool = False) -> ModelPair:
    """The shipped pair trained on the simulated room."""
    return load_pair("embedded", quantize_drafter)


def random_pair(quantize_drafter: bool = False) -> ModelPair:
    """The untrained pair: random verifier, its first layers as drafter (deterministic)."""
    tokenizer = load_tokenizer()
    target = build_tiny_qwen2vl(VERIFIER_SPEC, tokenizer, seed=VERIFIER_SEED)
    drafter = Drafter(truncated_copy(target, DRAFT_LAYERS), quantize=quantize_drafter)
    return ModelPair(drafter, EarlyExitVerifier(target), tokenizer)
