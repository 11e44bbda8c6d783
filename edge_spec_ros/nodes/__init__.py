"""The robot's rclpy nodes: the robot's install (edge_spec_ros[robot]) with ROS 2 from its ROS install.
In any other install, importing them ends with one line saying what to install."""

from edge_spec_ros.extras import require_extra, require_ros

require_extra("robot", "edge_spec_ros.nodes")
require_ros("edge_spec_ros.nodes")
