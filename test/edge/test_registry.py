"""The mode registry is the one list of modes: the decoder's views, the payload table, the drafter's
parameter check and the README's modes table all follow it."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_spec_ros.bench.payload import payload_table
from edge_spec_ros.edge import modes
from edge_spec_ros.edge.registry import MODES, REGISTRY, get_mode, modes_table

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_modes_table_is_the_registry():
    assert modes_table() in (ROOT / "README.md").read_text()


def test_the_decoder_views_follow_the_registry():
    assert modes.MODES == MODES
    assert set(modes.LOSSY_MODES) == {m.name for m in REGISTRY if not m.exact} == {"dssd-topk-lossy"}
    assert all("lossy" in m.name for m in REGISTRY if not m.exact)  # a lossy mode says so in its name
    assert set(modes.EXIT_MODES) == {"fsd", "pico-fsd"} and set(modes.PIPELINED_MODES) == {"pico", "pico-fsd"}


def test_the_payload_table_covers_every_mode():
    assert [row["mode"] for row in payload_table(vocab=64, layers=4)] == list(MODES)


def test_an_unknown_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="dssd-topk-lossy"):
        get_mode("spec")


def test_the_drafter_node_checks_modes_against_the_registry():
    from edge_spec_ros.nodes.drafter_node import DrafterNodeConfig

    for name in MODES:
        assert DrafterNodeConfig(mode=name).mode == name
    with pytest.raises(ValueError, match="unknown decoding mode"):
        DrafterNodeConfig(mode="fastest")


def test_the_drafter_node_checks_its_draft_source():
    from edge_spec_ros.nodes.drafter_node import DrafterNodeConfig

    assert DrafterNodeConfig(draft_source="lookup").draft_source == "lookup"
    assert DrafterNodeConfig(draft_source="retrieval", datastore="answers.json").datastore == "answers.json"
    with pytest.raises(ValueError, match="unknown draft source"):
        DrafterNodeConfig(draft_source="oracle")
    with pytest.raises(ValueError, match="needs a datastore"):
        DrafterNodeConfig(draft_source="retrieval")
    with pytest.raises(ValueError, match="read by draft source 'retrieval' only"):
        DrafterNodeConfig(datastore="answers.json")


def test_dragon_is_an_answer_mode_the_drafter_accepts_and_the_decoder_refuses():
    from edge_spec_ros.edge.registry import ALL_MODES, ANSWER_MODES, find_mode
    from edge_spec_ros.nodes.drafter_node import DrafterNodeConfig

    assert ANSWER_MODES == ("dragon",) and "dragon" in ALL_MODES and "dragon" not in MODES
    assert set(ALL_MODES) == set(MODES) | set(ANSWER_MODES)
    assert find_mode("dragon").answers and not any(get_mode(m).answers for m in MODES)
    assert DrafterNodeConfig(mode="dragon").mode == "dragon"
    with pytest.raises(ValueError, match="answers questions"):  # no verifier path runs it by mistake
        get_mode("dragon")
    with pytest.raises(ValueError, match="answers questions"):
        modes.EdgeDecoder(None, None, modes.EdgeConfig()).decode("dragon", None, b"")


def test_every_fresh_draft_source_builds_a_drafter(target_model, tmp_path):
    import json

    from edge_spec_ros.edge.draft_sources import FirstProposal, LookupDrafter, fresh_drafter
    from edge_spec_ros.edge.retrieval import Retrieval
    from edge_spec_ros.edge.registry import FRESH_SOURCE_NAMES, fresh_sources_table, get_fresh_source
    from edge_spec_ros.models.drafter import Drafter
    from edge_spec_ros.models.tiny import truncated_copy

    model = Drafter(truncated_copy(target_model, 1))
    assert FRESH_SOURCE_NAMES == ("model", "lookup", "retrieval")
    assert fresh_drafter("model", model) is model
    chain = fresh_drafter("lookup", model)
    assert isinstance(chain, LookupDrafter) and chain.model is model and chain.stack is model.stack
    store = tmp_path / "store.json"
    store.write_text(json.dumps([[1, 2, 3, 4], [1, 2, 3, 5]]))
    retrieval = fresh_drafter("retrieval", model, str(store))
    assert isinstance(retrieval.lookup, FirstProposal) and isinstance(retrieval.lookup.sources[0], Retrieval)
    with pytest.raises(ValueError, match="needs a datastore"):
        fresh_drafter("retrieval", model)
    with pytest.raises(ValueError, match="read by draft source 'retrieval' only"):
        fresh_drafter("lookup", model, str(store))
    with pytest.raises(ValueError, match="model, lookup, retrieval"):
        get_fresh_source("oracle")
    assert all(f"`{name}`" in fresh_sources_table() for name in FRESH_SOURCE_NAMES)
