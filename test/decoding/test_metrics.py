"""Derived figures of DecodeStats."""

from __future__ import annotations

import math

from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.spec.pipeline import expected_round_tokens


def test_decode_stats_report_their_own_bound():
    stats = DecodeStats("sd", tokens=30, rounds=10, drafted=40, accepted=20, full_rounds=2, server_s=1.0)
    alpha = 20 / (20 + 10 - 2)
    assert math.isclose(stats.bound_per_token_s, 0.1 / expected_round_tokens(alpha, 4))
    assert DecodeStats("ar").bound_per_token_s == 0.0 and "bound_per_token_s" in stats.as_dict()


def test_the_steady_state_is_the_decode_after_its_first_verdict():
    stats = DecodeStats("pico", tokens=21, steady_s=2.0, steady_tokens=16, steady_rounds=4, first_tokens=5,
                        wall_s=3.2, ttft_s=1.2)
    assert stats.steady_per_token_s == 0.125 and "steady_per_token_s" in stats.as_dict()
    # the ms per token after the first verdict = (s per round) / (tokens per round), each beside the bound's
    assert stats.steady_round_s == 0.5 and stats.steady_tau == 4.0 and "steady_tau" in stats.as_dict()
    assert DecodeStats("ar").steady_per_token_s == 0.0 and DecodeStats("ar").steady_round_s == 0.0
