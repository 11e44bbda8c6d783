"""The launch file, checked statically (``ros2 launch`` is not installable here).

Every executable it names is a console script of the package (and an installed program of the
ament_cmake build), every parameter it passes or the YAML sets is declared by that node, and every
launch argument has a description.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "launch" / "go2_nav.launch.py"
YAML = ROOT / "config" / "go2_nav.yaml"


def console_scripts() -> dict[str, str]:
    """name → module:function from setup.py's entry points."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    scripts = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[\w-]+ = [\w.]+:\w+", node.value):
            name, target = node.value.split(" = ")
            scripts[name] = target
    return scripts


def cmake_programs() -> set[str]:
    text = (ROOT / "CMakeLists.txt").read_text()
    block = re.search(r"install\(PROGRAMS(.*?)DESTINATION", text, re.S).group(1)
    return {Path(p).name for p in block.split()}


def launch_nodes() -> list[dict]:
    """The keyword arguments of every Node(...) call: executable, name, parameter keys."""
    nodes = []
    for call in ast.walk(ast.parse(LAUNCH.read_text())):
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Node":
            kw = {k.arg: k.value for k in call.keywords}
            keys = set()
            for item in getattr(kw.get("parameters"), "elts", []):
                if isinstance(item, ast.Dict):
                    keys |= {k.value for k in item.keys}
            nodes.append({"executable": kw["executable"].value, "name": kw["name"].value, "params": keys})
    return nodes


def declared(executable: str) -> set[str]:
    module = importlib.import_module(f"edge_spec_ros.nodes.{executable}")
    return {f.name for cls in module.PARAMETER_CONFIGS for f in dataclasses.fields(cls)}


def test_every_executable_is_a_console_script_and_installed():
    scripts = console_scripts()
    programs = cmake_programs()
    nodes = launch_nodes()
    assert {n["executable"] for n in nodes} == {"camera_node", "sim_node", "bridge_node", "drafter_node", "action_node"}
    for node in nodes:
        exe = node["executable"]
        assert scripts.get(exe) == f"edge_spec_ros.nodes.{exe}:main", exe
        assert exe in programs and (ROOT / "scripts" / exe).is_file(), exe
        assert f"from edge_spec_ros.nodes.{exe} import main" in (ROOT / "scripts" / exe).read_text()


def test_every_launch_parameter_is_declared_by_its_node():
    for node in launch_nodes():
        undeclared = node["params"] - declared(node["executable"])
        assert not undeclared, f"{node['executable']} does not declare {undeclared}"


def test_yaml_sets_only_declared_parameters_of_launched_nodes():
    config = yaml.safe_load(YAML.read_text())
    by_name = {n["name"]: n["executable"] for n in launch_nodes()}
    for name, section in config.items():
        assert name in by_name, f"{name} in the YAML is not a node of the launch file"
        params = set(section["ros__parameters"])
        undeclared = params - declared(by_name[name])
        assert not undeclared, f"{name}: {undeclared} not declared"


def test_launch_arguments_are_described_and_used():
    tree = ast.parse(LAUNCH.read_text())
    declared_args, used = {}, set()
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "DeclareLaunchArgument":
            kw = {k.arg: k.value for k in call.keywords}
            declared_args[call.args[0].value] = kw.get("description")
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "LaunchConfiguration":
            used.add(call.args[0].value)
    assert {"params_file", "verifier_endpoint", "camera_source", "use_sim"} <= set(declared_args)
    for name, description in declared_args.items():
        assert isinstance(description, ast.Constant) and len(description.value) > 10, name
    assert set(declared_args) == used


def test_yaml_values_fit_the_config_dataclasses():
    """The YAML builds valid configs (types and validation of each node's dataclasses)."""
    config = yaml.safe_load(YAML.read_text())
    by_name = {n["name"]: n["executable"] for n in launch_nodes()}
    for name, section in config.items():
        module = importlib.import_module(f"edge_spec_ros.nodes.{by_name[name]}")
        values = section["ros__parameters"]
        for cls in module.PARAMETER_CONFIGS:
            fields = {f.name for f in dataclasses.fields(cls)}
            cls(**{k: v for k, v in values.items() if k in fields})
