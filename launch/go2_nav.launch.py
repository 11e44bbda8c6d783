"""Bring up the robot side of edge_spec_ros on a Unitree Go2 (or in simulation).

    ros2 launch edge_spec_ros go2_nav.launch.py verifier_endpoint:=tcp://10.0.0.5:5555
    ros2 topic pub --once /instruction std_msgs/msg/String "data: 'find the silver bottle'"

The verifier runs in the cloud: `edge-spec-ros serve --verifier Qwen/Qwen2-VL-7B-Instruct ...`.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition, UnlessCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description():
    default_params = os.path.join(get_package_share_directory("edge_spec_ros"), "config", "go2_nav.yaml")
    params_file = LaunchConfiguration("params_file")
    use_sim = LaunchConfiguration("use_sim")
    return LaunchDescription([
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="YAML with the nodes' parameters (node_name: ros__parameters:)"),
        DeclareLaunchArgument("verifier_endpoint", default_value="tcp://127.0.0.1:5555",
                              description="ZeroMQ endpoint of the cloud verifier (edge-spec-ros serve)"),
        DeclareLaunchArgument("camera_source", default_value="0",
                              description="camera: OpenCV device index, video file or image folder"),
        DeclareLaunchArgument("use_sim", default_value="false",
                              description="true: the simulated room (sim_node) instead of the robot and its camera"),
        DeclareLaunchArgument("mode", default_value="fsd",
                              description="decoding mode: ar | sd | fsd | dssd | tkslt | lowpay | pico | pico-fsd"),
        DeclareLaunchArgument("cmd_vel_topic", default_value="cmd_vel",
                              description="where velocity commands go (e.g. a twist_mux input)"),
        Node(package="edge_spec_ros", executable="camera_node", name="camera", output="screen",
             parameters=[params_file, {"source": ParameterValue(LaunchConfiguration("camera_source"), value_type=str)}],
             condition=UnlessCondition(use_sim)),
        Node(package="edge_spec_ros", executable="sim_node", name="sim", output="screen",
             parameters=[params_file], condition=IfCondition(use_sim)),
        Node(package="edge_spec_ros", executable="bridge_node", name="bridge", output="screen",
             parameters=[params_file, {"verifier_endpoint": LaunchConfiguration("verifier_endpoint")}]),
        Node(package="edge_spec_ros", executable="drafter_node", name="drafter", output="screen",
             parameters=[params_file, {"mode": LaunchConfiguration("mode")}]),
        Node(package="edge_spec_ros", executable="action_node", name="action", output="screen",
             parameters=[params_file],
             remappings=[("cmd_vel", LaunchConfiguration("cmd_vel_topic"))]),
    ])
