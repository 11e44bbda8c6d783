# pip installs the package from here; colcon builds it with CMakeLists.txt, package.xml's build type
# being ament_cmake (docs/ros_package.md).
#
#   pip install '.[robot]'   the robot: nodes, drafter, messages (ROS 2 itself from the robot's ROS install)
#   pip install '.[cloud]'   the verifier on a GPU machine
#   pip install '.[all]'     both, with the benchmarks' and training's plots (`make venv` installs
#                            requirements.txt, a superset, and this tree with --no-deps)
#
# torch comes first, installed on its own: the machine's build (CUDA on the cloud, NVIDIA's wheel for
# JetPack on a Jetson, torch==2.13.0's CPU build in the development environment). It is named here
# without a version so that pip keeps the one installed; pip would fetch PyPI's default build otherwise.
#
# Versions are ranges, from the oldest release a tested environment pins (requirements-*.txt with
# Python 3.11, requirements-jazzy.txt with Python 3.10) to the next major release (the next minor one
# for 0.x releases): an install goes into a Python that already has a ROS install's packages, and
# exact pins would replace them or not exist for its Python (numpy 2.4 needs Python 3.11). The exact
# tested releases are requirements-*.txt, for `pip install -r requirements-robot.txt '.[robot]'`;
# test/packaging/test_installs.py checks that every pin lies in its range and what each install imports.
from setuptools import find_packages, setup

package_name = "edge_spec_ros"

# what both sides import (edge_spec_ros/extras.py: the core)
CORE = [
    "torch",
    "transformers>=5.20.2,<6",
    "tokenizers>=0.23.3,<0.24",
    "safetensors>=0.8.0,<0.9",
    "numpy>=2.2.6,<3",
    "pillow>=12.3.0,<14",
    "pyzmq>=27.3.0,<28",
    "lz4>=4.4.5,<5",
    "bm25s>=0.3.16,<0.4",
    "xgrammar>=0.2.8,<0.3",  # both sides mask their distributions with the same grammar (models/grammar.py)
    "torchao>=0.18.0,<0.19",  # the drafter's quantization schemes (models/quantize.py)
]
# what each side adds (edge_spec_ros/extras.py: MODULES names what they are imported as)
ROBOT = [
    "scipy>=1.15.3,<2",
    "opencv-python-headless>=5.0.0.93,<6",
    "pyyaml>=6.0.3,<7",
    "rosbags>=0.11.9,<0.12",
]
CLOUD = [
    "ray>=2.60.0,<3",
]
DEV = [
    "matplotlib>=3.10.9,<4",
    "tqdm>=4.70.1,<5",
]
EXTRAS = {"robot": ROBOT, "cloud": CLOUD, "all": ROBOT + CLOUD + DEV}

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(include=[package_name, f"{package_name}.*"]),
    package_data={package_name: ["assets/tokenizer/*.json", "assets/sim_pair/*.json", "assets/sim_pair/*/*.json",
                                 "assets/sim_pair/*/*.jinja", "assets/sim_pair/*/*.safetensors",
                                 "assets/sim_pair/*/*.png", "dragon/bench/data/*.json"]},
    python_requires=">=3.10",
    zip_safe=False,
    maintainer="edge_spec_ros maintainers",
    maintainer_email="maintainers@edge-spec-ros.invalid",
    description="Edge-cloud speculative decoding of a Qwen2-VL navigation policy for ROS 2 robots",
    license="Apache-2.0",
    install_requires=CORE,
    extras_require=EXTRAS,
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
