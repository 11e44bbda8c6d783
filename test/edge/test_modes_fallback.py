"""A decode that AS² hands to the cloud comes back to speculation: a cloud-only chunk, then a probe
round, then speculative rounds again, in one decision, in every exact mode; the greedy output stays the
verifier's own, token for token, across the switches; the drafter's catch-up is the cost of resuming."""

from __future__ import annotations

import time

import pytest

from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.edge import long_lived
from edge_spec_ros.edge.gamma import FixedGamma, RoundTiming
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.draft_length import DraftLengthController, SpeculationChoice

CONFIG = DecodeConfig(max_new_tokens=24, gamma=3)
CLOUD_FIRST = 2  # AS² says "cloud" for the first choices of a decision, "speculate" after
SPACING = 5  # cloud-only tokens between probes


@pytest.fixture(scope="module")
def setup(target_model, encoder, text_prompt):
    verifier = EarlyExitVerifier(target_model)
    return (LocalVerifierLink(verifier, encoder), Drafter(truncated_copy(target_model, 2)), text_prompt,
            autoregressive(verifier, text_prompt, CONFIG).tokens)


@pytest.mark.parametrize("mode", ["sd", "fsd", "dssd", "tkslt", "lowpay", "pico", "pico-fsd"])
def test_a_decode_handed_to_the_cloud_comes_back_and_stays_exact(setup, monkeypatch, mode):
    link, drafter, prompt, greedy = setup
    choices: list[bool] = []

    class Scripted(DraftLengthController):
        """AS² says speculation loses for the first CLOUD_FIRST choices, wins after."""

        def choice(self) -> SpeculationChoice:
            choices.append(len(choices) >= CLOUD_FIRST)
            return SpeculationChoice(choices[-1], CONFIG.gamma, 2.0 if choices[-1] else 0.5)

        def probe_spacing(self, budget: float) -> int:
            return SPACING

    monkeypatch.setattr(long_lived, "DraftLengthController", Scripted)
    # the scripted model decides: measured wall times would overrule it (edge.gamma)
    edge = EdgeConfig(decode=CONFIG, threads=2, adaptive_gamma=True, measured_fallback=False)
    with EdgeDecoder(link, drafter, edge) as decoder:
        result = decoder.decode(mode, prompt, b"")
        policy = decoder._parts.adaptive[mode][1]
    assert result.tokens == greedy
    s = result.stats
    assert s.cloud_fallback == 1 and s.drafted > 0  # went to the cloud, and came back
    assert policy.controller.cloud_tokens == SPACING  # one chunk up to the probe, then speculation
    assert policy.probes == 1 and choices[:CLOUD_FIRST + 1] == [False, False, True]
    # the probe resumed speculation: the drafter's prefill and its catch-up with the cloud's tokens are
    # the cost of resuming, not of the probe round (whose wall time prices speculation)
    assert policy.resume_s >= s.draft_prefill_s > 0.0


@pytest.mark.parametrize("mode", ["sd", "pico"])
def test_the_decoder_measures_both_regimes_and_stays_exact(setup, mode):
    """With measured wall times (the default): rounds and cloud-only chunks report theirs, a cloud
    probe measures the cloud early in the first decision, and the output is the verifier's own. Two
    decisions with γ <= 4: speculation is measured over ``WALL_ROUNDS`` rounds, none of them a
    decision's first or last."""
    link, drafter, prompt, greedy = setup
    with EdgeDecoder(link, drafter, EdgeConfig(decode=CONFIG, threads=2, adaptive_gamma=True, max_gamma=4,
                                               alpha_prior=0.9, b_prior=0.01, c_prior=0.01)) as decoder:
        for _ in range(2):
            assert decoder.decode(mode, prompt, b"").tokens == greedy
        policy = decoder._parts.adaptive[mode][1]
    assert policy.spec_s > 0 and policy.cloud.first_s > 0 and policy.cloud.token_s > 0 and policy.measured()
    assert policy.cloud_probes + policy.hand_overs >= 1 and policy.controller.cloud_tokens >= 1


def test_a_cloud_only_decision_measures_the_cloud_for_every_adaptive_mode(setup):
    """The cloud's wall times are shared by a decoder's modes (``edge.gamma.CloudCost``): after an AR
    decision the adaptive modes find the cloud measured and spend no cloud probe of their own."""
    link, drafter, prompt, greedy = setup
    edge = EdgeConfig(decode=CONFIG, threads=2, adaptive_gamma=True, alpha_prior=0.9, b_prior=0.01, c_prior=0.01)
    with EdgeDecoder(link, drafter, edge) as decoder:
        assert decoder.decode("ar", prompt, b"").tokens == greedy
        assert decoder._parts.cloud.measured()
        for mode in ("sd", "pico"):
            assert decoder.decode(mode, prompt, b"").tokens == greedy
            policy = decoder._parts.adaptive[mode][1]
            assert policy.cloud is decoder._parts.cloud and policy.spec_rounds >= 1 and policy.cloud_probes == 0


def test_a_decision_handed_to_the_cloud_counts_its_first_token_as_it_streams_in(setup, monkeypatch):
    """The time to first token of a decision AS² hands to the cloud is its first Tokens message's, as
    cloud-only decoding's, not the end of the chunk that carried it."""
    link, drafter, prompt, greedy = setup
    received: list[float] = []

    class Cloud(DraftLengthController):
        def choice(self) -> SpeculationChoice:
            return SpeculationChoice(False, CONFIG.gamma, 0.5)

        def probe_spacing(self, budget: float) -> int:
            return CONFIG.max_new_tokens  # one chunk: the whole decision

    class Timed(type(link)):
        def receive(self, sid: bytes, timeout_s: float | None = None):
            message = super().receive(sid, timeout_s)
            received.append(time.perf_counter())
            return message

    monkeypatch.setattr(long_lived, "DraftLengthController", Cloud)
    timed = Timed(link.verifier, link.encoder)
    edge = EdgeConfig(decode=CONFIG, threads=2, adaptive_gamma=True, measured_fallback=False)
    with EdgeDecoder(timed, drafter, edge) as decoder:
        before = time.perf_counter()
        result = decoder.decode("sd", prompt, b"")
    s = result.stats
    assert result.tokens == greedy and s.cloud_fallback == 1 and s.drafted == 0
    assert len(received) > 2  # Opened, then the tokens as they stream
    assert before + s.ttft_s < received[-1], "the first token was counted at the chunk's end"


def test_a_decisions_first_and_last_rounds_report_no_wall_time(setup, monkeypatch):
    """Speculation's wall time per token (AS²'s measured cost) comes from the rounds between a decision's
    first block (it waited for the prefill) and its last round (cut by the budget or a stop token): neither
    is what a round of speculation costs."""
    link, drafter, prompt, greedy = setup
    timings: list[RoundTiming] = []
    monkeypatch.setattr(FixedGamma, "observe", lambda self, timing: timings.append(timing))
    with EdgeDecoder(link, drafter, EdgeConfig(decode=CONFIG, threads=2)) as decoder:
        result = decoder.decode("sd", prompt, b"")
    assert result.tokens == greedy and len(timings) == result.stats.rounds >= 3
    assert timings[0].wall_s is None and timings[-1].wall_s is None
    assert all(timing.wall_s is not None and timing.emitted > 0 for timing in timings[1:-1])
