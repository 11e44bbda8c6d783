"""Training the simulated room's pair: deterministic samples, labels on the reply only, a loss that
falls, a resumed run that is the same run, float16 weights that load, and the one-command pipeline."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from edge_spec_ros.models.loading import load_qwen2vl
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.models.tiny import TinyModelSpec, build_tiny_qwen2vl
from edge_spec_ros.nav import NavConfig, parse_action
from edge_spec_ros.sim.samples import SimDataConfig, sim_sample
from edge_spec_ros.training.sim_data import IGNORE, collate
from edge_spec_ros.training.sim_pair import SimPairConfig, average_weights, train_sim_pair
from edge_spec_ros.training.vlm import LMTrainingConfig, lm_loss, save_model, train_lm

SMALL = TinyModelSpec(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64, init_std=0.02)
DATA = SimDataConfig(seed=3)


def test_samples_are_a_function_of_seed_and_index():
    a, b = sim_sample(DATA, 7), sim_sample(DATA, 7)
    assert a.text == b.text and a.instruction == b.instruction and np.array_equal(a.image, b.image)
    texts = {sim_sample(DATA, i).text for i in range(20)}
    assert len(texts) > 5  # varied: search, turns, walks, stops
    assert all(parse_action(t, NavConfig()).action is not None for t in texts)
    assert sim_sample(SimDataConfig(seed=4), 7).text != a.text or not np.array_equal(sim_sample(SimDataConfig(seed=4),
                                                                                                 7).image, a.image)


def test_collate_labels_only_the_reply_and_its_end(tokenizer, encoder):
    samples = [sim_sample(DATA, i) for i in range(3)]
    batch = collate(samples, encoder, tokenizer)
    B, T = batch.inputs["input_ids"].shape
    assert B == 3 and batch.labels.shape == (B, T)
    for i, s in enumerate(samples):
        labelled = batch.labels[i][batch.labels[i] != IGNORE].tolist()
        assert labelled[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(labelled[:-1]) == s.text
        n = len(encoder.encode(s.instruction, s.image))
        assert batch.labels[i, n - 1] == labelled[0]  # the last prompt position predicts the first reply token
        assert torch.equal(batch.inputs["input_ids"][i, n:n + len(labelled)], torch.tensor(labelled))
    grid = batch.inputs["image_grid_thw"]
    assert batch.inputs["pixel_values"].shape[0] == int(grid.prod(-1).sum())


def test_training_lowers_the_loss_and_resumes_exactly(tokenizer, encoder, tmp_path):
    def batch(step):
        return collate([sim_sample(DATA, 2 * step + i) for i in range(2)], encoder, tokenizer)

    config = LMTrainingConfig(steps=6, batch_size=2, lr=3e-3, warmup=2, checkpoint_every=3)
    straight = build_tiny_qwen2vl(SMALL, tokenizer, seed=5)
    losses = train_lm(straight, batch, config, tmp_path / "straight")
    assert len(losses) == 6 and losses[-1] < losses[0]
    resumed = build_tiny_qwen2vl(SMALL, tokenizer, seed=5)
    train_lm(resumed, batch, LMTrainingConfig(**{**config.__dict__, "steps": 3}), tmp_path / "resumed")
    with pytest.raises(ValueError, match="another configuration"):
        train_lm(resumed, batch, config, tmp_path / "resumed")  # steps are part of the schedule
    resumed = build_tiny_qwen2vl(SMALL, tokenizer, seed=5)
    train_lm(resumed, batch, config, tmp_path / "straight")  # a fresh process picks up the finished run
    for k, v in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[k], v)


def test_distillation_loss_is_zero_against_itself(tokenizer, encoder):
    model = build_tiny_qwen2vl(SMALL, tokenizer, seed=1)
    batch = collate([sim_sample(DATA, 0)], encoder, tokenizer)
    assert float(lm_loss(model, batch, teacher=model).detach()) == pytest.approx(0.0, abs=1e-5)
    assert float(lm_loss(model, batch).detach()) > 1.0


def test_saved_weights_are_float16_and_load_as_float32(tokenizer, tmp_path):
    model = build_tiny_qwen2vl(SMALL, tokenizer, seed=2)
    save_model(model, tmp_path / "m", tokenizer)
    loaded = load_qwen2vl(str(tmp_path / "m"))
    for k, v in model.state_dict().items():
        w = loaded.state_dict()[k]
        assert w.dtype == torch.float32
        assert torch.equal(w, v.to(torch.float16).float())


def test_the_one_command_pipeline_writes_a_loadable_pair_and_resumes(tmp_path):
    config = SimPairConfig(verifier_steps=2, dagger_rounds=1, dagger_rooms=2, dagger_steps=2, drafter_steps=2,
                           exit_steps=2, batch_size=2, eval_samples=1, validation_rooms=1, max_pixels=112 * 84)
    phases = []
    report = train_sim_pair(tmp_path, config, lambda phase, step, total, loss: phases.append(phase))
    assert {"verifier", "dagger1 rollouts", "dagger1", "drafter", "exits"} <= set(phases)
    assert set(report) >= {"verifier", "drafter", "exits", "config", "validation_success_pct", "cpu_s"}
    assert set(report["validation_success_pct"]) == {"verifier", "dagger1"}
    assert report["dagger_states"]["dagger1"] >= 2  # at least a start and an end pose per room
    assert json.loads((tmp_path / "training_report.json").read_text())["config"]["seed"] == 0
    pair = load_pair(tmp_path)
    assert pair.verifier.exit_layers == (1, 2, 3, 4, 5)
    assert pair.max_pixels == 112 * 84  # the budget it was trained at travels with it
    phases.clear()
    train_sim_pair(tmp_path, config, lambda phase, step, total, loss: phases.append(phase))
    assert phases == []  # every phase's output exists: nothing is trained again


def test_a_fine_tuning_stage_starts_from_a_trained_pair(tmp_path):
    base = SimPairConfig(verifier_steps=1, drafter_steps=1, exit_steps=1, batch_size=2, eval_samples=1,
                         validation_rooms=0, max_pixels=112 * 84, labels="seen")
    train_sim_pair(tmp_path / "base", base)
    with pytest.raises(ValueError, match="not a train-sim-pair directory"):
        SimPairConfig(init_from=str(tmp_path / "none"))
    with pytest.raises(ValueError, match="labels"):
        SimPairConfig(labels="other")
    tune = SimPairConfig(**{**base.__dict__, "verifier_steps": 0, "drafter_steps": 0, "exit_steps": 0,
                            "labels": "compare", "init_from": str(tmp_path / "base")})
    report = train_sim_pair(tmp_path / "tuned", tune)
    assert report["config"]["init_from"] == str(tmp_path / "base") and report["config"]["labels"] == "compare"
    for part in ("verifier", "drafter"):  # no steps: what the stage ships is the pair it started from
        a, b = load_qwen2vl(str(tmp_path / "base" / part)), load_qwen2vl(str(tmp_path / "tuned" / part))
        for k, v in a.state_dict().items():
            assert torch.equal(b.state_dict()[k], v), (part, k)
    a, b = load_pair(tmp_path / "base"), load_pair(tmp_path / "tuned")
    assert b.verifier.exit_layers == a.verifier.exit_layers
    tuned = SimPairConfig(**{**tune.__dict__, "verifier_steps": 1})
    train_sim_pair(tmp_path / "tuned1", tuned)
    changed = load_qwen2vl(str(tmp_path / "tuned1" / "verifier")).state_dict()
    assert any(not torch.equal(changed[k], v) for k, v in load_qwen2vl(str(tmp_path / "base" / "verifier")).state_dict().items())


def test_a_stage_may_start_from_the_average_of_fine_tuned_pairs(tmp_path, tokenizer):
    """--average-with: the stage's verifier starts from the weight-by-weight mean of --init-from's and
    the others' (with no steps, that mean is what it ships, to float16); a different architecture or no
    --init-from is refused before any training."""
    base = SimPairConfig(verifier_steps=1, drafter_steps=0, exit_steps=0, batch_size=2, eval_samples=1,
                         validation_rooms=0, max_pixels=112 * 84, labels="seen")
    train_sim_pair(tmp_path / "a", base)
    train_sim_pair(tmp_path / "b", SimPairConfig(**{**base.__dict__, "seed": 1}))
    with pytest.raises(ValueError, match="needs init_from"):
        SimPairConfig(average_with=(str(tmp_path / "b"),))
    with pytest.raises(ValueError, match="not a train-sim-pair directory"):
        SimPairConfig(init_from=str(tmp_path / "a"), average_with=(str(tmp_path / "none"),))
    soup = SimPairConfig(**{**base.__dict__, "verifier_steps": 0, "init_from": str(tmp_path / "a"),
                            "average_with": (str(tmp_path / "b"),)})
    train_sim_pair(tmp_path / "soup", soup)
    a, b, mean = (load_qwen2vl(str(tmp_path / d / "verifier")).state_dict() for d in ("a", "b", "soup"))
    assert any(not torch.equal(a[k], b[k]) for k in a)
    for k in a:
        assert torch.equal(mean[k], ((a[k] + b[k]) / 2).half().float()), k
    with pytest.raises(ValueError, match="differ in architecture"):
        average_weights(load_qwen2vl(str(tmp_path / "a" / "verifier")), [build_tiny_qwen2vl(SMALL, tokenizer)])


def test_a_missing_pair_says_how_to_make_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="train-sim-pair"):
        load_pair(tmp_path)


def test_dagger_states_are_labelled_by_the_expert_and_stored(tmp_path):
    from edge_spec_ros.sim.expert import expert_text
    from edge_spec_ros.training.dagger import dagger_sample, load_states, rollout_states, save_states

    def walk_forward(verb):
        return lambda world, target: "Action: move forward 50 cm"

    states = rollout_states(walk_forward, seed=1, rooms=3, max_decisions=4)
    assert len(states) == 3 * 5 and len({s.room_seed for s in states}) == 3
    save_states(states, tmp_path)
    assert load_states(tmp_path) == states and load_states(tmp_path / "none") is None
    s = dagger_sample(states, seed=1, index=5, jpeg_quality=90)
    again = dagger_sample(states, seed=1, index=5, jpeg_quality=90)
    assert np.array_equal(s.image, again.image) and s.text == again.text
    picked = [st for st in states if st.world()[1] in s.instruction and f"{st.verb} " in s.instruction]
    assert any(expert_text(*st.world()) == s.text for st in picked)  # the expert's label of that state
    assert [st.final for st in states] == [False] * 4 + [True] + [False] * 4 + [True] + [False] * 4 + [True]
    finals = [dagger_sample(states, seed=1, index=i, jpeg_quality=0, final_fraction=1.0) for i in range(3)]
    final_texts = {expert_text(*st.world()) for st in states if st.final}
    assert all(f.text in final_texts for f in finals)  # drawn among the episodes' last states only
