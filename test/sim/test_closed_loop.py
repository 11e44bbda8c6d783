"""The shipped trained pair in the simulated room: it finds the named object from the camera frame,
speculative decoding keeps its greedy output exactly, and the trajectory picture is drawn."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
from edge_spec_ros.models.embedded import embedded_pair, random_pair
from edge_spec_ros.models.prompt import PromptEncoder
from edge_spec_ros.sim.closed_loop import ModelPolicy, episode_world, evaluate, plot_trajectory
from edge_spec_ros.sim.expert import run_episode
from edge_spec_ros.sim.samples import SimDataConfig, sim_sample

EPISODES = 16


@pytest.fixture(scope="module")
def pair():
    return embedded_pair()


def test_the_trained_model_finds_the_target_among_distractors(pair):
    """From the image alone, in seeded rooms it has never seen (training rooms come from another
    seed), the verifier's greedy decisions bring the robot to the named object in several episodes
    (12 of these 16 on the reference machine, 85 of 140 over seeds 100-239, motions ended on odometry
    as the action node does), and the untrained pair — the negative control, same loop — in none."""
    seeds = list(range(100, 100 + EPISODES))
    encoder = pair.prompt_encoder()  # the budget it was trained at
    trained = evaluate(ModelPolicy(pair.verifier, encoder), seeds)
    assert sum(e.reached for e in trained.episodes) >= 6, trained.episodes
    assert all(e.decisions >= 1 for e in trained.episodes)
    untrained = random_pair()
    control = evaluate(ModelPolicy(untrained.verifier, PromptEncoder(untrained.tokenizer)), seeds)
    assert control.success_rate == 0.0


def test_speculative_decoding_keeps_the_trained_verifier_output(pair):
    """Exactness on trained weights, where the drafter is right often: identical greedy tokens, and
    more than two tokens per verification round on average."""
    encoder = pair.prompt_encoder()
    config = DecodeConfig(max_new_tokens=48, gamma=4, stop_tokens=(pair.tokenizer.eos_token_id,))
    rounds = tokens = 0
    for i in range(4):
        s = sim_sample(SimDataConfig(seed=7), i)
        prompt = encoder.encode(s.instruction, s.image)
        ar = autoregressive(pair.verifier, prompt, config)
        sd = speculative(pair.drafter, pair.verifier, prompt, config)
        assert sd.tokens == ar.tokens
        rounds, tokens = rounds + sd.stats.rounds, tokens + len(sd.tokens)
    assert tokens / rounds > 2.0


def test_trajectory_picture(tmp_path):
    world, target = episode_world(3)
    start = world.__class__(world.objects, world.pose, world.config)
    episode = run_episode(world, target, keep_images=False)
    path = plot_trajectory(start, episode, tmp_path / "t.png")
    assert path.stat().st_size > 5000 and path.read_bytes()[:4] == b"\x89PNG"
    assert len(episode.poses) == len(episode.steps) + 1


def test_rooms_of_a_task_are_the_sim_nodes_rooms_and_never_training_rooms():
    from edge_spec_ros.sim.tasks import TRAINING_ROOM_SEEDS, Task
    from edge_spec_ros.sim.world import World

    world, target = episode_world(12, Task("silver bottle", 2))
    assert target == "silver bottle" and len(world.objects) == 3
    assert world.objects == World.random(12, "silver bottle", 2).objects
    drawn = {episode_world(seed)[1] for seed in range(60)}
    assert len(drawn) > 20  # every colour and kind, drawn per room
    with pytest.raises(ValueError, match="training rooms"):
        episode_world(TRAINING_ROOM_SEEDS[0])
    with pytest.raises(ValueError, match="colour"):
        Task("gold bottle")
    with pytest.raises(ValueError, match="distractors"):
        Task("silver bottle", 5)


def test_the_report_counts_per_group():
    from edge_spec_ros.sim.closed_loop import ClosedLoopReport, EpisodeSummary

    report = ClosedLoopReport([EpisodeSummary(0, "red box", 1, True, 3), EpisodeSummary(1, "red ball", 2, False, 20),
                               EpisodeSummary(2, "blue box", 1, True, 5)])
    assert report.by(lambda e: e.distractors) == {1: (2, 2), 2: (0, 1)}
    assert report.by(lambda e: e.target.split()[0]) == {"blue": (1, 1), "red": (1, 2)}


def test_sim_eval_decodes_with_the_robots_token_budget():
    """``sim-eval`` and the ROS loop evaluate one policy: the same token budget per decision."""
    from edge_spec_ros.commands.training import SIM_EVAL_MAX_NEW_TOKENS

    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "go2_nav.yaml").read_text())
    assert SIM_EVAL_MAX_NEW_TOKENS == config["drafter"]["ros__parameters"]["max_new_tokens"]
