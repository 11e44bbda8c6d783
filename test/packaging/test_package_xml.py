"""package.xml is valid and names the robot's runtime dependencies: each module that the robot's side of
the package (the nodes, the one-process bringup, the command line's parser, the launch file) imports,
outside the standard library, maps to an exec_depend (a ROS package or a rosdep key), and no
exec_depend is a library only the cloud or the development tools import (Ray, matplotlib: setup.py's
cloud and all extras, edge_spec_ros/extras.py)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import yaml
from catkin_pkg.package import parse_package

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "edge_spec_ros"
# Python modules → rosdep keys (rosdistro's rosdep/python.yaml; the keys it lacks are in
# rosdep/edge_spec_ros.yaml)
PYTHON_KEYS = {
    "numpy": "python3-numpy",
    "scipy": "python3-scipy",
    "yaml": "python3-yaml",
    "zmq": "python3-zmq",
    "lz4": "python3-lz4",
    "cv2": "python3-opencv",
    "PIL": "python3-pil",
    "matplotlib": "python3-matplotlib",
    "tqdm": "python3-tqdm",
    "torch": "python3-torch",
    "transformers": "python3-transformers-pip",
    "tokenizers": "python3-tokenizers-pip",
    "safetensors": "python3-safetensors-pip",
    "rosbags": "python3-rosbags-pip",
    "bm25s": "python3-bm25s-pip",
    "xgrammar": "python3-xgrammar-pip",
    "torchao": "python3-torchao-pip",
    "ray": "python3-ray-pip",
}
# ROS packages that are Python modules of the same name
ROS_MODULES = {"rclpy", "launch", "launch_ros", "ament_index_python"}
# where the robot's side starts: every node module, the one-process bringup, the command line (its
# module and the modules its parser reads defaults from: `edge-spec-ros --help` on the robot)
ROBOT_ENTRIES = ("edge_spec_ros.nodes", "edge_spec_ros.bringup", "edge_spec_ros.cli")
# only the cloud's and the development tools' installs have these (setup.py's cloud and all extras)
NOT_ROBOT = {"ray", "matplotlib", "tqdm"}


def dotted(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {dotted(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, skip_functions: bool = False) -> list[str]:
    """Every module ``path`` imports (inside functions too, unless ``skip_functions``), relative
    imports resolved; ``from edge_spec_ros.x import y`` names ``edge_spec_ros.x.y`` where that is a
    module. ``extras.require(module, "robot", ...)`` imports ``module``; a require of another extra is
    the other side's optional import, not the robot's (nor are the file's imports of its submodules)."""
    name = dotted(path) if path.suffix == ".py" and path.is_relative_to(PACKAGE) else ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if skip_functions and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(child, ast.Import):
                found.extend(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                found.append(base)
                found.extend(f"{base}.{alias.name}" for alias in child.names if f"{base}.{alias.name}" in MODULES)
            elif (isinstance(child, ast.Call) and getattr(child.func, "id", "") == "require"
                  and [type(a) for a in child.args[:2]] == [ast.Constant, ast.Constant]
                  and child.args[1].value == "robot"):
                found.append(child.args[0].value)  # extras.require of a module of the robot's install
            visit(child)

    tree = ast.parse(path.read_text(), str(path))
    visit(tree)
    # a module required of another extra is guarded in this file: its submodules' imports too
    guarded = {call.args[0].value.split(".")[0] for call in ast.walk(tree)
               if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "require"
               and [type(a) for a in call.args[:2]] == [ast.Constant, ast.Constant] and call.args[1].value != "robot"}
    return [name for name in found if name.split(".")[0] not in guarded]


def robot_imports() -> dict[str, str]:
    """Top-level module → the first robot-side file importing it: the closure of ROBOT_ENTRIES over the
    package's imports (module level and inside functions; ``cli`` at module level and in its parser), and
    the launch files."""
    files: dict[str, str] = {}
    seen: set[str] = set()
    stack = [m for m in MODULES if any(m == e or m.startswith(e + ".") for e in ROBOT_ENTRIES)]
    while stack:
        module = stack.pop()
        if module in seen:
            continue
        seen.add(module)
        parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
        stack += [p for p in parents if p in MODULES]
        path = MODULES[module]
        if module == "edge_spec_ros.cli":
            tree = ast.parse(path.read_text())
            parser = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_parser")
            names = imports_of(path, skip_functions=True) + [
                n.module for n in ast.walk(parser) if isinstance(n, ast.ImportFrom) and n.module]
        else:
            names = imports_of(path)
        for name in names:
            if name.startswith("edge_spec_ros."):
                while name not in MODULES:
                    name = name.rpartition(".")[0]
                stack.append(name)
            elif name != "edge_spec_ros":
                files.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    for path in sorted((REPO / "launch").glob("*.py")):
        for name in imports_of(path):
            files.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return files


def rosdep_key(module: str) -> str:
    if module in PYTHON_KEYS:
        return PYTHON_KEYS[module]
    if module in ROS_MODULES or module.endswith(("_msgs", "_interfaces")):
        return module
    raise AssertionError(f"no rosdep key known for the module {module!r}: add it to package.xml and to PYTHON_KEYS")


def test_package_xml_is_valid_format_3_with_ament_cmake():
    package = parse_package(str(REPO / "package.xml"))
    package.validate()
    assert package.package_format == 3 and package.name == "edge_spec_ros"
    assert package.get_build_type() == "ament_cmake"
    assert "rosidl_interface_packages" in [g.name for g in package.member_of_groups]


def test_every_module_the_robot_imports_is_an_exec_depend():
    package = parse_package(str(REPO / "package.xml"))
    runtime = {d.name for d in package.exec_depends} | {d.name for d in package.build_export_depends}
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    modules = {m: f for m, f in robot_imports().items() if m not in stdlib}
    # the scan sees the robot's imports, and none of the cloud's or the development tools'
    assert {"lz4", "zmq", "rclpy", "torch", "cv2", "scipy", "rosbags", "launch_ros"} <= set(modules)
    assert not NOT_ROBOT & set(modules), {m: modules[m] for m in NOT_ROBOT & set(modules)}
    missing = {f"{rosdep_key(m)} (import {m}, {f})" for m, f in modules.items() if rosdep_key(m) not in runtime}
    assert not missing, f"package.xml lacks exec_depends: {sorted(missing)}"


def test_no_exec_depend_is_a_library_the_robot_does_not_import():
    package = parse_package(str(REPO / "package.xml"))
    python = {d.name for d in package.exec_depends if d.name.startswith("python3-")}
    imported = {rosdep_key(m) for m in robot_imports() if m in PYTHON_KEYS}
    assert python - imported == set(), "exec_depends of libraries only the cloud or the development tools import"
    assert not {PYTHON_KEYS[m] for m in NOT_ROBOT} & python


def test_rosdep_rules_cover_the_keys_rosdistro_lacks():
    rules = yaml.safe_load((REPO / "rosdep" / "edge_spec_ros.yaml").read_text())
    package = parse_package(str(REPO / "package.xml"))
    runtime = {d.name for d in package.exec_depends}
    assert {"python3-lz4", "python3-tokenizers-pip", "python3-safetensors-pip", "python3-bm25s-pip"} <= set(rules)
    assert set(rules) <= runtime
    for key, rule in rules.items():
        assert {"debian", "ubuntu"} <= set(rule) or "*" in rule, key
