"""The command line: its options come from the configs, docs/commands.md is the parser, every benchmark
is a sub-command of ``edge-spec-ros bench``, and ``edge-spec-ros --help`` loads none of the commands."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from edge_spec_ros.cli import build_parser, main
from edge_spec_ros.command_docs import markdown
from edge_spec_ros.config_cli import subcommands

ROOT = Path(__file__).resolve().parents[1]
HELP_TIMEOUT_S = 120.0


def test_the_commands_doc_is_the_parser():
    """Regenerate it with ``python -m edge_spec_ros.command_docs > docs/commands.md``."""
    assert (ROOT / "docs" / "commands.md").read_text() == markdown()


def dests(*command: str) -> dict[str, str]:
    parser = build_parser()
    for name in command:
        parser = subcommands(parser)[name].populated()
    return {a.dest: a.help or "" for a in parser._actions}


def config_fields(cls) -> set[str]:
    out = set()
    for f in dataclasses.fields(cls):
        out |= config_fields(f.type) if dataclasses.is_dataclass(f.type) else {f.name}
    return out


@pytest.mark.parametrize(("command", "module", "name", "not_options"), [
    (("serve",), "edge_spec_ros.cloud.server", "ServerConfig", {"curve"}),
    (("bench",), "edge_spec_ros.bench.runner", "BenchConfig", set()),
    (("train-exits",), "edge_spec_ros.training.exits", "ExitTrainingConfig", set()),
    (("train-sim-pair",), "edge_spec_ros.training.sim_pair", "SimPairConfig", set()),
    (("bringup",), "edge_spec_ros.bringup", "BringupConfig", set()),
    (("distill-drafter",), "edge_spec_ros.training.drafter_distill", "DistillConfig", set()),
    (("bench", "fleet"), "edge_spec_ros.bench.fleet", "FleetConfig", set()),
    (("bench", "gpu-timing"), "edge_spec_ros.bench.gpu_timing", "TimingConfig", set()),
])
def test_a_commands_options_are_its_configs_fields_with_their_descriptions(command, module, name, not_options):
    import importlib
    import typing

    cls = getattr(importlib.import_module(module), name)
    typing.get_type_hints(cls)  # resolves the nested configs' annotations
    for f in dataclasses.fields(cls):
        f.type = typing.get_type_hints(cls)[f.name]
    options = dests(*command)
    fields = config_fields(cls) - not_options
    assert fields <= set(options), sorted(fields - set(options))
    assert not set(options) & not_options
    assert all(options[name] and "(default" in options[name] for name in fields)


def test_a_value_out_of_a_fields_range_is_refused_before_anything_loads(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", "--max-gamma", "65"])
    assert exc.value.code == 2 and "65 is outside [1, 64]" in capsys.readouterr().err


def test_every_benchmark_is_a_sub_command_of_bench_and_none_has_its_own_entry_point():
    from edge_spec_ros.commands.bench import BENCHES, _module_path

    files = [p for folder in ("bench", "dragon/bench") for p in (ROOT / "edge_spec_ros" / folder).glob("*.py")]
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in files}
    entry_points = {p.stem for p in files if '__name__ == "__main__"' in p.read_text()}
    assert not entry_points
    for name, (module, _) in BENCHES.items():
        assert _module_path(module) in modules
        assert build_parser().parse_args(["bench", name]).bench == name  # its options build and parse
    runs = re.compile(r"python -m edge_spec_ros\.(bench|cloud|dragon)\.")
    for path in [ROOT / "README.md", ROOT / "Makefile", *(ROOT / "docs").glob("*.md")]:
        assert not runs.search(path.read_text()), path


def test_a_usage_error_of_a_sub_command_is_one_line_and_status_2(capsys):
    assert main(["bench", "dragon-latency", "--payloads", "nothing"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: payloads from full,on_demand")


def test_the_top_level_help_loads_no_command_module():
    code = ("import sys\nfrom edge_spec_ros.cli import build_parser\nbuild_parser().format_help()\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('edge_spec_ros', 'torch', 'zmq')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=HELP_TIMEOUT_S).stdout.split()
    commands = {m for m in out if m.startswith("edge_spec_ros.commands")}
    assert set(out) - commands == {"edge_spec_ros", "edge_spec_ros.cli", "edge_spec_ros.config_cli"}
