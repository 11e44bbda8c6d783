"""The pure navigation layer: model text → ``NavAction`` → ``MotionPlan`` → velocity to publish now.

No ROS, no sockets, no clock: ``config`` (magnitudes and safety limits), ``grammar`` (parse the
model's "reasoning + action" text), ``planner`` (velocity and duration within the limits),
``motion`` (a plan driven to its distance or angle on pose feedback) and ``watchdog`` (a
clock-injected timeout). A ROS node wires them together::

    result = parse_action(text, config)
    if result.action is not None:
        tracker = MotionTracker(plan_motion(result.action, config), pose, now)
    ...
    cmd = tracker.update(pose, now)  # on each odometry sample: publish cmd.linear_x, cmd.angular_z
"""

from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.grammar import NavAction, ParseResult, parse_action
from edge_spec_ros.nav.planner import MotionPlan, plan_motion, zero_plan
from edge_spec_ros.nav.motion import MotionTracker
from edge_spec_ros.nav.watchdog import Watchdog

__all__ = ["MotionPlan", "MotionTracker", "NavAction", "NavConfig", "ParseResult", "Watchdog", "parse_action",
           "plan_motion", "zero_plan"]
