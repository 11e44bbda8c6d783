"""models.real_shapes: Qwen2-VL-2B / -7B at their published shapes with random weights (load_pair's
``qwen2-vl-*-shape`` sources). The configurations are checked against the published numbers written out
here; building the weights at full width and vocabulary takes 10-50 s, so those tests are ``slow``."""

from __future__ import annotations

import gc

import pytest
import torch
from transformers import Qwen2VLForConditionalGeneration

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.models.pairs import ModelSourceError, count_parameters, load_pair, resolve
from edge_spec_ros.models.real_shapes import (
    SHAPES,
    VISION_LAYERS_DEFAULT,
    ShapeSourceError,
    parse_shape,
    shape_config,
    shape_exits,
    shape_tokenizer,
)
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.spec.verify import verify_greedy

# config.json of Qwen/Qwen2-VL-2B-Instruct and Qwen/Qwen2-VL-7B-Instruct, written out independently of SHAPES:
# (vocab, hidden, layers, heads, KV heads, MLP, tied embeddings)
PUBLISHED = {
    "qwen2-vl-2b-shape": (151_936, 1536, 28, 12, 2, 8960, True),
    "qwen2-vl-7b-shape": (152_064, 3584, 28, 28, 4, 18944, False),
}
# the published parameter counts (the checkpoints' safetensors: 2.21B and 8.29B), to 0.5 %
PUBLISHED_PARAMETERS = {"qwen2-vl-2b-shape": 2.21e9, "qwen2-vl-7b-shape": 8.29e9}


def meta_model(source: str) -> Qwen2VLForConditionalGeneration:
    with torch.device("meta"):
        return Qwen2VLForConditionalGeneration(shape_config(parse_shape(source)))


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_configuration_is_the_published_one(name):
    config = shape_config(parse_shape(name))
    text, vision = config.text_config, config.vision_config
    vocab, hidden, layers, heads, kv_heads, mlp, tied = PUBLISHED[name]
    assert (text.vocab_size, text.hidden_size, text.num_hidden_layers, text.num_attention_heads,
            text.num_key_value_heads, text.intermediate_size, config.tie_word_embeddings) == PUBLISHED[name]
    assert (text.hidden_size // text.num_attention_heads, text.rms_norm_eps, text.max_position_embeddings,
            text.hidden_act) == (128, 1e-6, 32768, "silu")
    assert text.rope_parameters["rope_theta"] == 1_000_000.0
    assert text.rope_parameters["mrope_section"] == [16, 24, 24]
    assert (vision.embed_dim, vision.num_heads, vision.mlp_ratio, vision.patch_size, vision.spatial_merge_size,
            vision.temporal_patch_size, vision.hidden_size) == (1280, 16, 4, 14, 2, 2, hidden)
    assert vision.depth == VISION_LAYERS_DEFAULT  # reduced by default; vision_layers=32 is the published tower
    assert (config.image_token_id, config.video_token_id, config.vision_start_token_id,
            config.vision_end_token_id, text.eos_token_id) == (151655, 151656, 151652, 151653, 151645)
    whole = count_parameters(meta_model(f"{name}:vision_layers=32"))
    assert whole == pytest.approx(PUBLISHED_PARAMETERS[name], rel=5e-3)


def test_the_depth_options_reduce_depth_only():
    spec = parse_shape("qwen2-vl-7b-shape:layers=2,vision_layers=3")
    assert (spec.layers, spec.vision_layers) == (2, 3)
    config = shape_config(spec)
    assert (config.text_config.num_hidden_layers, config.vision_config.depth) == (2, 3)
    assert config.text_config.hidden_size == 3584 and config.text_config.vocab_size == 152_064
    assert spec.source == "qwen2-vl-7b-shape:layers=2,vision_layers=3"
    assert parse_shape(" qwen2-vl-2b-shape:layers=28".strip()).source == "qwen2-vl-2b-shape"  # canonical
    assert resolve("qwen2-vl-2b-shape:vision_layers=1,layers=4").location == "qwen2-vl-2b-shape:layers=4"
    assert resolve("qwen2-vl-2b-shape").kind == "shape"


@pytest.mark.parametrize("source, message", [
    ("qwen2-vl-7b-shape:layers=0", r"layers=0 outside 1\.\.28"),
    ("qwen2-vl-7b-shape:layers=29", r"layers=29 outside 1\.\.28"),
    ("qwen2-vl-2b-shape:vision_layers=33", r"vision_layers=33 outside 1\.\.32"),
    ("qwen2-vl-7b-shape:layers=two", r"layers='two' is not an integer"),
    ("qwen2-vl-7b-shape:depth=2", r"'depth=2' is not an option"),
    ("qwen2-vl-7b-shape:layers", r"'layers' is not an option"),
    ("qwen2-vl-7b-shape:layers=2,layers=3", r"layers given twice"),
])
def test_a_bad_depth_option_is_one_clear_error(source, message):
    with pytest.raises(ShapeSourceError, match=message):
        parse_shape(source)
    with pytest.raises(ModelSourceError, match=message):  # what load_pair's callers catch
        load_pair(source, parts=())


def test_an_unknown_shape_name():
    with pytest.raises(ShapeSourceError, match="no shape named 'qwen2-vl-72b-shape'"):
        parse_shape("qwen2-vl-72b-shape")
    assert set(SHAPES) == set(PUBLISHED)


def test_exits_at_the_papers_width():
    """27 exits with a d/8 bottleneck on the 7B shape: 27 * 2 * 3584 * 448 parameters (~87M, FSD Table 2)."""
    with torch.device("meta"):
        exits = shape_exits(meta_model("qwen2-vl-7b-shape"))
    assert exits.layers == list(range(1, 28)) and exits.bottleneck == 448
    assert count_parameters(exits) == 27 * 2 * 3584 * 448
    small = shape_exits(meta_model("qwen2-vl-7b-shape:layers=3"))
    h = torch.randn(3, 3584)
    assert small.layers == [1, 2] and torch.equal(small[2](h), h)  # W_up = 0: the logit lens until trained


def test_the_tokenizer_has_qwen2_vl_length_and_special_ids():
    tok = shape_tokenizer()
    assert len(tok) == 151_657
    ids = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                                     "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"])
    assert ids == [151643, 151644, 151645, 151652, 151653, 151655, 151656]
    text = "go to the red chair, then stop."
    encoded = tok.encode(text)
    assert tok.decode(encoded) == text and max(encoded) < 151643
    assert len(set(tok.convert_ids_to_tokens(list(range(151_657))))) == 151_657  # every id its own string
    assert load_pair("qwen2-vl-7b-shape:layers=2", parts=()).tokenizer is tok


@pytest.fixture(scope="module")
def camera_image():
    return synthetic_camera_image(seed=0)


def greedy_continuation(verifier, prompt, steps: int) -> list[int]:
    """The verifier's own greedy tokens after ``prompt`` (final exit, one position at a time)."""
    kv = verifier.start(prompt)
    seq = prompt.input_ids.tolist()
    for _ in range(steps):
        seq.append(int(verifier.logits(kv, seq, len(seq) - 1)[-1].argmax()))
    return seq[len(prompt):]


@pytest.mark.slow
def test_a_2b_shape_pair_drafts_and_verifies_greedily(camera_image):
    """Full width and vocabulary, 2 layers: the drafter is the same random model, so its greedy draft is
    the verifier's greedy continuation and is accepted whole (~25 s: two 1.5 GB builds)."""
    pair = load_pair("qwen2-vl-2b-shape:layers=2")
    assert pair.verifier.num_layers == 2 and pair.verifier.exit_layers == (1,)
    assert pair.verifier.adapters.bottleneck == 1536 // 8
    model = pair.verifier.stack.model
    assert model.lm_head.weight is model.model.language_model.embed_tokens.weight  # tied, as published
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert float(model.lm_head.weight.std()) == pytest.approx(0.02, rel=0.01)  # HF's initialisation
    prompt = pair.prompt_encoder().encode("go to the red chair", camera_image)
    gamma = 3
    draft = pair.drafter.draft(pair.drafter.start(prompt), prompt.input_ids.tolist(), gamma,
                               SamplingConfig(temperature=0.0), PositionalRNG(0))
    seq = prompt.input_ids.tolist() + list(draft.tokens)
    exits = list(pair.verifier.exits(pair.verifier.start(prompt), seq, len(prompt) - 1))
    assert [e.layer for e in exits] == [1, 2]
    assert all(e.logits.shape == (gamma + 1, 151_936) for e in exits)
    verdict = verify_greedy(draft.tokens, exits[-1].logits)
    assert verdict.accepted == gamma
    assert list(verdict.tokens) == greedy_continuation(pair.verifier, prompt, gamma + 1)


@pytest.mark.slow
def test_a_7b_shape_verifier_at_full_width(camera_image):
    """The 7B shape at 2 layers (~7 GB while built, ~50 s): V = 152,064 logits from every exit, the exit
    at d/8; a 2B-width drafter's draft is verified greedily."""
    robot = load_pair("qwen2-vl-2b-shape:layers=1", parts=("drafter",))
    prompt = robot.prompt_encoder().encode("find the silver bottle", camera_image)
    draft = robot.drafter.draft(robot.drafter.start(prompt), prompt.input_ids.tolist(), 2,
                                SamplingConfig(temperature=0.0), PositionalRNG(0))
    assert robot.parameters()["verifier"] == count_parameters(meta_model("qwen2-vl-2b-shape:layers=1"))
    del robot
    gc.collect()
    cloud = load_pair("qwen2-vl-7b-shape:layers=2", parts=("verifier",))
    verifier = cloud.verifier
    assert verifier.adapters.bottleneck == 448 and verifier.exit_layers == (1,)
    assert count_parameters(verifier.stack.model) == count_parameters(meta_model("qwen2-vl-7b-shape:layers=2"))
    seq = prompt.input_ids.tolist() + list(draft.tokens)
    exits = list(verifier.exits(verifier.start(prompt), seq, len(prompt) - 1))
    assert [e.logits.shape for e in exits] == [(3, 152_064)] * 2
    torch.testing.assert_close(exits[-1].logits, verifier.logits(verifier.start(prompt), seq, len(prompt) - 1))
    verdict = verify_greedy(draft.tokens, exits[-1].logits)
    own = greedy_continuation(verifier, prompt, verdict.accepted + 1)
    assert list(verdict.tokens) == own  # what SD emits is the verifier's own greedy output
