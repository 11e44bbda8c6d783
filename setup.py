from setuptools import find_packages, setup

package_name = "edge_spec_ros"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(include=[package_name, f"{package_name}.*"]),
    package_data={package_name: ["assets/tokenizer/*.json"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{package_name}"]),
        (f"share/{package_name}", ["package.xml"]),
    ],
    python_requires=">=3.10",
    zip_safe=False,
    maintainer="edge_spec_ros maintainers",
    maintainer_email="maintainers@edge-spec-ros.invalid",
    description="Edge-cloud speculative decoding of a Qwen2-VL navigation policy for ROS 2 robots",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "edge-spec-ros = edge_spec_ros.cli:main",
        ],
    },
)
