"""ROS parameters ⇄ config dataclasses: every node declares exactly its config's fields.

A field's ``metadata`` carries its description (``doc``) and, where it has one, its valid range
(``range``: (low, high)), which go into the parameter's descriptor. ``watch_config`` validates a
set-parameters request by building the new config (the dataclass's own checks), so an invalid value
(NaN, a negative rate, a limit above a hard cap) is refused with the reason, and an accepted change
is handed to the node, which applies it from its next command on (after every on-set callback has
accepted the request; on Humble, which has no post-set callbacks, on the node's executor right after
the request: ``nodes.compat``).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import TypeVar

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
from rclpy.node import Node

from edge_spec_ros.config_cli import doc  # noqa: F401  (the field metadata, shared with the command line)
from edge_spec_ros.nodes.compat import add_post_set_parameters_callback

C = TypeVar("C")


def descriptor(f: dataclasses.Field, hint: type) -> ParameterDescriptor:
    """The descriptor of one config field: description and, if the field has one, its range."""
    out = ParameterDescriptor(description=f.metadata.get("doc", ""))
    if "range" in f.metadata:
        low, high = f.metadata["range"]
        if hint is float:
            out.floating_point_range = [FloatingPointRange(from_value=float(low), to_value=float(high), step=0.0)]
        elif hint is int:
            out.integer_range = [IntegerRange(from_value=int(low), to_value=int(high), step=1)]
    return out


def _coerce(value, hint):
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return tuple(value) if isinstance(value, list) else value


def declare_config(node: Node, cls: type[C], live: bool = False) -> C:
    """Declare one parameter per field of ``cls`` (default = the field's default, description and range
    from the field's metadata) and return the config built from the parameters' values.

    Without ``live`` the values are read once, at start-up: a later set-parameters request for them is
    refused with that reason (instead of succeeding and changing nothing). A node whose config applies
    changes at run time passes ``live=True`` and calls ``watch_config``."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, tuple):
            default = list(default)
        value = node.declare_parameter(f.name, default, descriptor(f, hints[f.name])).value
        values[f.name] = _coerce(value, hints[f.name])
    try:
        config = cls(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{node.get_name()}: invalid parameters: {exc}") from None
    if not live:
        names = set(values)

        def refuse(params) -> SetParametersResult:
            fixed = sorted(p.name for p in params if p.name in names)
            if fixed:
                return SetParametersResult(successful=False, reason=f"{', '.join(fixed)}: read at start-up; "
                                                                    "restart the node to change it")
            return SetParametersResult(successful=True)

        node.add_on_set_parameters_callback(refuse)
    return config


def watch_config(node: Node, current: Callable[[], C], apply: Callable[[C], None]) -> None:
    """Validate runtime changes of ``current()``'s fields; on success ``apply(new_config)``.

    The new config is built before anything changes: a value its dataclass refuses is refused with
    the dataclass's reason and nothing is applied.
    """
    hints = typing.get_type_hints(type(current()))

    def changed(params) -> C | None:
        changes = {p.name: _coerce(p.value, hints[p.name]) for p in params if p.name in hints}
        return dataclasses.replace(current(), **changes) if changes else None

    def validate(params) -> SetParametersResult:
        try:
            changed(params)
        except (TypeError, ValueError) as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def on_set(params) -> None:  # after every callback accepted: nothing is half applied
        new = changed(params)
        if new is not None:
            apply(new)
            node.get_logger().info(f"parameters changed: {', '.join(f'{p.name}={p.value!r}' for p in params)}")

    node.add_on_set_parameters_callback(validate)
    add_post_set_parameters_callback(node, on_set)  # Humble: deferred to the node's executor (nodes/compat.py)
