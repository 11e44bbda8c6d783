"""``edge-spec-ros bringup --documents DIR``: the option reaches BringupConfig, the verifier that
``--serve`` starts gets ``serve --documents DIR``, and that server opens DRAGON decisions (one
without the folder refuses them)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from edge_spec_ros import bringup, cli
from edge_spec_ros.bringup import BringupConfig, serve_args, yaml_dragon_model
from edge_spec_ros.dragon.robot import DragonLinkError, ZmqDragonLink
from edge_spec_ros.dragon.wire import DragonOpen, DragonOpened
from edge_spec_ros.models.tokenizer import load_tokenizer, tokenizer_fingerprint
from edge_spec_ros.server_process import verifier_process

ROOT = Path(__file__).resolve().parents[2]
PARAMS = str(ROOT / "config" / "go2_nav.yaml")
OPEN_S = 120.0  # the server loads the shipped pair on a loaded computer


def documents(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "house.md").write_text("The charger is in the study.\n\nThe kitchen is at the end of the hall.")
    return folder


@pytest.fixture
def captured(monkeypatch):
    configs: list[BringupConfig] = []

    def fake_run(config, print_fn=print):
        configs.append(config)
        return SimpleNamespace(decisions=[], actions=[], twists=[], goal_reached=False)  # nothing started

    monkeypatch.setattr(bringup, "run", fake_run)
    return configs


def test_the_cli_option_reaches_the_config(captured, tmp_path):
    folder = documents(tmp_path)
    assert cli.main(["bringup", "--params", PARAMS, "--serve", "--documents", str(folder)]) == 0
    (config,) = captured
    assert config.serve and config.documents == str(folder)
    assert cli.main(["bringup", "--params", PARAMS, "--serve"]) == 0
    assert captured[-1].documents == ""


def test_the_cli_refuses_documents_without_serve_or_a_folder(captured, tmp_path):
    folder = documents(tmp_path)
    with pytest.raises(SystemExit, match="add --serve"):
        cli.main(["bringup", "--params", PARAMS, "--documents", str(folder)])
    with pytest.raises(SystemExit, match="is not a folder"):
        cli.main(["bringup", "--params", PARAMS, "--serve", "--documents", str(tmp_path / "nowhere")])
    assert not captured


def test_serve_args_carry_the_folder():
    assert serve_args(BringupConfig(PARAMS, serve=True), 3) == ("--threads", "3")
    assert serve_args(BringupConfig(PARAMS, serve=True, documents="/srv/docs"), 3) == \
        ("--threads", "3", "--documents", "/srv/docs")
    with pytest.raises(ValueError, match="needs serve"):
        serve_args(BringupConfig(PARAMS, documents="/srv/docs"), 3)


def test_the_started_verifier_serves_the_folder(tmp_path):
    """The verifier bringup starts (its serve_args) opens a DRAGON decision over the folder; without
    the folder the same server refuses it, naming the option."""
    folder = documents(tmp_path)
    request = DragonOpen(query="where is the charger?", max_new_tokens=2,
                         tokenizer_fingerprint=tokenizer_fingerprint(load_tokenizer()))  # the shipped pair's
    for config in (BringupConfig(PARAMS, serve=True, documents=str(folder)), BringupConfig(PARAMS, serve=True)):
        with verifier_process(*serve_args(config, 1), idle_exit_s=60.0) as endpoint:
            link = ZmqDragonLink(endpoint, open_timeout_s=OPEN_S)
            try:
                if config.documents:
                    assert isinstance(link.open(request), DragonOpened)
                else:
                    with pytest.raises(DragonLinkError, match="no DRAGON documents"):
                        link.open(request)
            finally:
                link.close()


def test_the_dragon_model_goes_to_both_sides(captured, tmp_path):
    """--dragon-model (or the YAML's drafter dragon_model) is the served verifier's --dragon-model too,
    on the CPU in float32 as the robot runs it; the CLI option reaches the config."""
    folder = documents(tmp_path)
    assert cli.main(["bringup", "--params", PARAMS, "--serve", "--documents", str(folder),
                     "--dragon-model", "smollm2"]) == 0
    assert captured[-1].dragon_model == "smollm2"
    assert serve_args(captured[-1], 2) == ("--threads", "2", "--documents", str(folder), "--dragon-model", "smollm2",
                                           "--dtype", "float32", "--device", "cpu")
    params = tmp_path / "dragon.yaml"
    config = yaml.safe_load(Path(PARAMS).read_text())
    assert config["drafter"]["ros__parameters"]["dragon_model"] == ""  # the shipped default: the drafter's LM
    assert yaml_dragon_model(PARAMS) == "" and "--dragon-model" not in serve_args(
        BringupConfig(PARAMS, serve=True, documents=str(folder)), 2)
    config["drafter"]["ros__parameters"]["dragon_model"] = "/models/answerer"
    params.write_text(yaml.safe_dump(config))
    assert yaml_dragon_model(str(params)) == "/models/answerer"
    assert serve_args(BringupConfig(str(params), serve=True, documents=str(folder)), 2)[4:6] == \
        ("--dragon-model", "/models/answerer")
    assert serve_args(BringupConfig(str(params), serve=True, documents=str(folder), dragon_model="smollm2"), 2)[4:6] \
        == ("--dragon-model", "smollm2")
