"""Dependencies point downward only: every import in a module of edge_spec_ros/ (at module level or
inside a function) goes to the module's own part of the package or to a part of a lower layer. Parts
of one layer do not import each other (the verifier service and the robot's decoding, for one).

A part is a subpackage (``cloud``) or a top-level module (``cli``). The layers are declared bottom up
in ``LAYERS``, from what the tree imports; a new part fails here until it has a place there. Imports
built at run time (``importlib``) and child processes (``python -m ...``) are not checked.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "edge_spec_ros"
NAME = PACKAGE.name

LAYERS: tuple[tuple[str, ...], ...] = (
    # which install has which optional module, and the one line naming the extra where one lacks it;
    # config dataclasses' field metadata as command-line options (imports nothing of the package)
    ("extras", "config_cli"),
    # leaves: pure maths on tensors, pure navigation, the synthetic camera, rosbag2 files without ROS,
    # the CPU thread budget, child processes forked warm (bags, cpu and warm_start are top-level modules,
    # but libraries: sim, nodes and the application use them)
    ("spec", "nav", "camera", "bags", "cpu", "warm_start"),
    ("wire", "models"),  # messages, codec, transport and the verifier-link protocol; the models
    ("decoding",),  # reference decoders over the models
    ("sim",),  # the simulated room, its expert, closed-loop evaluation
    ("cloud", "edge", "training"),  # the verifier service (and the in-process link), the robot's decoding
    # DRAGON, all of it: its maths, stores, peer, messages (registered with the codec), the robot's side,
    # the cloud's sessions (a kind of decision the server hosts) and its benchmarks
    ("dragon",),
    ("msg", "srv", "action"),  # the ROS 2 interfaces rosidl generates (not in this tree)
    ("nodes",),  # rclpy nodes and the ROS verifier link
    # the application: ``edge-spec-ros serve`` as a child process; the benchmark (its ROS path drives
    # the nodes, it starts servers); the one-process compositions; the command line
    ("server_process",),
    ("bench",),
    ("bringup", "sim_motion_bench"),
    ("commands",),  # each command's options and what it runs, assembled by cli
    ("cli",),
    ("command_docs",),  # docs/commands.md from the parser
)
GENERATED = {"msg", "srv", "action"}

# (importing module, imported module) -> why the import stays against the layers for now
EXCEPTIONS: dict[tuple[str, str], str] = {}

LAYER = {part: i for i, layer in enumerate(LAYERS) for part in layer}
ROOT = -1  # edge_spec_ros/__init__.py: below everything, it imports nothing of the package


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(path: Path) -> str | None:
    """The part a module belongs to; None for the package's own __init__."""
    rel = path.relative_to(PACKAGE).parts
    if len(rel) > 1:
        return rel[0]
    return None if rel[0] == "__init__.py" else Path(rel[0]).stem


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of the package in ``path``, relative ones resolved; ``from
    edge_spec_ros import x`` names ``edge_spec_ros.x``."""
    package = dotted(path) if path.name == "__init__.py" else dotted(path).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base == NAME:
                found += [(node.lineno, f"{NAME}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, base))
    return [(line, module) for line, module in found if module.startswith(NAME + ".")]


def layer(part: str | None) -> int | None:
    return ROOT if part is None else LAYER.get(part)


def violations() -> list[tuple[str, str, str]]:
    """(module:line, imported module, what is wrong) for every import against the layers."""
    out = []
    for path in modules():
        source = part_of(path)
        for line, module in imports(path):
            target = module.split(".")[1]
            if target == source:
                continue
            if target not in LAYER:
                out.append((f"{dotted(path)}:{line}", module, f"{target} is in no layer"))
            elif LAYER[target] == layer(source):
                out.append((f"{dotted(path)}:{line}", module, f"sideways: {source} and {target} share a layer"))
            elif LAYER[target] > layer(source):
                out.append((f"{dotted(path)}:{line}", module, f"upward: {target} is above {source or NAME}"))
    return out


def test_every_part_has_one_layer():
    parts = {part_of(path) for path in modules()} - {None}
    assert sorted(parts - set(LAYER)) == [], "give each new part a layer in LAYERS"
    assert sorted(set(LAYER) - parts - GENERATED) == [], "a part in LAYERS that the tree no longer has"
    assert len(LAYER) == sum(len(layer) for layer in LAYERS), "a part in two layers"


def test_imports_point_downward():
    wrong = [v for v in violations() if (v[0].split(":")[0], v[1]) not in EXCEPTIONS]
    assert wrong == [], "\n".join(f"{where} imports {module}: {why}" for where, module, why in wrong)


def test_every_exception_is_still_needed():
    needed = {(where.split(":")[0], module) for where, module, _ in violations()}
    assert sorted(set(EXCEPTIONS) - needed) == []


@pytest.mark.parametrize("source,target", [("cloud", "edge"), ("edge", "cloud"), ("wire", "edge"),
                                           ("nodes", "cli"), ("spec", "wire")])
def test_the_table_forbids(source, target):
    """The rules the architecture names: cloud and edge never import each other, nothing below
    imports what is above."""
    assert LAYER[target] >= LAYER[source]


def test_relative_and_lazy_imports_are_seen(tmp_path, monkeypatch):
    root = tmp_path / NAME
    (root / "cloud").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "cloud" / "__init__.py").write_text("")
    (root / "cloud" / "job.py").write_text("from ..edge import client\n\ndef f():\n    import edge_spec_ros.cli\n"
                                           "    from . import session\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", root)
    found = [module for _, module in imports(root / "cloud" / "job.py")]
    assert found == [f"{NAME}.edge", f"{NAME}.cli", f"{NAME}.cloud"]
