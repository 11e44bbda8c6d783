"""PicoSpec's throughput model (eqs. 5-9) on hand-picked numbers and its limits."""

from __future__ import annotations

import math

import pytest

from edge_spec_ros.spec.pipeline import (
    OpenTimes, PipelineTimes, async_cycle, async_throughput, chained_cycle, expected_length, expected_round_tokens,
    first_block_gamma, latency_immunity_bound, pipelined_gamma, sync_throughput,
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


GO2_OPEN = OpenTimes(t_open=0.30, t_p=0.072, t_q=0.620, t_c=0.120)  # go2-paper: 2T_c + a 60 ms prefill


def test_first_verdict_against_cloud_only_first_token():
    """A first block of γ: verdict at T_q + T_c + max(t_open − T_c, γT_p + T_c); cloud-only's first token
    at t_open + 2T_c + T_q. Drafting hidden by the Open (γT_p ≤ t_open − 2T_c): 2T_c sooner than it."""
    t = GO2_OPEN
    assert t.cloud_first_token == pytest.approx(0.30 + 0.24 + 0.62)
    assert t.first_verdict(0) == pytest.approx(0.62 + 0.30)  # the verifier waits for its prefill only
    assert t.first_verdict(4) == pytest.approx(0.62 + 0.12 + 4 * 0.072 + 0.12)  # the block arrives after it
    for gamma in range(1, 5):  # γT_p ≤ t_open: never later than cloud-only's first token
        assert t.first_verdict(gamma) <= t.cloud_first_token + 1e-12


def test_first_block_gamma_fits_the_open_and_maximises_the_first_rate():
    t = GO2_OPEN
    gamma = first_block_gamma(0.8, t, 16)
    assert gamma * t.t_p <= t.t_open and (gamma + 1) * t.t_p > t.t_open or gamma == 16
    rate = {g: expected_round_tokens(0.8, g) / t.first_verdict(g) for g in range(1, 5)}
    assert rate[gamma] == max(rate.values()) and gamma == 4
    assert first_block_gamma(0.8, t, 2) == 2  # capped
    assert first_block_gamma(0.0, t, 16) == 1  # nothing is accepted: the shortest block is the soonest verdict
    assert first_block_gamma(0.9, OpenTimes(0.30, 0.0, 0.62, 0.12), 16) == 16  # free drafting
    assert first_block_gamma(0.9, OpenTimes(0.05, 0.072, 0.62, 0.0), 16) == 1  # not even one step hides
    # the drafter's own prefill of the prompt comes first: what it takes of the Open's time is not drafted
    slow_prefill = OpenTimes(0.30, 0.072, 0.62, 0.12, t_pre=0.15)
    assert slow_prefill.first_verdict(2) == pytest.approx(0.62 + 0.12 + max(0.30 - 0.12, 0.15 + 0.144 + 0.12))
    assert first_block_gamma(0.8, slow_prefill, 16) == 2 and slow_prefill.drafted(2) <= 0.30 < slow_prefill.drafted(3)
    assert first_block_gamma(0.9, OpenTimes(0.30, 0.0, 0.62, 0.12, t_pre=0.4), 16) == 1  # the prefill alone is longer
    with pytest.raises(ValueError):
        first_block_gamma(0.8, t, 0)
    with pytest.raises(ValueError):
        OpenTimes(-1.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        OpenTimes(0.3, 0.0, 0.0, 0.0, t_pre=-0.1)


def test_the_chained_cycle_is_the_verification_or_half_the_loop_never_eq_2s():
    """One block drafted ahead, chained: the cloud-bound cycle T_q while T_draft + T_RTT ≤ T_q, half the
    loop T_q + T_RTT + T_draft beyond; go2-paper's rounds at γ = 4, 6, 8 (T_draft = (γ+1) x 72 ms)."""
    assert chained_cycle(0.2, 0.24, 0.62) == pytest.approx(0.62)
    assert [round(chained_cycle((g + 1) * 0.072, 0.24, 0.62), 3) for g in (4, 6, 8)] == [0.62, 0.682, 0.754]
    assert chained_cycle(0.5, 0.24, 0.62) < PipelineTimes(0.5, 0.24, 0.62).overlapped_cycle  # eq. 2: 0.86


def test_two_blocks_ahead_make_the_cycle_the_verification_wherever_a_block_is_drafted_within_it():
    """D = 2: go2-paper's rounds are T_q at every γ whose block fits in T_q; a third of the loop when
    drafting is longer, half the verification and the round trip when the link is."""
    assert [chained_cycle((g + 1) * 0.072, 0.24, 0.62, depth=2) for g in (4, 6, 7)] == [0.62] * 3
    assert chained_cycle(1.5, 0.24, 0.62, depth=2) == pytest.approx((0.62 + 0.24 + 1.5) / 3)
    assert chained_cycle(0.1, 1.0, 0.62, depth=2) == pytest.approx((0.62 + 1.0) / 2)
    for depth in (0, 3):
        with pytest.raises(ValueError):
            chained_cycle(0.5, 0.24, 0.62, depth=depth)
    for alpha in (0.8, 0.95):  # a cheaper full hit never asks for a shorter block
        assert pipelined_gamma(alpha, 0.072, 0.62, 0.24, 16, depth=2) >= pipelined_gamma(alpha, 0.072, 0.62, 0.24, 16)


def test_pipelined_gamma_maximises_the_pipelines_rate_among_blocks_that_fit_a_verification():
    """Go2's times (T_p 72 ms, T_q 620 ms, 2T_c 240 ms): γ maximises τ/E[T_async] with the chained cycle
    among the γ whose block drafted ahead ((γ+1)T_p) is done within T_q, and its modelled rate is at least
    the paper's fixed γ = 4's where 4 fits; drafting for free makes the longest block best, a drafter
    slower than half a verification the serial γ* (``serial``); a costlier link per draft token shortens γ."""
    def rate(alpha, gamma, t_p=0.072, t_q=0.62, rtt=0.24):
        hit = alpha**gamma
        cycle = hit * chained_cycle((gamma + 1) * t_p, rtt, t_q) + (1 - hit) * (gamma * t_p + rtt + t_q)
        return expected_round_tokens(alpha, gamma) / cycle

    fits = [g for g in range(1, 17) if (g + 1) * 0.072 <= 0.62]
    assert fits == list(range(1, 8))
    for alpha in (0.5, 0.8, 0.95):
        gamma = pipelined_gamma(alpha, 0.072, 0.62, 0.24, 16)
        assert gamma in fits and rate(alpha, gamma) == max(rate(alpha, g) for g in fits)
        assert rate(alpha, gamma) >= rate(alpha, 4)
    assert pipelined_gamma(0.98, 0.072, 0.62, 0.24, 16) == 7  # the model alone would take 16: cut at the verdict
    assert pipelined_gamma(0.95, 0.0, 0.62, 0.24, 16) == 16
    # a drafter slower than half a verification: no block drafted ahead fits, the serial optimum is taken
    assert pipelined_gamma(0.8, 1.0, 0.62, 0.24, 16) == 1 and pipelined_gamma(0.8, 1.0, 0.62, 0.24, 16, serial=9) == 9
    assert pipelined_gamma(0.99, 0.0045, 0.009, 0.003, 16, serial=16) == 16  # loopback's times: γ = 1 alone fits
    assert pipelined_gamma(0.8, 0.2, 0.62, 0.24, 16, serial=9) == 2  # γ = 1 and 2 fit: the pipeline's
    assert pipelined_gamma(0.98, 0.0035, 0.010, 0.150, 16, serial=16) == 16  # wifi: a long round trip, serial
    assert pipelined_gamma(0.8, 0.072, 0.62, 0.24, 16, t_rtt_token=0.05) < pipelined_gamma(0.8, 0.072, 0.62, 0.24, 16)
    with pytest.raises(ValueError):
        pipelined_gamma(0.8, 0.072, 0.62, 0.24, 0)
