"""A generated ROS interface and a Python class of the project with the same name are never imported
side by side under one name: a module that imports such an interface from ``edge_spec_ros.msg``
(``.srv``, ``.action``) binds it as ``<Name>Msg`` (``<Name>Srv``, ``<Name>Action``), so ``DraftBlock``
always means the wire dataclass of edge_spec_ros/wire/messages.py and ``DraftBlockMsg`` the ROS message.

The interfaces are the files of msg/, srv/ and action/ (what rosidl generates, no ROS needed here); the
project's classes are every ``class`` statement in edge_spec_ros/. Every module of edge_spec_ros/ and
test/ is parsed (imports at module level and inside functions); imports built at run time and code in
strings (a child process's ``python -c``) are not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "edge_spec_ros"
SCANNED = (PACKAGE, REPO / "test")
SUFFIX = {"msg": "Msg", "srv": "Srv", "action": "Action"}  # interface kind -> the alias's suffix


def interfaces() -> dict[str, set[str]]:
    """kind (msg, srv, action) -> the names rosidl generates from the package's interface files."""
    return {kind: {p.stem for p in (REPO / kind).glob(f"*.{kind}")} for kind in SUFFIX}


def class_names(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Every class defined in the package (at any depth) -> the modules defining it."""
    names: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                names.setdefault(node.name, []).append(str(path.relative_to(REPO)))
    return names


def clashes() -> dict[str, set[str]]:
    """kind -> the generated names that are also a project class's name."""
    classes = class_names()
    return {kind: names & classes.keys() for kind, names in interfaces().items()}


def package_of(path: Path) -> list[str] | None:
    """The dotted package a module of edge_spec_ros/ is in (for relative imports); None elsewhere."""
    if PACKAGE not in path.parents:
        return None
    return list(path.relative_to(PACKAGE.parent).parent.parts)


def imported_module(node: ast.ImportFrom, path: Path) -> str | None:
    if not node.level:
        return node.module
    package = package_of(path)
    if package is None or node.level > len(package):
        return None
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def violations(source: str, path: Path, clash: dict[str, set[str]]) -> list[str]:
    """'line: from M import X[ as Y] (expected X as XMsg)' for each clashing name bound otherwise."""
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = imported_module(node, path)
        if module is None or module.split(".")[0] != PACKAGE.name or module.count(".") != 1:
            continue
        kind = module.split(".")[1]
        if kind not in SUFFIX:
            continue
        for alias in node.names:
            expected = alias.name + SUFFIX[kind]
            if (alias.name == "*" and clash[kind]) or (alias.name in clash[kind] and alias.asname != expected):
                bound = alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"
                found.append(f"{node.lineno}: from {module} import {bound} (expected {alias.name} as {expected})"
                             if alias.name != "*" else
                             f"{node.lineno}: from {module} import * (binds {sorted(clash[kind])} unaliased)")
    return found


def scanned_modules() -> list[Path]:
    return sorted(p for root in SCANNED for p in root.rglob("*.py"))


def test_the_known_clashes_are_found():
    """The check is not vacuous: the wire dataclasses, the decoder's statistics and the navigation
    action share their names with messages."""
    clash = clashes()
    assert {"DraftBlock", "ExitResult", "DecodeStats", "NavAction"} <= clash["msg"], clash
    assert interfaces()["srv"] and interfaces()["action"]


def test_generated_names_are_imported_with_a_suffix_where_a_project_class_has_the_name():
    clash = clashes()
    bad = {}
    for path in scanned_modules():
        found = violations(path.read_text(), path, clash)
        if found:
            bad[str(path.relative_to(REPO))] = found
    assert not bad, ("a generated interface with a project class's name is imported without its "
                     f"<Name>Msg/Srv/Action alias: {bad}")


@pytest.mark.parametrize("source, flagged", [
    ("from edge_spec_ros.msg import DraftBlock\n", True),
    ("from edge_spec_ros.msg import Decision, DraftBlock as DraftMsg\n", True),  # alias, but not <Name>Msg
    ("def f():\n    from edge_spec_ros.msg import NavAction\n", True),  # inside a function
    ("from edge_spec_ros.msg import *\n", True),
    ("from edge_spec_ros.srv import DraftBlock as DraftBlockMsg\n", True),  # a service takes Srv
    ("from edge_spec_ros.msg import DraftBlock as DraftBlockMsg, Decision\n", False),
    ("from edge_spec_ros.wire.messages import DraftBlock\n", False),  # the dataclass itself
    ("import edge_spec_ros.msg as msgs\n", False),  # reached as msgs.DraftBlock: no clash
])
def test_the_check_flags_unaliased_imports(source, flagged):
    clash = {"msg": {"DraftBlock", "NavAction"}, "srv": {"DraftBlock"}, "action": set()}
    assert bool(violations(source, REPO / "test" / "example.py", clash)) is flagged


def test_relative_imports_inside_the_package_are_resolved():
    clash = {"msg": {"DraftBlock"}, "srv": set(), "action": set()}
    path = PACKAGE / "nodes" / "example.py"
    assert violations("from ..msg import DraftBlock\n", path, clash)
    assert not violations("from ..msg import DraftBlock as DraftBlockMsg\n", path, clash)
    assert not violations("from .msg import DraftBlock\n", path, clash)  # edge_spec_ros.nodes.msg
