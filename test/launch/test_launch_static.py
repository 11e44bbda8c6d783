"""The launch file, checked without ``ros2 launch`` (``launch`` and ``launch_ros`` are not installable
here): it runs against small stand-ins of the launch classes it uses, which record what each node would
get — executable, name, namespace, parameters files and overrides, remappings, arguments.

Every executable is a console script and an installed program; every parameter the launch file or the
YAML sets is declared by its node; every argument has a description and is used; without arguments the
YAML alone decides; each argument changes exactly what it names; a camera, or a node on the way from an
instruction to a velocity command, that exits ends the launch; nav2's lifecycle manager's file names the
launch's managed nodes.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest
import rclpy
import yaml

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "launch" / "go2_nav.launch.py"
YAML = ROOT / "config" / "go2_nav.yaml"
SHARE = str(ROOT)  # what the stand-in ament index answers: the share directory has the same config/


# --- stand-ins for the launch API ------------------------------------------------------------------
class LaunchConfiguration:
    def __init__(self, name: str) -> None:
        self.name = name

    def perform(self, context) -> str:
        context.read.add(self.name)
        return context.launch_configurations[self.name]


class DeclareLaunchArgument:
    def __init__(self, name: str, default_value: str | None = None, description: str = "",
                 choices: list[str] | None = None) -> None:
        self.name, self.default_value, self.description, self.choices = name, default_value, description, choices


class OpaqueFunction:
    def __init__(self, function) -> None:
        self.function = function


class Shutdown:
    def __init__(self, reason: str = "") -> None:
        self.reason = reason


class LaunchDescription:
    def __init__(self, entities) -> None:
        self.entities = list(entities)


class Node:
    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs


@dataclasses.dataclass
class ParameterValue:
    value: object
    value_type: type | None = None


def load_launch_module():
    """Import the launch file with the stand-ins in place of launch, launch_ros and the ament index."""
    fakes = {
        "launch": types.SimpleNamespace(LaunchDescription=LaunchDescription),
        "launch.actions": types.SimpleNamespace(DeclareLaunchArgument=DeclareLaunchArgument,
                                                OpaqueFunction=OpaqueFunction, Shutdown=Shutdown),
        "launch.substitutions": types.SimpleNamespace(LaunchConfiguration=LaunchConfiguration),
        "launch_ros": types.SimpleNamespace(),
        "launch_ros.actions": types.SimpleNamespace(Node=Node),
        "launch_ros.parameter_descriptions": types.SimpleNamespace(ParameterValue=ParameterValue),
        "ament_index_python": types.SimpleNamespace(),
        "ament_index_python.packages": types.SimpleNamespace(get_package_share_directory=lambda package: SHARE),
    }
    saved = {name: sys.modules.get(name) for name in fakes}
    sys.modules.update({name: types.ModuleType(name) for name in fakes})
    for name, namespace in fakes.items():
        sys.modules[name].__dict__.update(vars(namespace))
    try:
        spec = importlib.util.spec_from_file_location("go2_nav_launch", LAUNCH)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        for name, module_before in saved.items():
            if module_before is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module_before


MODULE = load_launch_module()


class Context:
    def __init__(self, configurations: dict[str, str]) -> None:
        self.launch_configurations = configurations
        self.read: set[str] = set()


def declared_arguments() -> dict[str, DeclareLaunchArgument]:
    description = MODULE.generate_launch_description()
    return {e.name: e for e in description.entities if isinstance(e, DeclareLaunchArgument)}


def launch(**given: str) -> tuple[dict[str, dict], Context]:
    """Run the launch description as ``ros2 launch ... name:=value`` would: node name → Node kwargs."""
    description = MODULE.generate_launch_description()
    args = declared_arguments()
    configurations = {name: a.default_value for name, a in args.items()}
    for name, value in given.items():
        assert name in args, f"no launch argument {name}"
        if args[name].choices is not None and value not in args[name].choices:
            raise ValueError(f"{name}:={value} not in {args[name].choices}")
        configurations[name] = value
    context = Context(configurations)
    nodes = {}
    for entity in description.entities:
        if isinstance(entity, OpaqueFunction):
            for node in entity.function(context):
                nodes[node.kwargs["name"]] = node.kwargs
    return nodes, context


def overrides(node: dict) -> dict:
    """The parameter overrides a node gets besides the parameters file (first)."""
    params = node["parameters"]
    assert params[0] == f"{SHARE}/config/go2_nav.yaml" or params[0].endswith(".yaml")
    return {k: v for item in params[1:] for k, v in item.items()}


ALL_LAUNCHES = [{}, {"use_sim": "true"}]


def declared(executable: str) -> set[str]:
    module = importlib.import_module(f"edge_spec_ros.nodes.{executable}")
    return {f.name for cls in module.PARAMETER_CONFIGS for f in dataclasses.fields(cls)} | {"use_sim_time"}


# --- the package: executables, parameters, YAML -----------------------------------------------------
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
    # the list may be a variable set just before: install(PROGRAMS ${_executables} ...)
    for name in re.findall(r"\$\{(\w+)\}", block):
        block = block.replace(f"${{{name}}}", re.search(rf"set\({name}(.*?)\)", text, re.S).group(1))
    return {Path(p).name for p in block.split()}


def test_every_executable_is_a_console_script_and_installed():
    scripts = console_scripts()
    programs = cmake_programs()
    nodes = [n for given in ALL_LAUNCHES for n in launch(**given)[0].values()]
    assert {n["executable"] for n in nodes} == {"camera_node", "sim_node", "bridge_node", "drafter_node", "action_node",
                                                "navigate_node", "memory_node"}
    for node in nodes:
        exe = node["executable"]
        assert node["package"] == "edge_spec_ros"
        assert scripts.get(exe) == f"edge_spec_ros.nodes.{exe}:main", exe
        assert exe in programs and (ROOT / "scripts" / exe).is_file(), exe
        assert f"from edge_spec_ros.nodes.{exe} import main" in (ROOT / "scripts" / exe).read_text()


def test_every_launch_parameter_is_declared_by_its_node():
    every_argument = {"camera_source": "0", "verifier_endpoint": "tcp://10.0.0.5:5555", "mode": "sd",
                      "use_sim_time": "true", "memory_dir": "/data/memory", "autostart": "false"}
    for extra in ({}, {"use_sim": "true"}):
        for node in launch(**every_argument, **extra)[0].values():
            undeclared = set(overrides(node)) - declared(node["executable"])
            assert not undeclared, f"{node['executable']} does not declare {undeclared}"


def test_yaml_sets_only_declared_parameters_of_launched_nodes():
    config = yaml.safe_load(YAML.read_text())
    by_name = {name: n["executable"] for given in ALL_LAUNCHES for name, n in launch(**given)[0].items()}
    for name, section in config.items():
        assert name in by_name, f"{name} in the YAML is not a node of the launch file"
        undeclared = set(section["ros__parameters"]) - declared(by_name[name])
        assert not undeclared, f"{name}: {undeclared} not declared"


def test_yaml_values_fit_the_config_dataclasses():
    """The YAML builds valid configs (types and validation of each node's dataclasses)."""
    config = yaml.safe_load(YAML.read_text())
    by_name = {name: n["executable"] for given in ALL_LAUNCHES for name, n in launch(**given)[0].items()}
    for name, section in config.items():
        module = importlib.import_module(f"edge_spec_ros.nodes.{by_name[name]}")
        values = section["ros__parameters"]
        for cls in module.PARAMETER_CONFIGS:
            fields = {f.name for f in dataclasses.fields(cls)}
            cls(**{k: v for k, v in values.items() if k in fields})


# --- the arguments -----------------------------------------------------------------------------------
REQUIRED_ARGUMENTS = {"params_file", "namespace", "use_sim_time", "use_sim", "use_camera", "image_topic",
                      "camera_source", "verifier_endpoint", "mode", "cmd_vel_topic", "log_level", "use_memory",
                      "memory_dir", "autostart"}


def test_launch_arguments_are_described_used_and_their_choices_hold_their_defaults():
    args = declared_arguments()
    assert set(args) == REQUIRED_ARGUMENTS
    for name, a in args.items():
        assert isinstance(a.description, str) and len(a.description) > 20, name
        assert a.choices is None or a.default_value in a.choices, name
    assert set().union(*(launch(**given)[1].read for given in ALL_LAUNCHES)) == REQUIRED_ARGUMENTS  # all used
    assert args["params_file"].default_value == f"{SHARE}/config/go2_nav.yaml"
    with pytest.raises(ValueError, match="not in"):
        launch(use_sim="maybe")


def test_without_arguments_the_yaml_decides():
    nodes, _ = launch()
    assert set(nodes) == {"camera", "bridge", "drafter", "action", "navigate", "memory"}
    for name, node in nodes.items():
        assert node["parameters"] == [f"{SHARE}/config/go2_nav.yaml"], name  # the YAML only, no override
        # velocity goes to a twist_mux input of its own, not to nav2's cmd_vel
        assert node.get("remappings", []) == ([("cmd_vel", "cmd_vel_vlm")] if name == "action" else []), name
        assert node["namespace"] == "" and node["arguments"] == [], name


def test_each_argument_changes_what_it_names_and_nothing_else():
    base, _ = launch()
    cases = [
        ({"camera_source": "0"}, {"camera": {"source": ParameterValue("0", value_type=str)}}),
        ({"camera_source": "/dev/video2"}, {"camera": {"source": ParameterValue("/dev/video2", value_type=str)}}),
        ({"verifier_endpoint": "tcp://10.0.0.5:5555"}, {"bridge": {"verifier_endpoint": "tcp://10.0.0.5:5555"},
                                                        "drafter": {"verifier_endpoint": "tcp://10.0.0.5:5555"}}),
        ({"mode": "sd"}, {"drafter": {"mode": "sd"}}),
        ({"mode": "dragon"}, {"drafter": {"mode": "dragon"}}),
        ({"memory_dir": "/data/memory"}, {"memory": {"memory_dir": "/data/memory"},
                                          "drafter": {"memory_dir": "/data/memory"}}),
        ({"autostart": "false"}, {name: {"autostart": False} for name in ("bridge", "drafter", "action")}),
        ({"autostart": "true"}, {name: {"autostart": True} for name in ("bridge", "drafter", "action")}),
        ({"use_sim_time": "true"}, {name: {"use_sim_time": True} for name in base}),
        ({"use_sim_time": "false"}, {name: {"use_sim_time": False} for name in base}),
    ]
    for given, expected in cases:
        nodes, _ = launch(**given)
        assert set(nodes) == set(base), given
        for name, node in nodes.items():
            assert overrides(node) == expected.get(name, {}), (given, name)
            assert node.get("remappings", []) == base[name].get("remappings", []), (given, name)


def test_topic_arguments_remap_the_nodes_that_use_them():
    nodes, _ = launch(image_topic="/camera/color/image_raw", cmd_vel_topic="/twist_mux/nav")
    images = [("camera/image_raw", "/camera/color/image_raw"),
              ("camera/image_raw/compressed", "/camera/color/image_raw/compressed")]
    assert nodes["camera"]["remappings"] == images and nodes["drafter"]["remappings"] == images
    assert nodes["action"]["remappings"] == [("cmd_vel", "/twist_mux/nav")]
    assert nodes["bridge"].get("remappings", []) == [] and nodes["navigate"].get("remappings", []) == []
    sim, _ = launch(use_sim="true", image_topic="/camera/color/image_raw", cmd_vel_topic="/twist_mux/nav")
    assert sim["sim"]["remappings"] == images + [("cmd_vel", "/twist_mux/nav")]  # the room moves on that topic


def test_use_sim_use_camera_and_sim_time():
    sim, _ = launch(use_sim="true")
    assert set(sim) == {"sim", "bridge", "drafter", "action", "navigate", "memory"}
    same_type = {"cmd_vel_type": "Twist"}  # the room takes the action node's type (the YAML's)
    # the sim owns /clock
    assert all(overrides(n) == {"use_sim_time": True, **(same_type if k == "sim" else {})} for k, n in sim.items())
    sim_wall, _ = launch(use_sim="true", use_sim_time="false")
    assert all(overrides(n) == {"use_sim_time": False, **(same_type if k == "sim" else {})}
               for k, n in sim_wall.items())
    no_camera, _ = launch(use_camera="false")
    assert set(no_camera) == {"bridge", "drafter", "action", "navigate", "memory"}  # the robot's driver publishes frames
    no_memory, _ = launch(use_memory="false")
    assert set(no_memory) == {"camera", "bridge", "drafter", "action", "navigate"}


def test_log_level_and_namespace_reach_every_node(tmp_path):
    nodes, _ = launch(log_level="debug", namespace="go2")
    for name, node in nodes.items():
        assert node["arguments"] == ["--ros-args", "--log-level", "debug"], name
        assert node["namespace"] == "go2", name
    # the parameters file is rewritten so its sections still reach the nodes inside the namespace
    rewritten = nodes["camera"]["parameters"][0]
    assert all(n["parameters"][0] == rewritten for n in nodes.values())
    original = yaml.safe_load(YAML.read_text())
    assert yaml.safe_load(Path(rewritten).read_text()) == {f"/**/{k}": v for k, v in original.items()}
    Path(rewritten).unlink()


def test_the_rewritten_parameters_file_reaches_namespaced_nodes(tmp_path):
    """With rcl itself: a section ``camera:`` misses the node /go2/camera; ``/**/camera:`` reaches it."""
    rewritten = MODULE.namespaced_params_file(str(YAML), "go2")
    expected = yaml.safe_load(YAML.read_text())["camera"]["ros__parameters"]["rate_hz"]
    for path, reaches in ((str(YAML), False), (rewritten, True)):
        context = rclpy.Context()
        rclpy.init(args=["--ros-args", "--params-file", path], context=context)
        try:
            node = rclpy.create_node("camera", namespace="go2", context=context,
                                     automatically_declare_parameters_from_overrides=True)
            assert node.has_parameter("rate_hz") == reaches, path
            if reaches:
                assert node.get_parameter("rate_hz").value == expected
            node.destroy_node()
        finally:
            rclpy.shutdown(context=context)
    Path(rewritten).unlink()


def test_a_node_on_the_way_to_a_velocity_command_that_exits_ends_the_launch():
    """The exit policy: the camera and every node from an instruction to a velocity command end the
    launch when they exit (no respawn); the memory node and the simulated room do not."""
    for given in ALL_LAUNCHES:
        nodes, _ = launch(**given)
        ending = {"bridge", "drafter", "action", "navigate"} | ({"camera"} if "camera" in nodes else set())
        for name in ending:
            (action,) = nodes[name]["on_exit"]
            assert isinstance(action, Shutdown) and f"the {name} node exited" == action.reason, name
        assert all("on_exit" not in n for name, n in nodes.items() if name not in ending), given


def test_the_navigate_action_and_describe_service_come_up_with_the_stack():
    """navigate_node (the Navigate action) runs beside the drafter, whose Describe service it does not
    need; both are in the launch with and without the simulated room, namespaced like the others."""
    for given in ALL_LAUNCHES:
        nodes, _ = launch(**given)
        assert nodes["navigate"]["executable"] == "navigate_node" and "drafter" in nodes
    spaced, _ = launch(namespace="go2", use_sim_time="true")
    assert spaced["navigate"]["namespace"] == "go2" and overrides(spaced["navigate"]) == {"use_sim_time": True}
    assert "navigate_node" in console_scripts() and "navigate_node" in cmake_programs()


def test_the_memory_node_comes_up_with_the_stack_and_shares_its_directory_with_the_drafter():
    """memory_node writes what mode dragon's drafter reads: one directory for both, in the YAML and from
    the memory_dir argument; its odometry is the action node's."""
    config = yaml.safe_load(YAML.read_text())
    memory, drafter = config["memory"]["ros__parameters"], config["drafter"]["ros__parameters"]
    assert memory["memory_dir"] == drafter["memory_dir"]
    assert memory["odom_topic"] == config["action"]["ros__parameters"]["odom_topic"]
    assert drafter["verifier_endpoint"] == config["bridge"]["ros__parameters"]["verifier_endpoint"]
    for given in ALL_LAUNCHES:
        nodes, _ = launch(**given)
        assert nodes["memory"]["executable"] == "memory_node"
    assert "memory_node" in console_scripts() and "memory_node" in cmake_programs()


def test_nav2s_lifecycle_manager_owns_every_managed_node_of_the_launch():
    """config/lifecycle_manager.yaml names exactly the launched nodes that are managed (those with an
    ``autostart`` parameter), the bridge first (configured and activated first: the drafter decides
    through it) and the action node last (deactivated first: zero velocity), without nav2's bond."""
    config = yaml.safe_load((ROOT / "config" / "lifecycle_manager.yaml").read_text())
    (manager,) = config.values()
    params = manager["ros__parameters"]
    names = params["node_names"]
    for given in ALL_LAUNCHES:
        nodes, _ = launch(**given)
        managed = {name for name, node in nodes.items() if "autostart" in declared(node["executable"])}
        assert set(names) == managed and len(names) == len(managed), (names, managed, given)
    assert names[0] == "bridge" and names[-1] == "action", names
    assert params["autostart"] is True and params["bond_timeout"] == 0.0
