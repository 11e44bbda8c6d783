# pip installs the package from here (the development virtual environment: `make venv`); colcon builds
# it with CMakeLists.txt, package.xml's build type being ament_cmake (docs/ros_package.md).
from setuptools import find_packages, setup

package_name = "edge_spec_ros"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(include=[package_name, f"{package_name}.*"]),
    package_data={package_name: ["assets/tokenizer/*.json", "assets/sim_pair/*.json", "assets/sim_pair/*/*.json",
                                 "assets/sim_pair/*/*.jinja", "assets/sim_pair/*/*.safetensors",
                                 "assets/sim_pair/*/*.png", "bench/data/*.json"]},
    python_requires=">=3.10",
    zip_safe=False,
    maintainer="edge_spec_ros maintainers",
    maintainer_email="maintainers@edge-spec-ros.invalid",
    description="Edge-cloud speculative decoding of a Qwen2-VL navigation policy for ROS 2 robots",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "edge-spec-ros = edge_spec_ros.cli:main",
            "camera_node = edge_spec_ros.nodes.camera_node:main",
            "drafter_node = edge_spec_ros.nodes.drafter_node:main",
            "bridge_node = edge_spec_ros.nodes.bridge_node:main",
            "action_node = edge_spec_ros.nodes.action_node:main",
            "bag_replay_node = edge_spec_ros.nodes.bag_replay_node:main",
            "sim_node = edge_spec_ros.nodes.sim_node:main",
            "navigate_node = edge_spec_ros.nodes.navigate_node:main",
            "memory_node = edge_spec_ros.nodes.memory_node:main",
        ],
    },
)
