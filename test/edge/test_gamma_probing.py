"""AdaptiveGamma's way back from the cloud: hand-built timings where speculation loses (the policy hands
the decision to the cloud in chunks), and then wins again (a probe round sees it and speculation resumes)."""

from __future__ import annotations

import pytest

from edge_spec_ros.edge.gamma import PROBE_BUDGET, AdaptiveGamma, FixedGamma, RoundTiming
from edge_spec_ros.spec.draft_length import DraftLengthController

T_LLM = 0.010  # 10 ms verification
BYTES_PER_TOKEN = 200


def round_(accepted: int, gamma: int, rtt_s: float) -> RoundTiming:
    """A round whose link adds ``rtt_s`` of propagation (no transmission cost) to T_LLM."""
    return RoundTiming(accepted, gamma, t_token_s=0.001, round_trip_s=T_LLM + rtt_s, t_verify_s=T_LLM,
                       bytes_sent=BYTES_PER_TOKEN * gamma)


def cloud_until_probe(policy: AdaptiveGamma, limit: int = 100_000) -> int:
    """Hand the decision to the cloud chunk by chunk, as the decoder does, until γ() speculates;
    returns the cloud-only tokens decoded meanwhile."""
    tokens = 0
    while (gamma := policy.gamma()) is None:
        chunk = policy.cloud_chunk()
        assert chunk is not None and chunk >= 1
        policy.observe_cloud(chunk, chunk * T_LLM)  # the cloud's own token costs one T_LLM
        tokens += chunk
        assert tokens < limit, "never probed"
    assert gamma >= 1
    return tokens


def test_falls_back_when_speculation_loses_and_comes_back_when_it_wins():
    policy = AdaptiveGamma(DraftLengthController(0.5, 0.05, 0.05))
    policy.begin(4)
    assert policy.gamma() is not None  # the prior: speculate
    for _ in range(3):  # a 300 ms round trip against 10 ms verification and a poor drafter: speculation loses
        policy.observe(round_(1, 4, 0.300))
    assert policy.gamma() is None and policy.hand_overs == 1
    spacing = policy.controller.probe_spacing(PROBE_BUDGET)
    assert spacing > 100  # hopeless: probes are rare
    assert cloud_until_probe(policy) == spacing  # one chunk, up to the probe
    assert policy.probes == 1
    # conditions improve: the link is fast now and the drafter agrees; the probe round measures it
    for _ in range(6):
        policy.observe(round_(4, 4, 0.001))
    assert policy.controller.choice().use_speculation
    probes = policy.probes
    gamma = policy.gamma()
    assert gamma is not None and gamma > 1 and policy.probes == probes  # speculating on its own merit again


def test_probes_spend_at_most_the_budget_of_cloud_time():
    policy = AdaptiveGamma(DraftLengthController(0.5, 0.05, 0.05), probe_budget=0.05)
    for _ in range(5):
        policy.observe(round_(0, 4, 0.100))  # still losing every probe
    ctl = policy.controller
    total_cloud = 0
    for _ in range(5):
        total_cloud += cloud_until_probe(policy)
        policy.observe(round_(0, 2, 0.100))  # the probe loses again
    choice = ctl.choice()
    b, c, d, a = ctl.cost_ratios()
    assert not choice.use_speculation and policy.probes == 5
    # each probe round's cost beyond the tokens it yields stays within 5 % of the cloud time between probes
    excess = (1 + choice.gamma * (b + c) + d) - a * 1.0  # a losing probe yields about one token
    assert 5 * excess <= 0.05 * a * total_cloud * 1.5  # 1.5: estimates moved between probes


def test_a_chunk_ends_where_the_next_probe_is_due():
    policy = AdaptiveGamma(DraftLengthController(0.5, 0.05, 0.05))
    for _ in range(3):
        policy.observe(round_(0, 4, 0.100))
    assert policy.gamma() is None
    spacing = policy.controller.probe_spacing(PROBE_BUDGET)
    assert policy.cloud_chunk() == spacing
    policy.observe_cloud(spacing - 3, (spacing - 3) * T_LLM)
    left = policy.controller.probe_spacing(PROBE_BUDGET) - (spacing - 3)
    assert policy.gamma() is None and policy.cloud_chunk() == left


def test_fixed_gamma_never_hands_over():
    policy = FixedGamma()
    policy.begin(3)
    policy.observe(round_(0, 3, 10.0))
    assert policy.gamma() == 3 and policy.cloud_chunk() is None


def test_budget_is_checked():
    with pytest.raises(ValueError):
        AdaptiveGamma(DraftLengthController(0.5, 0.05, 0.05), probe_budget=1.0)
