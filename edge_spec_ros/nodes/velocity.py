"""Velocity commands as ``geometry_msgs/Twist`` or ``geometry_msgs/TwistStamped``.

The action node publishes, and the simulated room and the bringup monitor subscribe, with the type its
``cmd_vel_type`` names. go2_ros2_sdk's twist_mux (Humble) and nav2 up to Jazzy take ``Twist``; nav2
from Kilted on, ros2_control's diff drive controller and twist_mux with ``use_stamped`` take
``TwistStamped``, whose stamp lets a consumer drop a command that has grown old.
"""

from __future__ import annotations

from geometry_msgs.msg import Twist, TwistStamped

CMD_VEL_TYPES = {"Twist": Twist, "TwistStamped": TwistStamped}


def check_cmd_vel_type(name: str) -> str:
    """``name`` if it is one of ``CMD_VEL_TYPES``; else ValueError naming the valid ones."""
    if name not in CMD_VEL_TYPES:
        raise ValueError(f"cmd_vel_type must be one of {', '.join(CMD_VEL_TYPES)}, got {name!r}")
    return name


def velocity_message(type_name: str, linear_x: float, angular_z: float, stamp=None, frame_id: str = ""):
    """A command of type ``type_name``; a TwistStamped carries ``stamp`` (builtin_interfaces/Time) and
    ``frame_id``."""
    if type_name == "TwistStamped":
        msg = TwistStamped()
        if stamp is not None:
            msg.header.stamp = stamp
        msg.header.frame_id = frame_id
        twist = msg.twist
    else:
        msg = twist = Twist()
    twist.linear.x, twist.angular.z = float(linear_x), float(angular_z)
    return msg


def velocity_values(msg) -> tuple[float, float]:
    """(linear.x, angular.z) of a Twist or a TwistStamped."""
    twist = msg.twist if isinstance(msg, TwistStamped) else msg
    return twist.linear.x, twist.angular.z
