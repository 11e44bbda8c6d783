"""γ policies: fixed γ; TK-SLT's ODLD/AS² with a probe round after its spacing of cloud-only tokens."""

from __future__ import annotations

from edge_spec_ros.edge.gamma import PROBE_BUDGET, AdaptiveGamma, FixedGamma, RoundTiming
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
