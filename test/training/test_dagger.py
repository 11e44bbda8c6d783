"""DAgger's far states: the visited states with the target in view but far, drawn at their own
fraction; with the fraction 0 the draw is the one it always was."""

from __future__ import annotations

import numpy as np
import pytest

from edge_spec_ros.sim.expert import expert_text
from edge_spec_ros.sim.samples import far_in_view
from edge_spec_ros.training.dagger import dagger_sample, far_states, rollout_states


def _turning(verb):
    return lambda world, target: "Action: turn left 45 degrees"  # a search that never walks: the far target
    # sweeps through the view


@pytest.fixture(scope="module")
def states():
    return rollout_states(_turning, seed=2, rooms=6, max_decisions=8)


def test_far_states_are_the_visited_states_with_the_target_far_and_in_view(states):
    far = far_states(states)
    assert 0 < len(far) < len(states)
    assert far == [s for s in states if far_in_view(*s.world())]
    assert len(far_states(states, min_m=1.0)) > len(far)
    with pytest.raises(ValueError, match="min_m"):
        far_states(states, min_m=0.0)


def test_far_states_are_drawn_at_their_fraction(states):
    far = far_states(states)
    far_texts = {expert_text(*s.world()) for s in far}
    drawn = [dagger_sample(states, seed=1, index=i, jpeg_quality=0, far=far, far_fraction=1.0) for i in range(8)]
    assert all(d.text in far_texts for d in drawn)
    assert not any("not in view" in d.text for d in drawn)
    for i in range(8):  # fraction 0: the far pool is not consulted, the draw is the plain one
        plain = dagger_sample(states, seed=1, index=i, jpeg_quality=0)
        off = dagger_sample(states, seed=1, index=i, jpeg_quality=0, far=far, far_fraction=0.0)
        assert plain.text == off.text and np.array_equal(plain.image, off.image)
        final = dagger_sample(states, seed=1, index=i, jpeg_quality=0, final_fraction=0.25)
        final_off = dagger_sample(states, seed=1, index=i, jpeg_quality=0, final_fraction=0.25, far=far)
        assert final.text == final_off.text


def test_bad_fractions_are_refused(states):
    with pytest.raises(ValueError, match="sum to <= 1"):
        dagger_sample(states, seed=1, index=0, jpeg_quality=0, final_fraction=0.6, far=states, far_fraction=0.6)


def test_the_stage_options_default_to_no_far_states():
    from edge_spec_ros.training.sim_pair import SimPairConfig

    config = SimPairConfig()
    assert config.far_fraction == 0.0 and config.dagger_far_fraction == 0.0
    with pytest.raises(ValueError, match="sum to <= 1"):
        SimPairConfig(dagger_final_fraction=0.8, dagger_far_fraction=0.3)
    with pytest.raises(ValueError, match="sum to <= 1"):
        SimPairConfig(far_fraction=0.5)  # with the expert mix's other fractions, 0.65
