"""Bring up the robot side of edge_spec_ros on a Unitree Go2 (or in simulation).

    ros2 launch edge_spec_ros go2_nav.launch.py verifier_endpoint:=tcp://10.0.0.5:5555
    ros2 topic pub --once -w 1 /instruction std_msgs/msg/String "data: 'find the silver bottle'"
    ros2 action send_goal --feedback /navigate edge_spec_ros/action/Navigate "{instruction: 'find the silver bottle'}"
    ros2 launch edge_spec_ros go2_nav.launch.py mode:=dragon   # questions answered on /edge_spec/answer
    ros2 service call /memory/add_note edge_spec_ros/srv/AddNote "{text: 'the charger is behind the sofa'}"

Every node reads its parameters from ``params_file`` (config/go2_nav.yaml); an argument given on the
command line overrides the one parameter (or topic) it names, and an argument left at its empty
default changes nothing, so the YAML decides. The verifier runs in the cloud:
``edge-spec-ros serve --verifier Qwen/Qwen2-VL-7B-Instruct ...`` (``--documents DIR`` for mode dragon).
memory_node writes the robot's memory (what it saw, was told, and notes), which mode dragon reads.
Velocity commands go to ``cmd_vel_vlm``, a twist_mux input of this package's own beside nav2's and the
joystick's (config/twist_mux_go2.yaml for go2_ros2_sdk); with ``use_sim`` the simulated room listens
there, with the action node's ``cmd_vel_type``.

Managed nodes: bridge, drafter and action node are lifecycle nodes (edge_spec_ros/nodes/managed.py).
By default each configures and activates itself at start-up; ``autostart:=false`` leaves them
unconfigured for nav2's lifecycle manager (config/lifecycle_manager.yaml) or ``ros2 lifecycle set``.

Exit policy: a node on the path from an instruction to a velocity command (bridge, drafter, action
node, navigate) or the camera that exits, crashed or not, shuts the whole launch down (``Shutdown``):
the other nodes get SIGINT, the action node ends a motion in progress with a final zero, and the
robot's twist_mux input times out. They are not respawned: a respawned action node has lost the
motion it was running and the watchdog's state, a respawned drafter reloads its models (tens of
seconds) and a respawned bridge its link, all while the rest of the stack carries on with decisions
half made; a crash is a bug to see, not to hide in a loop, and the robot's default in doubt is to
stop. memory_node only records: its exit is logged and the stack goes on without it.
"""

import os
import tempfile

import yaml
from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

LOG_LEVELS = ("debug", "info", "warn", "error", "fatal")
BOOLEANS = ("true", "false")


def arguments():
    """(name, default, description, choices or None) of every launch argument."""
    share = get_package_share_directory("edge_spec_ros")
    return [
        ("params_file", os.path.join(share, "config", "go2_nav.yaml"),
         "YAML with the nodes' parameters (node_name: ros__parameters:)", None),
        ("namespace", "", "namespace of every node and its relative topics (e.g. go2); empty: none", None),
        ("use_sim", "false", "true: the simulated room (sim_node) instead of the robot and its camera", BOOLEANS),
        ("use_sim_time", "", "true: every node follows /clock; empty: true with use_sim, else the YAML's",
         ("", *BOOLEANS)),
        ("use_camera", "true", "false: no camera_node (the robot's own camera driver publishes the frames)",
         BOOLEANS),
        ("image_topic", "", "topic of the camera frames (raw; compressed ones on <image_topic>/compressed), "
                            "remapped for camera, sim and drafter; empty: camera/image_raw", None),
        ("camera_source", "", "camera_node source: device index (0), /dev/video0, video file, image folder or "
                              "synthetic; empty: the YAML's", None),
        ("verifier_endpoint", "", "ZeroMQ endpoint of the cloud verifier (edge-spec-ros serve), e.g. "
                                  "tcp://10.0.0.5:5555, for the bridge and (mode dragon) the drafter; empty: the "
                                  "YAML's", None),
        ("mode", "", "decoding mode of the drafter, e.g. fsd, sd or ar, or dragon (questions answered from the "
                     "memory and the cloud's documents; the drafter names the valid ones when it refuses one); "
                     "empty: the YAML's", None),
        ("use_memory", "true", "false: no memory_node (nothing records the robot's memory, which mode dragon "
                               "reads)", BOOLEANS),
        ("memory_dir", "", "directory of the robot's memory (memory.jsonl), for memory_node and the drafter; "
                           "empty: the YAML's", None),
        ("cmd_vel_topic", "cmd_vel_vlm", "where the action node's velocity commands go (and, with use_sim, what "
                                         "the simulated room follows): a twist_mux input of its own "
                                         "(config/twist_mux_go2.yaml); cmd_vel: straight to the robot", None),
        ("log_level", "", "log level of every node (debug | info | warn | error | fatal); empty: info",
         ("", *LOG_LEVELS)),
        ("autostart", "", "the managed nodes (bridge, drafter, action) configure and activate themselves at "
                          "start-up (true) or wait, unconfigured, for a lifecycle manager (false); empty: the "
                          "YAML's (default true)", ("", *BOOLEANS)),
    ]


def namespaced_params_file(path: str, namespace: str) -> str:
    """``path`` itself without a namespace; else a copy whose node keys match the nodes in any namespace
    (``camera:`` → ``/**/camera:``: a key without namespace matches only ``/camera``)."""
    if not namespace:
        return path
    with open(path) as f:
        config = yaml.safe_load(f) or {}
    rewritten = {key if key.startswith("/") else f"/**/{key}": value for key, value in config.items()}
    with tempfile.NamedTemporaryFile("w", prefix="edge_spec_ros_", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(rewritten, f)
    return f.name


def action_cmd_vel_type(path: str) -> str:
    """The action node's ``cmd_vel_type`` in the parameters file ('' if it sets none: the node's default)."""
    with open(path) as f:
        config = yaml.safe_load(f) or {}
    for key in ("action", "/action", "/**/action"):
        value = ((config.get(key) or {}).get("ros__parameters") or {}).get("cmd_vel_type")
        if value:
            return str(value)
    return ""


def launch_nodes(context, *args, **kwargs):
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context).strip()

    namespace = arg("namespace").strip("/")
    params_file = namespaced_params_file(arg("params_file"), namespace)
    use_sim = arg("use_sim").lower() == "true"
    use_sim_time = arg("use_sim_time").lower() or ("true" if use_sim else "")
    image_topic, cmd_vel_topic, log_level = arg("image_topic"), arg("cmd_vel_topic"), arg("log_level")

    def parameters(**overrides):
        if use_sim_time:
            overrides["use_sim_time"] = use_sim_time == "true"
        return [params_file, overrides] if overrides else [params_file]

    image_remaps = [("camera/image_raw", image_topic), ("camera/image_raw/compressed", f"{image_topic}/compressed")] \
        if image_topic else []
    cmd_vel_remaps = [("cmd_vel", cmd_vel_topic)] if cmd_vel_topic else []
    common = {"package": "edge_spec_ros", "output": "screen", "namespace": namespace,
              "arguments": ["--ros-args", "--log-level", log_level] if log_level else []}

    def overrides_of(**pairs):
        return {name: value for name, value in pairs.items() if value}

    autostart = arg("autostart").lower()
    managed = {"autostart": autostart == "true"} if autostart else {}  # bridge, drafter, action

    def ends_launch(name: str) -> dict:
        """The exit policy of a node on the way to a velocity command: its exit ends the launch."""
        return {"on_exit": [Shutdown(reason=f"the {name} node exited")]}

    nodes = []
    if use_sim:  # the room follows the action node's commands: same topic, same type
        cmd_vel_type = action_cmd_vel_type(arg("params_file"))
        nodes.append(Node(executable="sim_node", name="sim",
                          parameters=parameters(**overrides_of(cmd_vel_type=cmd_vel_type)),
                          remappings=image_remaps + cmd_vel_remaps, **common))
    elif arg("use_camera").lower() == "true":
        source = arg("camera_source")
        # a device index stays a string ("0"): launch_ros would read a bare 0 as an integer
        camera = {"source": ParameterValue(source, value_type=str)} if source else {}
        nodes.append(Node(executable="camera_node", name="camera", parameters=parameters(**camera),
                          remappings=image_remaps, **ends_launch("camera"), **common))
    endpoint, memory_dir = arg("verifier_endpoint"), arg("memory_dir")
    nodes += [
        Node(executable="bridge_node", name="bridge",
             parameters=parameters(**managed, **overrides_of(verifier_endpoint=endpoint)),
             **ends_launch("bridge"), **common),
        Node(executable="drafter_node", name="drafter",
             parameters=parameters(**managed, **overrides_of(mode=arg("mode"), verifier_endpoint=endpoint,
                                                             memory_dir=memory_dir)),
             remappings=image_remaps, **ends_launch("drafter"), **common),
        Node(executable="action_node", name="action", parameters=parameters(**managed), remappings=cmd_vel_remaps,
             **ends_launch("action"), **common),
        # the Navigate action beside the instruction topic (cancel: "stop" on instruction)
        Node(executable="navigate_node", name="navigate", parameters=parameters(), **ends_launch("navigate"),
             **common),
    ]
    if arg("use_memory").lower() == "true":  # the robot's memory: decisions, instructions, notes with their pose
        nodes.append(Node(executable="memory_node", name="memory",
                          parameters=parameters(**overrides_of(memory_dir=memory_dir)), **common))
    return nodes


def generate_launch_description():
    declared = [DeclareLaunchArgument(name, default_value=default, description=description,
                                      **({"choices": list(choices)} if choices else {}))
                for name, default, description, choices in arguments()]
    return LaunchDescription([*declared, OpaqueFunction(function=launch_nodes)])
