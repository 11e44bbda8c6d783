"""The package uses rclpy's public API only: no module imports or reaches ``rclpy.impl`` or the C
extension (``rclpy._rclpy_pybind11``), private API that changes between distributions (the ROS
verifier link's receiver once built its own wait set on them; it now spins an executor of its own).
Humble, Jazzy and Kilted differ there; what differs in the public API is feature-detected in
edge_spec_ros/nodes/compat.py."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("edge_spec_ros", "launch")
PRIVATE = ("rclpy.impl", "rclpy._rclpy")


def dotted(node: ast.AST) -> str:
    """``a.b.c`` of a Name or an Attribute chain ('' for anything else)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def private_uses(path: Path) -> list[str]:
    """``line: name`` for each import or attribute of rclpy's private modules in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [f"{node.module or ''}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute):
            names = [dotted(node)]
        else:
            continue
        found += [f"{node.lineno}: {name}" for name in names if name.startswith(PRIVATE)]
    return found


def test_no_module_uses_rclpys_private_api():
    paths = [p for source in SOURCES for p in sorted((ROOT / source).rglob("*.py"))]
    assert any(p.name == "ros_link.py" for p in paths)
    used = {str(p.relative_to(ROOT)): uses for p in paths if (uses := private_uses(p))}
    assert used == {}, used


def test_each_kind_of_use_is_seen(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import rclpy.impl.implementation_singleton\nfrom rclpy.impl import rcutils_logger\n"
                      "from rclpy import _rclpy_pybind11\nimport rclpy\n\n"
                      "def f():\n    return rclpy.impl.implementation_singleton.rclpy_implementation\n")
    uses = private_uses(module)
    assert [u.split(":")[0] for u in uses][:3] == ["1", "2", "3"] and any(u.startswith("7:") for u in uses), uses
