"""The first block rides with the Open (edge/first_block.py): drafted while the Open travels, sent
right behind it, verified after the prefill, in every speculative mode; greedy output stays the
verifier's own token for token; a link that cannot carry it, the option off, and AS² handing the
decision to the cloud from its start all take today's sequence (Open, Opened, then the first draft)."""

from __future__ import annotations

import pytest

from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.edge import long_lived
from edge_spec_ros.edge.first_block import FirstBlockPlan, first_gamma, observed_open_times
from edge_spec_ros.edge.gamma import FIRST_CLOUD_PROBE_ROUNDS, AdaptiveGamma, FixedGamma
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.edge.registry import MODES, get_mode
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.draft_length import DraftLengthController, SpeculationChoice
from edge_spec_ros.spec.pipeline import OpenTimes, first_block_gamma
from first_block_link import LoggedLocalLink, OpenOnlyLink

SPECULATIVE = [m for m in MODES if get_mode(m).speculative]
CONFIG = DecodeConfig(max_new_tokens=20, gamma=3)


@pytest.fixture(scope="module")
def setup(target_model, encoder, text_prompt):
    verifier = EarlyExitVerifier(target_model)
    return verifier, encoder, Drafter(truncated_copy(target_model, 2)), text_prompt, \
        autoregressive(verifier, text_prompt, CONFIG).tokens


def decisions(log: list[tuple[str, str, int]]) -> list[list[tuple[str, str, int]]]:
    """The link's log cut into decisions, each from its Open."""
    out: list[list] = []
    for entry in log:
        if entry[1] == "Open":
            out.append([])
        out[-1].append(entry)
    return out


def first_block_rode(decision: list[tuple[str, str, int]]) -> bool:
    """Round 0's whole block left before Opened arrived (and right after the Open)."""
    opened = decision.index(("down", "Opened", -1))
    return ("up", "DraftBlock", 0) in decision[:opened]


@pytest.mark.parametrize("mode", SPECULATIVE)
def test_greedy_with_the_first_block_equals_target_greedy(setup, mode):
    verifier, encoder, drafter, prompt, greedy = setup
    link = LoggedLocalLink(verifier, encoder)
    with EdgeDecoder(link, drafter, EdgeConfig(decode=CONFIG, threads=2)) as decoder:
        results = [decoder.decode(mode, prompt, b"") for _ in range(2)]
    assert [r.tokens for r in results] == [greedy, greedy]
    for decision in decisions(link.log):
        assert decision[0] == ("up", "Open", -1) and first_block_rode(decision), mode
        assert decision[1][:2] == ("up", "DraftBlock"), mode  # right behind the Open (or its partial first part)
    s = results[0].stats
    assert s.rounds >= 1 and s.drafted >= CONFIG.gamma and s.ttft_s > 0 and s.prefill_s > 0


@pytest.mark.parametrize("mode", ["sd", "dssd", "pico"])
def test_a_link_without_open_with_takes_todays_sequence(setup, mode):
    verifier, encoder, drafter, prompt, greedy = setup
    link = OpenOnlyLink(verifier, encoder)
    with EdgeDecoder(link, drafter, EdgeConfig(decode=CONFIG, threads=2)) as decoder:
        assert decoder.decode(mode, prompt, b"").tokens == greedy
    (decision,) = decisions(link.log)
    assert decision[:2] == [("up", "Open", -1), ("down", "Opened", -1)] and not first_block_rode(decision)


def test_the_option_off_takes_todays_sequence(setup):
    verifier, encoder, drafter, prompt, greedy = setup
    link = LoggedLocalLink(verifier, encoder)
    with EdgeDecoder(link, drafter, EdgeConfig(decode=CONFIG, threads=2, first_block=False)) as decoder:
        assert decoder.decode("fsd", prompt, b"").tokens == greedy
    (decision,) = decisions(link.log)
    assert decision[:2] == [("up", "Open", -1), ("down", "Opened", -1)]


def test_a_decision_as2_hands_to_the_cloud_sends_no_first_block(setup, monkeypatch):
    verifier, encoder, drafter, prompt, greedy = setup

    class Cloud(DraftLengthController):
        def choice(self) -> SpeculationChoice:
            return SpeculationChoice(False, CONFIG.gamma, 0.5)

    monkeypatch.setattr(long_lived, "DraftLengthController", Cloud)
    link = LoggedLocalLink(verifier, encoder)
    edge = EdgeConfig(decode=CONFIG, threads=2, adaptive_gamma=True, measured_fallback=False)
    with EdgeDecoder(link, drafter, edge) as decoder:
        result = decoder.decode("sd", prompt, b"")
    assert result.tokens == greedy and result.stats.cloud_fallback == 1
    (decision,) = decisions(link.log)
    assert decision[:2] == [("up", "Open", -1), ("down", "Opened", -1)]


def test_first_gamma_fixed_adaptive_and_off():
    fixed = EdgeConfig(decode=CONFIG)
    assert first_gamma(fixed, FixedGamma(), None) == FirstBlockPlan(CONFIG.gamma)
    assert first_gamma(EdgeConfig(decode=CONFIG, first_block=False), FixedGamma(), None) is None
    adaptive = EdgeConfig(decode=CONFIG, adaptive_gamma=True, max_gamma=12)
    policy = AdaptiveGamma(DraftLengthController(0.8, 0.01, 0.01, max_gamma=12))
    assert first_gamma(adaptive, policy, None).gamma0 == policy.controller.choice().gamma  # nothing measured yet
    times = OpenTimes(t_open=0.30, t_p=0.072, t_q=0.62, t_c=0.12)
    gamma0 = first_gamma(adaptive, policy, times).gamma0
    assert gamma0 == first_block_gamma(policy.controller.alpha, times, 12) and gamma0 * times.t_p <= times.t_open


def test_open_times_are_measured_and_averaged():
    stats = DecodeStats("SD", prefill_s=0.4, rounds=2, draft_forwards=4, draft_s=0.2, server_s=1.0,
                        round_overheads_s=[0.2, 0.3, 0.24])
    stats.draft_prefill_s = 0.03
    first = observed_open_times(stats, None)
    assert first == OpenTimes(0.4, 0.05, 0.5, 0.12, t_pre=0.03)
    again = observed_open_times(stats, OpenTimes(0.2, 0.05, 0.5, 0.12, t_pre=0.01))
    assert again.t_open == pytest.approx(0.3) and again.t_p == pytest.approx(0.05)
    assert again.t_pre == pytest.approx(0.02)
    assert observed_open_times(DecodeStats("SD"), first) is first  # no speculative round: nothing learnt
    # in process a round trip less the server's T_q may come out below 0: no negative time is learnt
    fast = DecodeStats("SD", prefill_s=0.01, rounds=1, draft_forwards=2, draft_s=0.02, server_s=0.01,
                       round_overheads_s=[-0.002])
    assert observed_open_times(fast, None) == OpenTimes(0.01, 0.01, 0.01, 0.0)


SLOW_TP_S = 0.2  # an emulated draft step far longer than an in-process Open's round trip


def test_the_opens_round_trip_is_seen_when_opened_comes_not_after_the_drafting(setup):
    """The first block is drafted on a thread of its own while the decision waits for ``Opened``: a
    block whose drafting (γ₀T_p) outlasts the Open's round trip does not count as the Open's (t_open
    of ``OpenTimes``, which bounds the next γ₀); the output is still the verifier's own."""
    verifier, encoder, drafter, prompt, _ = setup
    short = DecodeConfig(max_new_tokens=4, gamma=3)
    edge = EdgeConfig(decode=short, threads=2, tp_s=SLOW_TP_S)
    with EdgeDecoder(LocalVerifierLink(verifier, encoder), drafter, edge) as decoder:
        result = decoder.decode("sd", prompt, b"")
    assert result.tokens == autoregressive(verifier, prompt, short).tokens
    assert result.stats.prefill_s < short.gamma * SLOW_TP_S <= result.stats.draft_s


def test_a_decision_opened_with_the_cloud_asks_the_policy_once():
    """AS²'s answer at the opening counts as the decision's first: a hand-over at the Open is not asked
    (and counted) again by the first round; a probe round due at the Open rides with it as its first
    block; a decision opened again asks afresh; a cloud probe due waits for a later round."""
    class Cloud(DraftLengthController):  # AS² says the cloud, a probe after 10 cloud-only tokens
        def choice(self) -> SpeculationChoice:
            return SpeculationChoice(False, 4, 0.5)

        def probe_spacing(self, budget: float) -> int:
            return 10

    policy = AdaptiveGamma(Cloud(0.8, 0.01, 0.01, max_gamma=12), measured=False)
    assert policy.opening(48) is None and policy.hand_overs == 1
    assert policy.gamma(48) is None and policy.hand_overs == 1  # the first round: the opening's answer
    assert policy.opening(48) is None and policy.gamma(48) is None and policy.hand_overs == 2
    policy.since_probe = 10  # a probe is due at the next decision's opening: its first block is the probe
    assert policy.opening(48) == 4 and policy.probes == 1 and policy.since_probe == 0
    policy.opening(48)  # handed over; the decision fails and opens again: asked afresh, counted again
    assert policy.opening(48) is None and policy.hand_overs == 4
    speculating = AdaptiveGamma(DraftLengthController(0.9, 0.01, 0.01, max_gamma=12))
    speculating.spec_s, speculating.spec_rounds = 0.1, 10  # measured speculating, the cloud not yet: a probe due
    assert speculating.opening(48) is not None and speculating.cloud_probes == 0  # not at the opening
    assert speculating.gamma(48) is None and speculating.cloud_probes == 1  # at the next round


def test_round_0_takes_the_openings_answer_and_a_counted_cloud_probe_runs(setup, monkeypatch):
    """With a first block, round 0's γ is AS²'s answer at the opening, not a second question: a cloud
    probe due at the opening waits for a later round and then runs (it measures the cloud); none is
    counted that no cloud-only chunk ran for."""
    verifier, encoder, drafter, prompt, greedy = setup

    class Speculate(DraftLengthController):  # AS²'s model says speculate (the cloud in process is cheap)
        def choice(self) -> SpeculationChoice:
            return SpeculationChoice(True, CONFIG.gamma, 0.5)

    monkeypatch.setattr(long_lived, "DraftLengthController", Speculate)
    link = LoggedLocalLink(verifier, encoder)
    with EdgeDecoder(link, drafter, EdgeConfig(decode=CONFIG, threads=2, adaptive_gamma=True)) as decoder:
        assert decoder.decode("fsd", prompt, b"").tokens == greedy
        ((_, policy),) = decoder._parts.adaptive.values()
        # speculation measured, the cloud not yet: a cloud probe is due from the next question on
        policy.spec_s, policy.spec_rounds, policy.cloud_probes = 0.01, FIRST_CLOUD_PROBE_ROUNDS, 0
        policy.cloud.first_s = policy.cloud.token_s = 0.0
        assert decoder.decode("fsd", prompt, b"").tokens == greedy
    last = decisions(link.log)[-1]
    assert first_block_rode(last)
    generates = sum(1 for entry in last if entry[:2] == ("up", "Generate"))  # cloud-only chunks that ran
    assert generates >= policy.cloud_probes >= 1 and policy.cloud.first_s > 0.0 and not policy._probing_cloud
