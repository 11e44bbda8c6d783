"""Command-line options ⇄ config dataclasses: a command's options are its config's fields.

A field's ``metadata`` (``doc(...)``: the description and, where it has one, the valid range) is what
``nodes/params.py`` turns into a ROS parameter's descriptor; here it becomes an option: ``--field-name``
(or the spelling the caller gives), the field's type, its default, its help with the range and the
default, and a value outside the range refused by argparse before anything loads. A field that is
itself a config dataclass (``ServerConfig.limits``) adds its fields too; ``config_from`` builds the
config back from the parsed arguments, so the dataclass's own checks run once, as for a node.

The project's own generator, not a library made for dataclass command lines (tyro, jsonargparse,
cyclopts): the command line stays plain ``argparse`` (the parser the tests, ``docs/commands.md`` and the
bench's sub-commands already use), the field metadata is the one ``nodes/params.py`` reads, and the
robot's install gains no dependency (``edge-spec-ros --help`` runs there, extras.py keeps it lean).
What it handles is what the configs hold: bool, int, float, str, their optionals, tuples of int or
str (comma separated; space separated where the metadata says ``nargs``; a repeated option where it
says ``repeat``), choices (``choices``), a ``metavar``, fields without a default (required options)
and nested configs. It imports nothing of the package (the bottom layer).

``LazyParser`` is a sub-command whose options are added on first use, so ``edge-spec-ros --help``
imports none of the benchmarks' modules; ``commands_markdown`` writes docs/commands.md from the parser.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

C = TypeVar("C")
UNBOUNDED = 1e9  # a range's upper end from here on is shown as none ("(>= low)")


class UsageError(Exception):
    """A command's arguments that do not go together; ``edge-spec-ros`` shows ``error: <message>`` and
    exits with status 2, as argparse does for an option it refuses."""


def doc(text: str, low: float | None = None, high: float | None = None) -> dict:
    """Field metadata carrying the description and, with ``low``/``high``, the valid range."""
    return {"doc": text} if low is None else {"doc": text, "range": (low, high)}


def _plain(hint: Any) -> Any:
    """``X | None`` -> ``X``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _ranged(kind: type, low: float, high: float) -> Callable[[str], Any]:
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
        if not low <= value <= high:
            bound = f"[{_number(low)}, {_number(high)}]" if high < UNBOUNDED else f"(>= {_number(low)})"
            raise argparse.ArgumentTypeError(f"{value} is outside {bound}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def comma_list(kind: type) -> Callable[[str], tuple]:
    """A comma-separated list of ``kind`` (``"1,2,4"`` -> ``(1, 2, 4)``; ``""`` -> ``()``)."""
    def parse(text: str) -> tuple:
        try:
            return tuple(kind(x) for x in text.split(",") if x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__}s, got {text!r}") from None

    parse.__name__ = f"{kind.__name__} list"
    return parse


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "none"
    return repr(value) if value == "" else str(value)


def _option(f: dataclasses.Field, hint: Any, default: Any) -> dict:
    """argparse keywords of one field: type (with its range), action, default, help."""
    hint = _plain(hint)
    text = f.metadata.get("doc", "")
    kwargs: dict[str, Any] = {"default": default}
    if hint is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif typing.get_origin(hint) is tuple and f.metadata.get("repeat"):  # --option A --option B ...
        kwargs.update(action="append", default=None, metavar=f.metadata.get("metavar"))
    elif typing.get_origin(hint) is tuple and "nargs" in f.metadata:  # --option A B ...
        kwargs.update(nargs=f.metadata["nargs"], type=typing.get_args(hint)[0], metavar=f.metadata.get("metavar"))
    elif typing.get_origin(hint) is tuple:
        kwargs["type"] = comma_list(typing.get_args(hint)[0])
        kwargs["metavar"] = "A,B,..."
    elif "metavar" in f.metadata:
        kwargs["metavar"] = f.metadata["metavar"]
    if "range" in f.metadata and hint in (int, float):
        low, high = f.metadata["range"]
        kwargs["type"] = _ranged(hint, low, high)
        text += f" [{_number(low)}, {_number(high)}]" if high < UNBOUNDED else f" (>= {_number(low)})"
    elif hint in (int, float) and hint is not bool:
        kwargs["type"] = hint
    if "choices" in f.metadata:
        kwargs["choices"] = f.metadata["choices"]
    kwargs["help"] = f"{text} (default {_shown(default)})".strip()
    return kwargs


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING


def add_config(parser: argparse.ArgumentParser, cls: type, *, skip: Iterable[str] = (),
               flags: Mapping[str, str] | None = None, defaults: Mapping[str, Any] | None = None,
               helps: Mapping[str, str] | None = None) -> None:
    """One option per field of ``cls`` (nested configs' fields too), but ``skip``.

    ``flags`` spells a field's option otherwise than ``--field-name`` (an older spelling kept; a tuple:
    several spellings);
    ``defaults`` gives a command's own default where it is not the config's; ``helps`` adds a
    command's note to a field's description. The option's ``dest`` is the field's name."""
    flags, defaults, helps = dict(flags or {}), dict(defaults or {}), dict(helps or {})
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            add_config(parser, hints[f.name], skip=skip, flags=flags, defaults=defaults, helps=helps)
            continue
        default = defaults.get(f.name, _default(f))
        kwargs = _option(f, hints[f.name], None if default is dataclasses.MISSING else default)
        if default is dataclasses.MISSING:  # a field without a default: a required option
            kwargs.update(required=True, help=kwargs["help"].removesuffix(" (default None)"))
        if f.name in helps:
            kwargs["help"] = f"{helps[f.name]}; {kwargs['help']}"
        names = flags.get(f.name, "--" + f.name.replace("_", "-"))
        parser.add_argument(*((names,) if isinstance(names, str) else names), dest=f.name, **kwargs)


def config_from(cls: type[C], args: argparse.Namespace, **overrides: Any) -> C:
    """The config of ``cls`` from parsed arguments (a field without an option keeps its default;
    ``overrides`` win). Its own checks run: a ValueError names what it refuses."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in overrides:
            values[f.name] = overrides[f.name]
        elif dataclasses.is_dataclass(hints[f.name]):
            values[f.name] = config_from(hints[f.name], args)
        elif getattr(args, f.name, None) is not None or (hasattr(args, f.name) and not f.metadata.get("repeat")):
            value = getattr(args, f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values)


class LazyParser(argparse.ArgumentParser):
    """A sub-command parser whose options ``populate`` adds the first time it parses or shows help."""

    def __init__(self, *args, populate: Callable[[argparse.ArgumentParser], None] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._populate = populate

    def populated(self) -> LazyParser:
        if self._populate is not None:
            populate, self._populate = self._populate, None
            populate(self)
        return self

    def parse_known_args(self, args=None, namespace=None):
        return super(LazyParser, self.populated()).parse_known_args(args, namespace)

    def format_help(self) -> str:
        return super(LazyParser, self.populated()).format_help()


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-command parsers of ``parser`` by name (none: {})."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    if isinstance(parser, LazyParser):
        parser.populated()
    rows = ["| option | help |", "|---|---|"]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or not action.option_strings:
            continue
        names = ", ".join(f"`{s}`" for s in action.option_strings)
        if action.nargs != 0 and not isinstance(action, argparse.BooleanOptionalAction):
            names += f" {action.metavar or action.dest.upper()}"
        text = action.help or ""
        if "(default" not in text and action.default not in (None, argparse.SUPPRESS, False) and action.nargs != 0:
            text += f" (default {_shown(action.default)})"
        if action.choices and not isinstance(action, argparse.BooleanOptionalAction):
            text += f" (one of: {', '.join(map(str, action.choices))})"
        if action.required:
            text += " (required)"
        rows.append(f"| {_cell(names)} | {_cell(text)} |")
    return rows if len(rows) > 2 else []


def commands_markdown(parser: argparse.ArgumentParser, intro: str) -> str:
    """Markdown of every command and sub-command of ``parser``: its help line and its options."""
    lines = [intro, ""]

    def section(prefix: str, sub: argparse.ArgumentParser, level: int) -> None:
        lines.extend([f"{'#' * level} `{prefix}`", ""])
        if sub.description:
            lines.extend([_cell(sub.description), ""])
        table = _options_table(sub)
        lines.extend(table + ([""] if table else []))
        for name, child in subcommands(sub).items():
            section(f"{prefix} {name}", child, level + 1)

    for name, sub in subcommands(parser).items():
        section(f"{parser.prog} {name}", sub, 2)
    return "\n".join(lines).rstrip() + "\n"
