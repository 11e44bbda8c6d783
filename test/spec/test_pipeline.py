"""PicoSpec's throughput model (eqs. 5-9) on hand-picked numbers and its limits."""

from __future__ import annotations

import math

import pytest

from edge_spec_ros.spec.pipeline import (
    PipelineTimes, async_cycle, async_throughput, expected_length, expected_round_tokens, latency_immunity_bound,
    sync_throughput,
)

TIMES = PipelineTimes(t_draft=0.288, t_rtt=0.240, t_verify=0.620)  # FSD Table 8's Go2 figures


def test_expected_length_and_its_limits():
    """EL = Σ_{i<γ} α^i: 1 at α = 0, γ at α = 1."""
    assert expected_length(0.5, 4) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_length(0.0, 4) == 1.0 and expected_length(1.0, 4) == 4.0
    with pytest.raises(ValueError):
        expected_length(1.5, 4)


def test_async_cycle_interpolates_between_overlap_and_sync():
    """α = 1: every cycle overlaps (max); α = 0: every cycle is serial (sum); in between, the mixture."""
    assert async_cycle(1.0, 4, TIMES) == pytest.approx(0.860)
    assert async_cycle(0.0, 4, TIMES) == pytest.approx(1.148)
    hit = 0.8**4
    assert async_cycle(0.8, 4, TIMES) == pytest.approx(hit * 0.860 + (1 - hit) * 1.148)


def test_pipeline_never_slower_and_bounded_speedup():
    """R_async ≥ R_sync, with the gain bounded by L_sync / max(T_draft, T_RTT + T_verify) (eq. 10's bound)."""
    for alpha in (0.0, 0.3, 0.7, 0.95, 1.0):
        gain = async_throughput(alpha, 4, TIMES) / sync_throughput(alpha, 4, TIMES)
        assert 1.0 <= gain <= TIMES.sync_cycle / TIMES.overlapped_cycle + 1e-12
    with pytest.raises(ValueError):
        PipelineTimes(-1, 0, 0)


def test_round_tokens_count_the_target_token_and_the_bound_divides_t_verify_by_them():
    assert expected_round_tokens(0.0, 4) == 1.0  # every draft rejected: the target's token only
    assert expected_round_tokens(1.0, 4) == 5.0
    assert math.isclose(expected_round_tokens(0.5, 4), 1 + 0.5 + 0.25 + 0.125 + 0.0625)
    assert math.isclose(expected_round_tokens(0.8, 4), expected_length(0.8, 5))  # EL of eq. 5 at γ + 1
    assert expected_round_tokens(0.7, 2) < expected_round_tokens(0.7, 2.5) < expected_round_tokens(0.7, 3)
    assert math.isclose(latency_immunity_bound(0.62, 0.8, 4), 0.62 / expected_length(0.8, 5))
    with pytest.raises(ValueError):
        expected_round_tokens(1.2, 4)

