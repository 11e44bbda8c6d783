"""The parameters table of docs/parameters.md, generated from the nodes' config dataclasses.

``python -m edge_spec_ros.nodes.param_docs > docs/parameters.md`` rewrites it; a test fails when the
file and the code disagree. Each row: the node, the parameter, its default, its range (the
descriptor's) and its description (the field's ``doc``).
"""

from __future__ import annotations

import dataclasses
import importlib
import math

NODES = ("camera_node", "sim_node", "drafter_node", "bridge_node", "action_node", "navigate_node",
         "bag_replay_node", "memory_node")
NODE_NAMES = {"camera_node": "camera", "sim_node": "sim", "drafter_node": "drafter", "bridge_node": "bridge",
              "action_node": "action", "navigate_node": "navigate", "bag_replay_node": "bag_replay",
              "memory_node": "memory"}


def _value(v) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(map(str, v)) + "]"
    return f"`{v!r}`" if isinstance(v, str) else f"{v:g}" if isinstance(v, float) else str(v)


def parameter_rows() -> list[tuple[str, str, str, str, str]]:
    rows = []
    for module_name in NODES:
        module = importlib.import_module(f"edge_spec_ros.nodes.{module_name}")
        for cls in module.PARAMETER_CONFIGS:
            for f in dataclasses.fields(cls):
                default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
                low_high = f.metadata.get("range")
                span = f"{_value(low_high[0])} … {_value(low_high[1])}" if low_high else ""
                rows.append((NODE_NAMES[module_name], f.name, _value(default), span,
                             " ".join(f.metadata.get("doc", "").split()).replace("|", "\\|")))
    return rows


def parameters_markdown() -> str:
    lines = ["# Parameters of the nodes", "",
             "Generated from the config dataclasses (`python -m edge_spec_ros.nodes.param_docs > "
             "docs/parameters.md`; a test keeps this file equal to the code). Defaults are the code's; "
             "`config/go2_nav.yaml` sets some of them for the Go2 and the simulated room. Every node also "
             "takes `use_sim_time`.", "",
             "| node | parameter | default | range | meaning |", "|---|---|---|---|---|"]
    lines += [f"| {node} | `{name}` | {default} | {span} | {text} |" for node, name, default, span, text in
              parameter_rows()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(parameters_markdown(), end="")
