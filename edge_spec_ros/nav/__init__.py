"""The pure navigation layer: model text → ``NavAction`` → ``MotionPlan`` → velocity to publish now.

No ROS, no sockets, no clock: ``config`` (magnitudes and safety limits), ``grammar`` (parse the
model's "reasoning + action" text), ``planner`` (velocity and duration within the limits) and
``watchdog`` (clock-injected timeout and motion timer). A ROS node wires them together::

    result = parse_action(text, config)
    if result.action is not None:
        timer.start(plan_motion(result.action, config), now)
    ...
    cmd = timer.active_command(now)  # publish cmd.linear_x, cmd.angular_z at the control rate
"""

from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.grammar import NavAction, ParseResult, parse_action
from edge_spec_ros.nav.planner import MotionPlan, plan_motion, zero_plan
from edge_spec_ros.nav.watchdog import MotionTimer, Watchdog

__all__ = ["MotionPlan", "MotionTimer", "NavAction", "NavConfig", "ParseResult", "Watchdog", "parse_action",
           "plan_motion", "zero_plan"]
