"""The robot decoder's long-lived parts: one set of pre-draft threads and one γ controller serve every
decision of a decoder; close(), a ``with`` block or dropping the decoder ends the threads; the γ
controller sees each round's own measured draft time. Outputs stay the verifier's greedy output."""

from __future__ import annotations

import gc
import time

import pytest

from edge_spec_ros.cloud.local_link import LocalVerifierLink
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.edge import draft_sources, long_lived
from edge_spec_ros.edge.modes import EdgeConfig, EdgeDecoder
from edge_spec_ros.edge.predraft import PreDrafter
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.draft_length import DraftLengthController, SpeculationChoice

CONFIG = DecodeConfig(max_new_tokens=12, gamma=3)
DECISIONS = 4
WAIT_S = 10.0


@pytest.fixture(scope="module")
def setup(target_model, encoder, text_prompt):
    """(link, drafter, prompt, the verifier's own greedy tokens)."""
    verifier = EarlyExitVerifier(target_model)
    prompt = text_prompt
    return (LocalVerifierLink(verifier, encoder), Drafter(truncated_copy(target_model, 2)), prompt,
            autoregressive(verifier, prompt, CONFIG).tokens)


@pytest.fixture
def built(monkeypatch):
    """Every PreDrafter the decoders build."""
    seen: list[PreDrafter] = []

    class Counted(PreDrafter):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            seen.append(self)

    monkeypatch.setattr(long_lived, "PreDrafter", Counted)
    return seen


def alive(predrafter: PreDrafter) -> int:
    return sum(w.is_alive() for w in predrafter._workers)


def wait_until(predicate) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_decisions_share_one_set_of_predraft_threads(setup, built):
    link, drafter, prompt, greedy = setup
    decoder = EdgeDecoder(link, drafter, EdgeConfig(decode=CONFIG, threads=2))
    decoder.decode("sd", prompt, b"")
    assert not built  # no early exits, no pre-draft threads
    for mode in ["fsd"] * DECISIONS + ["pico-fsd", "sd"]:
        assert decoder.decode(mode, prompt, b"").tokens == greedy, mode
        assert len(built) == 1 and alive(built[0]) == 2
    decoder.close()
    assert alive(built[0]) == 0


def test_a_new_thread_count_rebuilds_the_predrafter(setup, built):
    link, drafter, prompt, greedy = setup
    with EdgeDecoder(link, drafter, EdgeConfig(decode=CONFIG, threads=2)) as decoder:
        decoder.decode("fsd", prompt, b"")
        decoder.config = EdgeConfig(decode=CONFIG, threads=1)
        assert decoder.decode("fsd", prompt, b"").tokens == greedy
        assert len(built) == 2 and alive(built[0]) == 0 and alive(built[1]) == 1
    assert alive(built[1]) == 0  # leaving the block closed the decoder


def test_a_dropped_decoder_stops_its_threads(setup, built):
    link, drafter, prompt, _ = setup
    decoder = EdgeDecoder(link, drafter, EdgeConfig(decode=CONFIG, threads=2))
    decoder.decode("fsd", prompt, b"")
    del decoder  # never closed, as by a caller that builds a decoder per decision
    gc.collect()
    wait_until(lambda: alive(built[0]) == 0)


def test_the_gamma_controller_persists_and_sees_each_rounds_own_draft_time(setup, monkeypatch):
    link, drafter, prompt, greedy = setup
    drafted: list[float] = []  # T_SLM per token of each round's draft, as its source measured it
    observed: list[float] = []  # what the controller was told
    draft = draft_sources.DraftChain.draft

    def spy(chain, *args):
        sourced = draft(chain, *args)
        drafted.append(sourced.t_token_s)
        return sourced

    class Speculating(DraftLengthController):
        """Always speculates (the schedule is not under test), records what it observes."""

        def choice(self) -> SpeculationChoice:
            return SpeculationChoice(True, CONFIG.gamma, 2.0)

        def observe(self, accepted, n, t_token, *rest) -> None:
            observed.append(t_token)
            super().observe(accepted, n, t_token, *rest)

    monkeypatch.setattr(draft_sources.DraftChain, "draft", spy)
    monkeypatch.setattr(long_lived, "DraftLengthController", Speculating)
    edge = EdgeConfig(decode=CONFIG, threads=2, adaptive_gamma=True, measured_fallback=False)  # the model decides
    rounds: dict[str, int] = {}
    with EdgeDecoder(link, drafter, edge) as decoder:
        for mode in ("fsd", "pico-fsd", "fsd", "pico", "pico-fsd", "sd"):
            decoder.config = edge  # same priors: same controller
            result = decoder.decode(mode, prompt, b"")
            assert result.tokens == greedy, mode
            rounds[mode] = rounds.get(mode, 0) + result.stats.rounds
        # one controller per mode, for all of its decisions
        assert {m: policy.controller.observations for m, (_, policy) in decoder._parts.adaptive.items()} == rounds
    assert observed == drafted and all(t > 0 for t in observed)
