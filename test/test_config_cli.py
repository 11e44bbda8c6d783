"""The command line's options generated from config dataclasses (edge_spec_ros/config_cli.py): one
option per field, with the field's type, default, description and range, and the config built back."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from edge_spec_ros.config_cli import LazyParser, add_config, commands_markdown, config_from, doc


@dataclass(frozen=True)
class Inner:
    depth: int = field(default=3, metadata=doc("how deep", 1, 8))


@dataclass(frozen=True)
class Outer:
    name: str = field(default="a", metadata=doc("a name"))
    rate_s: float = field(default=0.5, metadata=doc("how often (s)", 0.0, 10.0))
    on: bool = field(default=True, metadata=doc("switch"))
    ids: tuple[int, ...] = field(default=(1, 2), metadata=doc("ids"))
    inner: Inner = field(default_factory=Inner)
    hidden: int = 7

    def __post_init__(self) -> None:
        if self.name == "bad":
            raise ValueError("name must not be bad")


def parser_of(**kw) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="p")
    add_config(parser, Outer, skip=("hidden",), **kw)
    return parser


def test_defaults_build_the_configs_own_defaults():
    assert config_from(Outer, parser_of().parse_args([])) == Outer()


def test_every_field_is_an_option_with_its_type_and_nested_fields_too():
    args = parser_of().parse_args(["--name", "b", "--rate-s", "2", "--no-on", "--ids", "4,5", "--depth", "8"])
    assert config_from(Outer, args) == Outer(name="b", rate_s=2.0, on=False, ids=(4, 5), inner=Inner(8))
    assert "--hidden" not in parser_of().format_help()


def test_a_value_outside_the_range_is_refused_before_the_config(capsys):
    for argv in (["--depth", "9"], ["--rate-s", "-1"], ["--depth", "x"]):
        with pytest.raises(SystemExit):
            parser_of().parse_args(argv)
    with pytest.raises(SystemExit):
        parser_of().parse_args(["--depth", "0"])
    assert "0 is outside [1, 8]" in capsys.readouterr().err


def test_the_dataclass_checks_run_once_built():
    with pytest.raises(ValueError, match="bad"):
        config_from(Outer, parser_of().parse_args(["--name", "bad"]))


def test_help_carries_the_description_range_and_default():
    text = " ".join(parser_of().format_help().split())
    assert "how often (s) [0, 10] (default 0.5)" in text
    assert "ids (default 1,2)" in text


def test_a_command_may_keep_an_older_spelling_and_its_own_default():
    parser = parser_of(flags={"rate_s": "--rate"}, defaults={"depth": 5}, helps={"name": "the robot's"})
    args = parser.parse_args(["--rate", "3"])
    assert (args.rate_s, args.depth) == (3.0, 5)
    assert "the robot's; a name" in parser.format_help()
    assert config_from(Outer, args, hidden=1).hidden == 1


def test_a_lazy_sub_command_adds_its_options_only_when_used():
    calls = []

    def populate(parser):
        calls.append(1)
        add_config(parser, Inner)

    parser = argparse.ArgumentParser(prog="p")
    sub = parser.add_subparsers(dest="command", parser_class=LazyParser)
    sub.add_parser("lazy", help="lazy one", description="lazy one", populate=populate)
    sub.add_parser("plain", help="plain one")
    assert parser.parse_args(["plain"]).command == "plain" and not calls
    assert parser.parse_args(["lazy", "--depth", "2"]).depth == 2 and calls == [1]
    text = commands_markdown(parser, "# Commands")
    assert "## `p lazy`" in text and "| `--depth` DEPTH | how deep [1, 8] (default 3) |" in text


@dataclass(frozen=True)
class Repeated:
    path: str = field(metadata=doc("a file"))
    topics: tuple[str, ...] = field(default=(), metadata={**doc("a topic (repeatable)"), "repeat": True,
                                                            "metavar": "TOPIC"})


def test_a_field_without_default_is_required_and_a_repeated_option_collects_its_values(capsys):
    parser = argparse.ArgumentParser(prog="p")
    add_config(parser, Repeated, flags={"path": ("--path", "--file")})
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert "--path" in capsys.readouterr().err
    assert config_from(Repeated, parser.parse_args(["--file", "x"])) == Repeated("x")
    assert config_from(Repeated, parser.parse_args(["--path", "x", "--topics", "/a", "--topics", "/b"])) == \
        Repeated("x", ("/a", "/b"))
