"""package.xml is valid and names every runtime dependency: each module the package or its launch file
imports, outside the standard library, maps to an exec_depend (a ROS package or a rosdep key)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import yaml
from catkin_pkg.package import parse_package

REPO = Path(__file__).resolve().parents[2]
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
    "ray": "python3-ray-pip",
}
# ROS packages that are Python modules of the same name
ROS_MODULES = {"rclpy", "launch", "launch_ros", "ament_index_python"}


def imported_modules() -> dict[str, str]:
    """Top-level module → the first file importing it, over edge_spec_ros/ and launch/."""
    found: dict[str, str] = {}
    for path in sorted([*(REPO / "edge_spec_ros").rglob("*.py"), *(REPO / "launch").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return found


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


def test_every_imported_module_is_an_exec_depend():
    package = parse_package(str(REPO / "package.xml"))
    runtime = {d.name for d in package.exec_depends} | {d.name for d in package.build_export_depends}
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    modules = {m: f for m, f in imported_modules().items() if m not in stdlib and m != "edge_spec_ros"}
    assert {"lz4", "zmq", "rclpy", "torch"} <= set(modules)  # the scan sees the package's imports
    missing = {f"{rosdep_key(m)} (import {m}, {f})" for m, f in modules.items() if rosdep_key(m) not in runtime}
    assert not missing, f"package.xml lacks exec_depends: {sorted(missing)}"


def test_rosdep_rules_cover_the_keys_rosdistro_lacks():
    rules = yaml.safe_load((REPO / "rosdep" / "edge_spec_ros.yaml").read_text())
    package = parse_package(str(REPO / "package.xml"))
    runtime = {d.name for d in package.exec_depends}
    assert {"python3-lz4", "python3-tokenizers-pip", "python3-safetensors-pip", "python3-bm25s-pip"} <= set(rules)
    assert set(rules) <= runtime
    for key, rule in rules.items():
        assert {"debian", "ubuntu"} <= set(rule) or "*" in rule, key
