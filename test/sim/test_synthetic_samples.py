"""The synthetic-frame samples: the camera node's default frame (not a room) with the expert's search reply;
off by default, so the mix the shipped pair was trained on is unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.models.prompt import decode_image, encode_image
from edge_spec_ros.nav import NavConfig, parse_action
from edge_spec_ros.sim.samples import (
    JPEG_QUALITY,
    SYNTHETIC_SEEDS,
    SYNTHETIC_SIZES,
    SimDataConfig,
    sim_sample,
    synthetic_text,
)
from edge_spec_ros.training.sim_pair import SimPairConfig

from mix_digest import DEFAULT_MIX_SHA256, mix_digest

ONLY_SYNTHETIC = dict(random_pose_fraction=0, lookalike_fraction=0, detour_fraction=0, synthetic_fraction=1)


def _frames() -> list[np.ndarray]:
    """Every frame a synthetic sample can show, after the JPEG round trip the sampler applies."""
    return [decode_image(encode_image(synthetic_camera_image(w, h, seed=s), quality=JPEG_QUALITY))
            for w, h in SYNTHETIC_SIZES for s in range(SYNTHETIC_SEEDS)]


def _is_synthetic(image: np.ndarray, frames: list[np.ndarray]) -> bool:
    return any(f.shape == image.shape and np.array_equal(f, image) for f in frames)


def test_the_default_mix_has_no_synthetic_frames():
    assert SimDataConfig().synthetic_fraction == 0.0 and SimPairConfig().synthetic_fraction == 0.0
    assert mix_digest(SimDataConfig(seed=3, synthetic_fraction=0.0)) == DEFAULT_MIX_SHA256
    assert mix_digest(SimDataConfig(seed=3, synthetic_fraction=0.3)) != DEFAULT_MIX_SHA256


def test_a_synthetic_sample_is_the_camera_frame_with_a_parseable_search_reply():
    config = SimDataConfig(seed=4, **ONLY_SYNTHETIC)
    frames, nav = _frames(), NavConfig()
    samples = [sim_sample(config, i) for i in range(40)]
    assert all(_is_synthetic(s.image, frames) for s in samples)
    assert len({s.image.shape for s in samples}) > 1  # the camera's sizes, not only its default
    for s in samples:
        target = s.instruction.split(" the ", 1)[1]
        assert s.text == synthetic_text(target)
        action = parse_action(s.text, nav).action
        assert action.kind == "turn" and math.isclose(action.angle_rad, math.radians(45))  # left
    assert len({s.instruction for s in samples}) > 20  # many targets and verbs


def test_synthetic_samples_are_drawn_at_their_fraction():
    frames = _frames()
    mixed = [sim_sample(SimDataConfig(seed=7, synthetic_fraction=0.25), i).image for i in range(80)]
    share = sum(_is_synthetic(image, frames) for image in mixed) / len(mixed)
    assert 0.1 <= share <= 0.4
    default = [sim_sample(SimDataConfig(seed=7), i).image for i in range(20)]
    assert not any(_is_synthetic(image, frames) for image in default)


def test_bad_synthetic_fractions_are_refused():
    with pytest.raises(ValueError, match="sum to <= 1"):
        SimDataConfig(synthetic_fraction=0.5)  # with the other fractions' 0.65
    with pytest.raises(ValueError, match="sum to <= 1"):
        SimDataConfig(synthetic_fraction=-0.1)
    with pytest.raises(ValueError, match="sum to <= 1"):
        SimPairConfig(synthetic_fraction=0.5)
