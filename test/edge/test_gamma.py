"""γ policies: fixed γ; TK-SLT's ODLD/AS² with a probe round after its spacing of cloud-only tokens; the
measured wall times per token of both regimes overruling the model once known, probed both ways."""

from __future__ import annotations

import pytest

from edge_spec_ros.edge.gamma import (
    CLOUD_PROBE_TOKENS, FIRST_CLOUD_PROBE_ROUNDS, PROBE_BUDGET, WALL_ROUNDS, AdaptiveGamma, CloudCost, CloudWall,
    DecisionLength, FixedGamma, RoundTiming,
)
from edge_spec_ros.spec.draft_length import DraftLengthController


def test_fixed_gamma_is_the_configured_one():
    policy = FixedGamma()
    policy.begin(5)
    policy.observe(RoundTiming(2, 5, 0.01, 0.1, 0.05))
    assert policy.gamma() == 5


def test_a_round_reports_its_uplink_time_per_draft_token():
    assert RoundTiming(1, 4, 0.01, round_trip_s=0.5, t_verify_s=0.1).t_transmit_token_s == 0.1
    assert RoundTiming(1, 4, 0.01, round_trip_s=0.05, t_verify_s=0.1).t_transmit_token_s == 0.0


def test_adaptive_gamma_hands_over_and_probes_after_its_spacing():
    controller = DraftLengthController(0.05, 0.5, 0.5)  # speculation cannot pay
    policy = AdaptiveGamma(controller)
    policy.begin(4)
    assert policy.gamma() is None
    spacing = controller.probe_spacing(PROBE_BUDGET)
    assert policy.cloud_chunk() == spacing
    policy.observe_cloud(spacing, 0.1 * spacing)
    assert policy.gamma() == 1  # the probe: γ* speculates once, the controller gets fresh evidence
    assert policy.gamma() is None  # still hopeless: the same decision goes to the cloud
    policy.begin(4)
    assert policy.gamma() is None  # the count starts again


def test_adaptive_gamma_follows_odld_when_speculation_pays():
    controller = DraftLengthController(0.9, 0.01, 0.01)
    policy = AdaptiveGamma(controller)
    policy.begin(4)
    assert policy.gamma() == controller.choice().gamma > 1
    policy.observe(RoundTiming(accepted=4, drafted=4, t_token_s=0.001, round_trip_s=0.11, t_verify_s=0.1))
    assert controller.observations == 1


def spec_round(policy: AdaptiveGamma, wall_s: float, emitted: int = 4) -> None:
    policy.observe(RoundTiming(accepted=emitted - 1, drafted=4, t_token_s=0.001, round_trip_s=0.011,
                               t_verify_s=0.01, wall_s=wall_s, emitted=emitted))


def cloud(tokens: int, first_s: float, per_token_s: float) -> CloudWall:
    """A chunk whose first token arrives after ``first_s`` and the rest every ``per_token_s``."""
    return CloudWall(first_s=first_s, first_count=1, rest_s=(tokens - 1) * per_token_s, rest_count=tokens - 1)


def test_measured_wall_times_overrule_a_model_that_favours_speculation():
    """The model says speculate (a = 1 prior); after two rounds a cloud probe measures the cloud, which
    is cheaper per token; speculation goes on until ``WALL_ROUNDS`` rounds have measured it, then the
    decision goes to the cloud, and a probe round comes back after its spacing."""
    controller = DraftLengthController(0.9, 0.01, 0.01)
    policy = AdaptiveGamma(controller)
    assert controller.choice().use_speculation
    for _ in range(FIRST_CLOUD_PROBE_ROUNDS):
        assert policy.gamma(24) == controller.choice().gamma
        spec_round(policy, wall_s=0.040)  # 10 ms per emitted token
    assert policy.gamma(16) is None and policy.cloud_chunk() == CLOUD_PROBE_TOKENS  # the cloud probe
    policy.observe_cloud(CLOUD_PROBE_TOKENS, 0.008, cloud(CLOUD_PROBE_TOKENS, first_s=0.004, per_token_s=0.003))
    assert policy.cloud_probes == 1 and policy.cloud_s(12) < policy.spec_s and not policy.measured()
    for _ in range(WALL_ROUNDS - FIRST_CLOUD_PROBE_ROUNDS):
        assert policy.gamma(12) == controller.choice().gamma  # still measuring speculation
        spec_round(policy, wall_s=0.040)
    assert policy.measured() and policy.gamma(12) is None  # measured: the cloud is cheaper, whatever the model says
    spacing = policy.cloud_chunk()
    assert spacing > 1
    policy.observe_cloud(spacing, 0.002 * spacing, cloud(spacing, first_s=0.004, per_token_s=0.003))
    assert policy.gamma(12) == controller.choice().gamma and policy.probes == 1  # the probe back


def test_a_slow_links_fixed_cost_is_shared_by_the_tokens_left():
    """On a slow link (300 ms to the first token, 2 ms per token after) the cloud is dear for a few
    tokens and cheap for many: speculation at 20 ms per token wins the last 8 tokens, not the next 200."""
    policy = AdaptiveGamma(DraftLengthController(0.9, 0.01, 0.01))
    for _ in range(FIRST_CLOUD_PROBE_ROUNDS):
        policy.gamma(200)
        spec_round(policy, wall_s=0.080)  # 20 ms per token
    assert policy.gamma(200) is None  # the cloud probe
    policy.observe_cloud(CLOUD_PROBE_TOKENS, 0.01, cloud(CLOUD_PROBE_TOKENS, first_s=0.300, per_token_s=0.002))
    for _ in range(WALL_ROUNDS - FIRST_CLOUD_PROBE_ROUNDS):
        assert policy.gamma(200) is not None
        spec_round(policy, wall_s=0.080)
    assert policy.cloud_s(CLOUD_PROBE_TOKENS) > policy.spec_s > policy.cloud_s(200)
    assert policy.gamma(200) is None
    assert policy.gamma(8) is not None


def test_measured_speculation_that_pays_keeps_speculating_with_rare_cloud_probes():
    controller = DraftLengthController(0.9, 0.01, 0.01)
    policy = AdaptiveGamma(controller)
    for _ in range(FIRST_CLOUD_PROBE_ROUNDS):
        policy.gamma()
        spec_round(policy, wall_s=0.008)  # 2 ms per token
    assert policy.gamma() is None
    policy.observe_cloud(CLOUD_PROBE_TOKENS, 0.02, cloud(CLOUD_PROBE_TOKENS, first_s=0.006, per_token_s=0.006))
    gammas = []
    for _ in range(40):  # 160 speculative tokens
        g = policy.gamma()
        gammas.append(g)
        if g is None:
            policy.observe_cloud(policy.cloud_chunk(), 0.02, cloud(CLOUD_PROBE_TOKENS, 0.006, 0.006))
        else:
            spec_round(policy, wall_s=0.008)
    # a probe's excess (4 tokens × 4 ms) within 2 % of speculating at 2 ms per token: one per 400 tokens
    assert gammas.count(None) == 0 and policy.cloud_probes == 1


def test_a_cloud_measured_by_one_mode_spares_the_others_their_cloud_probe():
    """The cloud's wall times are the cloud's, not a mode's: a policy sharing a ``CloudCost`` another
    policy (or a cloud-only decision) measured weighs both regimes from its first rounds and spends no
    cloud probe of its own; one with a cost of its own probes."""
    shared = CloudCost()
    first = AdaptiveGamma(DraftLengthController(0.9, 0.01, 0.01), cloud=shared)
    first.observe_cloud(CLOUD_PROBE_TOKENS, 0.02, cloud(CLOUD_PROBE_TOKENS, first_s=0.006, per_token_s=0.006))
    assert shared.measured() and shared.per_token(CLOUD_PROBE_TOKENS) == pytest.approx(0.006)
    for cost, probes in ((shared, 0), (None, 1)):
        policy = AdaptiveGamma(DraftLengthController(0.9, 0.01, 0.01), cloud=cost)
        for _ in range(WALL_ROUNDS + 1):
            if policy.gamma(24) is None:
                policy.observe_cloud(CLOUD_PROBE_TOKENS, 0.02, cloud(CLOUD_PROBE_TOKENS, 0.006, 0.006))
            else:
                spec_round(policy, wall_s=0.008)  # 2 ms per token: speculation pays
        assert policy.measured() and policy.cloud_probes == probes


def test_without_wall_times_or_with_them_off_the_model_alone_decides():
    for measured, walls in ((True, False), (False, True)):
        controller = DraftLengthController(0.9, 0.01, 0.01)
        policy = AdaptiveGamma(controller, measured=measured)
        for _ in range(10):
            assert policy.gamma() == controller.choice().gamma
            if walls:
                spec_round(policy, wall_s=0.040)
            else:
                policy.observe(RoundTiming(3, 4, 0.001, 0.011, 0.01))
        assert policy.cloud_probes == 0


def test_a_pipelined_policy_prices_gamma_by_the_pipeline():
    """PicoSpec's modes: once a round has measured T_q, γ is ``spec.pipeline.pipelined_gamma`` over the
    controller's estimates (α, T_p = c·T_q, the link), not ODLD's serial γ*; before it, ODLD's; a serial
    policy keeps ODLD's."""
    from edge_spec_ros.spec.pipeline import pipelined_gamma

    serial, pipelined = (AdaptiveGamma(DraftLengthController(0.9, 0.01, 0.1, max_gamma=16), pipelined=p)
                         for p in (False, True))
    assert pipelined.gamma() == pipelined.controller.choice().gamma  # nothing measured yet
    for policy in (serial, pipelined):
        for _ in range(6):  # T_p 72 ms, T_q 620 ms, 240 ms of link per round, every draft accepted
            policy.observe(RoundTiming(4, 4, 0.072, 0.24 + 0.62, 0.62))
    c = pipelined.controller
    expected = pipelined_gamma(c.alpha, c.c * c.t_llm_s, c.t_llm_s, 0.24, 16)  # T_RTT: the median overhead
    assert pipelined.gamma() == expected and serial.gamma() == serial.controller.choice().gamma
    assert expected < serial.controller.choice().gamma  # the two models disagree here (7 against 16)
    next_door = AdaptiveGamma(DraftLengthController(0.9, 0.01, 0.1, max_gamma=16), pipelined=True)
    for _ in range(6):  # loopback's times: T_p 4.5 ms, T_q 9 ms, 3 ms of link; no block drafted ahead fits
        next_door.observe(RoundTiming(4, 4, 0.0045, 0.003 + 0.009, 0.009))
    assert next_door.gamma() == next_door.controller.choice().gamma > 1  # the serial optimum, not γ = 1


def test_speculation_is_priced_by_its_rounds_mean_wall_time_over_their_mean_tokens():
    """A round rejected at its first token (one token for a whole round's time) weighs as its share of the
    rounds' time and tokens, not as its own ratio; the first rounds weigh as a running mean."""
    policy = AdaptiveGamma(DraftLengthController(0.9, 0.01, 0.01))
    for wall_s, emitted in ((0.020, 5), (0.020, 5), (0.020, 5), (0.034, 1)):
        spec_round(policy, wall_s, emitted)
    assert policy.spec_s == pytest.approx((0.020 * 3 + 0.034) / (5 * 3 + 1))  # 5.9 ms, not 12.2 (the mean ratio)


def test_with_the_cloud_measured_speculation_is_measured_before_the_cloud_can_take_over():
    """The model says the cloud (a poor α), the cloud is measured (by another mode) and cheaper: the first
    ``WALL_ROUNDS`` rounds speculate all the same, measuring speculation, and only then the cloud decides.
    Without the cloud measured the model decides from the start, as in the paper."""
    shared = CloudCost()
    shared.observe(cloud(CLOUD_PROBE_TOKENS, first_s=0.004, per_token_s=0.003))
    for cost in (shared, None):
        controller = DraftLengthController(0.3, 0.5, 0.5)
        assert not controller.choice().use_speculation
        policy = AdaptiveGamma(controller, cloud=cost)
        if cost is None:
            assert policy.gamma(24) is None
            continue
        for _ in range(WALL_ROUNDS):
            assert policy.gamma(24) is not None
            spec_round(policy, wall_s=0.040)  # 10 ms per token
        assert policy.measured() and policy.gamma(24) is None


def test_a_round_whose_round_trip_says_nothing_of_the_link_leaves_the_link_estimates():
    """A first block that rode with the Open (edge/first_block.py) waited for the prefill: its round trip
    teaches α, T_SLM and T_LLM, not b nor the link's regression."""
    policy = AdaptiveGamma(DraftLengthController(0.5, 0.05, 0.05))
    policy.observe(RoundTiming(2, 4, 0.01, 0.5, 0.1, bytes_sent=400))
    c = policy.controller
    b, rounds, alpha, c_ratio = c.b, c.link.rounds, c.alpha, c.c
    policy.observe(RoundTiming(4, 4, 0.02, 0.1, 0.1, bytes_sent=400, link_measured=False))
    assert c.b == pytest.approx(b) and c.link.rounds == rounds
    assert c.alpha > alpha and c.c > c_ratio and c.observations == 2


def test_a_hand_over_is_priced_over_the_tokens_a_decision_is_expected_to_have_left():
    """Decisions that stop at their stop token (about 20 tokens of a 48-token budget), 8 tokens in: the
    cloud's round trip (150 ms, then 8 ms a token) shared by the budget's 40 tokens left would be 11.5 ms
    a token and beat speculation's 15; over the 12 tokens such a decision is expected to have left it is
    19.8, and the decision goes on speculating. Before any decision has ended, the budget is all there is."""
    lengths = DecisionLength()
    lengths.observe(16, budget=16)  # ran to its budget: decisions are at least this long, nothing more
    assert lengths.left(48, 40) == 40
    for tokens in (28, 25, 34, 29):
        lengths.observe(tokens, budget=48)
    assert lengths.mean == pytest.approx(29.0) and lengths.left(48, 48) == 29 and lengths.left(48, 40) == 21
    assert lengths.left(48, 10) == 1 and lengths.left(48, 0) == 1  # past the mean: one more token at least
    shared = CloudCost()
    shared.observe(cloud(CLOUD_PROBE_TOKENS, first_s=0.150, per_token_s=0.008))
    for known, speculates in ((DecisionLength(), False), (DecisionLength(20.0, 4), True)):
        policy = AdaptiveGamma(DraftLengthController(0.9, 0.01, 0.01), cloud=shared, lengths=known)
        policy.begin(4, budget=48)
        for _ in range(WALL_ROUNDS):
            spec_round(policy, wall_s=0.060)  # 15 ms per token
        assert policy.measured() and (policy.gamma(40) is not None) == speculates


def test_a_block_drafted_ahead_takes_the_current_gamma_without_a_hand_over():
    """``ahead``: the γ of a block drafted while the round before it is verified, by the estimates as they
    are (the pipelined γ in a pipelined mode), with no hand-over nor probe counted; a fixed policy's γ."""
    fixed = FixedGamma()
    fixed.begin(5)
    assert fixed.ahead() == 5
    controller = DraftLengthController(0.3, 0.5, 0.5)  # the model would hand the decision to the cloud
    policy = AdaptiveGamma(controller, pipelined=True)
    assert policy.ahead() == controller.choice().gamma and policy.hand_overs == policy.probes == 0
    for _ in range(6):  # go2-paper's times: the pipelined γ
        policy.observe(RoundTiming(4, 4, 0.072, 0.24 + 0.62, 0.62))
    assert policy.ahead() == policy.pipeline_gamma(controller.choice().gamma) != controller.choice().gamma
