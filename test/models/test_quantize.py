"""The drafter's quantization schemes (models/quantize.py): each scheme that runs on the CPU quantizes a
drafter whose greedy speculative output still equals the target's own; an unknown scheme, or a scheme
on a device it has no kernel for, is refused with the valid names; the drafter node's parameter is
checked against the same table."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
from edge_spec_ros.models.drafter import Drafter, DrafterConfig
from edge_spec_ros.models.quantize import SCHEMES, check_scheme, quantize
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier

CPU_SCHEMES = [name for name, s in SCHEMES.items() if "cpu" in s.devices]
QUANTIZED_WEIGHT = {"int8-dynamic": "Int8Tensor", "int8-weight": "Int8Tensor"}
CONFIG = DecodeConfig(max_new_tokens=24, gamma=4)


@pytest.fixture(scope="module")
def verifier(target_model):
    return EarlyExitVerifier(target_model)


@pytest.fixture(scope="module")
def target_greedy(verifier, prompts) -> list[list[int]]:
    return [autoregressive(verifier, p, CONFIG).tokens for p in prompts[:2]]


def test_the_table_names_the_cpu_schemes_and_int4_for_cuda():
    assert {"none", "int8-dynamic", "int8-weight"} <= set(CPU_SCHEMES)
    assert SCHEMES["int4-weight"].devices == ("cuda",)
    assert set(QUANTIZED_WEIGHT) == set(CPU_SCHEMES) - {"none"}


@pytest.mark.parametrize("name", CPU_SCHEMES)
def test_a_quantized_drafter_keeps_greedy_speculative_decoding_exact(name, target_model, verifier, prompts,
                                                                     target_greedy):
    drafter = Drafter(truncated_copy(target_model, 2), quantize=name)
    weights = {type(m.weight).__name__ for m in drafter.stack.model.modules() if isinstance(m, nn.Linear)}
    assert weights == {QUANTIZED_WEIGHT.get(name, "Parameter")}
    for prompt, expected in zip(prompts[:2], target_greedy):
        result = speculative(drafter, verifier, prompt, CONFIG)
        assert result.tokens == expected
        assert result.stats.drafted > 0


def test_quantize_works_in_place_and_keeps_the_output_close(target_model, prompts):
    model = truncated_copy(target_model, 2)
    reference = Drafter(truncated_copy(target_model, 2))
    assert quantize(model, "int8-weight") is model
    quantized = Drafter(model)
    prompt = prompts[0]
    logits = [d.stack.final_logits(d.start(prompt), prompt.input_ids.tolist(), len(prompt) - 1)[-1]
              for d in (reference, quantized)]
    float_, int8 = logits
    assert not torch.equal(float_, int8)  # quantized ...
    assert int8.argmax() == float_.argmax()  # ... and close: the same greedy token, logits within 5% of their range
    assert (int8 - float_).abs().max() < 0.05 * (float_.max() - float_.min())


def test_an_unknown_scheme_is_refused_with_the_valid_names(target_model):
    with pytest.raises(ValueError, match="none, int8-dynamic, int8-weight, int4-weight"):
        Drafter(truncated_copy(target_model, 2), quantize="int8")
    with pytest.raises(ValueError, match="choose from"):
        quantize(nn.Linear(4, 4), "fp8")


def test_int4_is_refused_on_the_cpu_naming_what_runs_there(target_model):
    with pytest.raises(ValueError, match="runs on cuda only, not on cpu.*int8-dynamic"):
        check_scheme("int4-weight", "cpu")
    with pytest.raises(ValueError, match="int4-weight"):
        Drafter(truncated_copy(target_model, 2), quantize="int4-weight")
    check_scheme("int4-weight", "cuda:0")  # accepted there (no GPU needed to check the table)


def test_load_pair_checks_the_scheme_before_loading():
    from edge_spec_ros.models.pairs import load_pair

    with pytest.raises(ValueError, match="choose from"):
        load_pair("no-such-directory-or-hub-id", parts=("drafter",), quantize_drafter="int3")


def test_drafter_config_names_the_scheme():
    assert DrafterConfig().quantize == "none"
    assert "quantize_int8" not in DrafterConfig.__dataclass_fields__


def test_the_drafter_node_refuses_an_unknown_scheme():
    from edge_spec_ros.nodes.drafter_node import DrafterNodeConfig

    assert DrafterNodeConfig().quantize == "none"
    assert DrafterNodeConfig(quantize="int8-dynamic").quantize == "int8-dynamic"
    with pytest.raises(ValueError, match="unknown quantization scheme 'int8'.*int8-dynamic"):
        DrafterNodeConfig(quantize="int8")


def test_the_survey_reports_every_cpu_scheme_against_the_float_drafter(target_model, verifier, prompts):
    from edge_spec_ros.bench.quant_survey import cpu_schemes, survey, table

    rows = survey("tiny", truncated_copy(target_model, 2), verifier, prompts[:1], cpu_schemes(), 8, (),
                  log=lambda s: None)
    assert [r.scheme for r in rows] == CPU_SCHEMES and rows[0].tp_ratio == 1.0
    assert all(r.exact and r.tokens == 8 and r.tp_ms > 0 and r.tau >= 1 for r in rows)
    assert table(rows).count("\n| tiny |") == len(CPU_SCHEMES)


def test_loading_a_model_logs_nothing_of_torchao_s_cuda_kernels(tmp_path):
    """transformers imports torchao whenever it is installed; under a CPU torch torchao's CUDA kernels do
    not load and it says so, and torch warns of torchao's enums (edge_spec_ros/models/__init__.py drops
    exactly those records): a node's log opens with neither. Run outside the source tree, as a node is."""
    import subprocess
    import sys

    code = "from edge_spec_ros.models.pairs import load_pair; load_pair(parts=('drafter',))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Failed to load" not in done.stderr and "Enum subclass" not in done.stderr, done.stderr
