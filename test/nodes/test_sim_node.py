"""sim_node in its own process: camera frames out, /cmd_vel in, the pose follows, it stops when
commands stop."""

from __future__ import annotations

import math
import time

from geometry_msgs.msg import PoseStamped, Twist
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image
from std_msgs.msg import Bool

from edge_spec_ros.nodes.sim_node import LATCHED
from rosharness import node_command, process, wait_for


def yaw(p: PoseStamped) -> float:
    return 2 * math.atan2(p.pose.orientation.z, p.pose.orientation.w)


def test_sim_node_drives_and_renders(ros, tmp_path):
    images = ros.collect(Image, "camera/image_raw", qos_profile_sensor_data)
    poses = ros.collect(PoseStamped, "sim/pose", 10)
    goal = ros.collect(Bool, "sim/goal_reached", LATCHED)
    cmd = ros.node.create_publisher(Twist, "cmd_vel", 10)
    with process(node_command("sim_node", "-p", "seed:=4", "-p", "camera_rate_hz:=10.0"), tmp_path / "sim.log") as proc:
        wait_for(lambda: images and poses and goal and cmd.get_subscription_count() > 0, 20, "the sim")
        assert images[-1].encoding == "rgb8" and (images[-1].height, images[-1].width) == (168, 224)
        assert goal[-1].data is False
        start = poses[-1]
        twist = Twist()
        twist.angular.z = 0.5
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:  # turn in place for a second
            cmd.publish(twist)
            time.sleep(0.05)
        time.sleep(1.0)  # commands stopped: the robot stops after cmd_timeout_s
        turned = yaw(poses[-1]) - yaw(start)
        turned = math.atan2(math.sin(turned), math.cos(turned))
        assert 0.3 < turned < 0.9  # about 0.5 rad in 1 s, plus at most one timeout's worth
        still = yaw(poses[-1])
        time.sleep(0.3)
        assert abs(yaw(poses[-1]) - still) < 1e-6
        assert poses[-1].pose.position.x == start.pose.position.x  # turning in place
        assert proc.poll() is None
