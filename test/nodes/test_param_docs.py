"""docs/parameters.md is the nodes' parameters as the code declares them: regenerate it
(``python -m edge_spec_ros.nodes.param_docs > docs/parameters.md``) when a config changes."""

from __future__ import annotations

from pathlib import Path

from edge_spec_ros.nodes.param_docs import parameter_rows, parameters_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_the_parameters_doc_is_the_code():
    assert (ROOT / "docs" / "parameters.md").read_text() == parameters_markdown()


def test_every_numeric_parameter_has_a_range_and_every_parameter_a_description():
    for node, name, default, span, text in parameter_rows():
        assert text, (node, name)
        numeric = default[0].isdigit() or default[0] == "-" or default == "NaN"
        assert span or not numeric or default == "NaN", (node, name)  # NaN defaults mean "not set"
