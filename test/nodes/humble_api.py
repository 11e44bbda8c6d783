"""Run a module as ``python -m`` does, with the rclpy APIs that ROS 2 Humble's rclpy does not have
removed first, so that the package's nodes take their Humble fallbacks (edge_spec_ros/nodes/compat.py):

    python test/nodes/humble_api.py edge_spec_ros.nodes.action_node --ros-args ...

Removed: the module ``rclpy.event_handler`` (Humble has ``rclpy.qos_event``, without subscription
matched events), ``Node.add_pre_set_parameters_callback``, ``Node.add_post_set_parameters_callback``
(and their ``remove_*``) and ``Subscription.get_publisher_count`` (all from Iron on). rclpy's own
modules are imported before, so rclpy keeps working inside; only what is imported or looked up
afterwards (the package's code) meets Humble's API. Prints ``HIDDEN_LINE`` once it is done.
"""

from __future__ import annotations

import runpy
import sys

HIDDEN_LINE = "humble_api: rclpy APIs newer than Humble removed"
REMOVED_METHODS = {
    "rclpy.node.Node": ("add_pre_set_parameters_callback", "remove_pre_set_parameters_callback",
                        "add_post_set_parameters_callback", "remove_post_set_parameters_callback"),
    "rclpy.subscription.Subscription": ("get_publisher_count",),
}


def hide() -> None:
    import rclpy
    import rclpy.action  # noqa: F401  rclpy's modules bind what they need of event_handler now
    import rclpy.executors  # noqa: F401
    import rclpy.lifecycle  # noqa: F401
    import rclpy.node
    import rclpy.subscription

    sys.modules["rclpy.event_handler"] = None  # `import rclpy.event_handler` raises ImportError
    del rclpy.event_handler
    for dotted, names in REMOVED_METHODS.items():
        module, cls = dotted.rsplit(".", 1)
        owner = getattr(sys.modules[module], cls)
        for name in names:
            delattr(owner, name)
    from edge_spec_ros.nodes import compat

    flags = (compat.HAS_MATCHED_EVENTS, compat.HAS_POST_SET_PARAMETERS, compat.HAS_SUBSCRIPTION_PUBLISHER_COUNT)
    if any(flags):
        raise SystemExit(f"humble_api: nodes.compat still detects newer APIs: {flags}")
    print(HIDDEN_LINE, flush=True)


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: humble_api.py MODULE [ARG ...]")
    module = sys.argv[1]
    hide()
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
