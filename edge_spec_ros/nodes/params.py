"""ROS parameters ⇄ config dataclasses: every node declares exactly its config's fields."""

from __future__ import annotations

import dataclasses
import typing
from typing import TypeVar

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node

C = TypeVar("C")


def declare_config(node: Node, cls: type[C]) -> C:
    """Declare one parameter per field of ``cls`` (default = the field's default, description = the
    field's ``metadata['doc']``) and return the config built from the parameters' values."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, tuple):
            default = list(default)
        descriptor = ParameterDescriptor(description=f.metadata.get("doc", ""))
        value = node.declare_parameter(f.name, default, descriptor).value
        if hints[f.name] is float and isinstance(value, int):
            value = float(value)
        if isinstance(value, list):
            value = tuple(value)
        values[f.name] = value
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{node.get_name()}: invalid parameters: {exc}") from None


def doc(text: str) -> dict:
    """Field metadata carrying the parameter's description."""
    return {"doc": text}
