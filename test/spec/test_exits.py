"""Unit tests for edge_spec_ros.spec.exits: exit confidence (eq. 4) and per-exit verification (eq. 5)."""

import math

import pytest
import torch

from edge_spec_ros.spec.exits import ExitVerdict, exit_confidence, verify_exit
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.spec.verify import Verdict, verify

# --------------------------------------------------------------------------- exit_confidence


def test_exit_confidence_hand_computed_vector():
    """S = max softmax(z): logits (0, ln 3, 0, 0) give 3/6 = 0.5; uniform logits give 1/V."""
    z = torch.tensor([0.0, math.log(3.0), 0.0, 0.0])
    assert exit_confidence(z).item() == pytest.approx(0.5, abs=1e-6)
    assert exit_confidence(torch.full((8,), 2.5)).item() == pytest.approx(1 / 8, abs=1e-6)
    assert exit_confidence(z).shape == ()


def test_exit_confidence_is_max_of_softmax_not_of_logits():
    """Confidence is a probability (softmax max), not the max logit, and is shift-invariant."""
    z = torch.tensor([5.0, 5.0, -10.0, -10.0, -10.0])
    s = exit_confidence(z).item()
    assert s == pytest.approx(0.5, abs=1e-5)
    assert exit_confidence(z + 100.0).item() == pytest.approx(s, abs=1e-5)


def test_exit_confidence_batch_shapes():
    """(..., V) → (...): per-row max softmax for (γ+1, V) and (B, γ+1, V) inputs."""
    rows = torch.tensor(
        [
            [0.0, math.log(3.0), 0.0, 0.0],  # 0.5
            [0.0, 0.0, 0.0, 0.0],  # 0.25
            [math.log(7.0), 0.0, 0.0, 0.0],  # 0.7
        ]
    )
    expected = torch.tensor([0.5, 0.25, 0.7])
    s = exit_confidence(rows)
    assert s.shape == (3,)
    assert torch.allclose(s, expected, atol=1e-6)
    batch = torch.stack([rows, rows.flip(0)])
    sb = exit_confidence(batch)
    assert sb.shape == (2, 3)
    assert torch.allclose(sb, torch.stack([expected, expected.flip(0)]), atol=1e-6)


def test_exit_confidence_stable_for_large_and_half_logits():
    """Large logits give ~1 without overflow; float16 input is computed in float32."""
    s = exit_confidence(torch.tensor([1000.0, 0.0, -1000.0, 0.0]))
    assert torch.isfinite(s) and s.item() == pytest.approx(1.0)
    s16 = exit_confidence(torch.tensor([0.0, math.log(3.0), 0.0, 0.0], dtype=torch.float16))
    assert s16.dtype == torch.float32
    assert s16.item() == pytest.approx(0.5, abs=1e-3)


# --------------------------------------------------------------------------- verify_exit

# γ = 2, V = 4: argmax per row [1, 2, 3]; confidences 0.5, 0.7, 0.4 (all distinct)
EXIT_LOGITS = torch.tensor(
    [
        [0.0, math.log(3.0), 0.0, 0.0],
        [0.0, 0.0, math.log(7.0), 0.0],
        [0.0, 0.0, 0.0, math.log(2.0)],
    ]
)
EXIT_CONF = [0.5, 0.7, 0.4]


@pytest.mark.parametrize("draft, delta", [([0, 2], 0), ([1, 0], 1), ([1, 2], 2)])
def test_verify_exit_confidence_is_taken_at_row_delta(draft, delta):
    """Greedy: confidence is S at row δ (the position of the exit's own token), not row 0 or the last."""
    ev = verify_exit(4, EXIT_LOGITS, draft, None, SamplingConfig(0.0), PositionalRNG(0), 0, is_final=False)
    assert ev.verdict.accepted == delta
    assert ev.confidence == pytest.approx(EXIT_CONF[delta], abs=1e-6)
    assert (ev.layer, ev.is_final) == (4, False)


def test_verify_exit_confidence_row_delta_sampled():
    """Sampled: over many positions the confidence always matches row δ of that exit's logits."""
    cfg = SamplingConfig(1.0)
    q = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.05, 0.025, 0.9, 0.025]])  # accept 0 w.p. 2/3, 2 w.p. 7/9
    deltas = set()
    for pos in range(0, 300, 3):
        ev = verify_exit(2, EXIT_LOGITS, [0, 2], q, cfg, PositionalRNG(8), pos, is_final=True)
        deltas.add(ev.verdict.accepted)
        assert ev.confidence == pytest.approx(EXIT_CONF[ev.verdict.accepted], abs=1e-6)
        assert ev.is_final
    assert deltas == {0, 1, 2}


def test_verify_exit_identical_logits_give_identical_verdict():
    """An early exit with the final exit's logits returns the final verdict (same uniforms); other logits need not."""
    cfg = SamplingConfig(0.9)
    final_logits = EXIT_LOGITS
    other_logits = EXIT_LOGITS.flip(-1)
    q = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]])
    draft = [1, 3]
    rng = PositionalRNG(21)
    differs = 0
    for pos in range(0, 300, 3):
        final = verify_exit(6, final_logits, draft, q, cfg, rng, pos, is_final=True)
        early = verify_exit(2, final_logits.clone(), draft, q, cfg, rng, pos, is_final=False)
        assert early.verdict == final.verdict
        assert early.confidence == final.confidence
        assert final.verdict == verify(draft, final_logits, q, cfg, rng, pos)
        other = verify_exit(3, other_logits, draft, q, cfg, rng, pos, is_final=False)
        differs += other.verdict != final.verdict
    assert differs > 0  # the equality above is not vacuous


def test_verify_exit_returns_exit_verdict_fields():
    """ExitVerdict carries layer, verdict, confidence (a float) and is_final unchanged."""
    ev = verify_exit(7, EXIT_LOGITS, [1, 2], None, SamplingConfig(0.0), PositionalRNG(0), 0, is_final=True)
    assert isinstance(ev, ExitVerdict)
    assert ev.verdict == Verdict(2, (1, 2, 3))
    assert isinstance(ev.confidence, float)
    assert (ev.layer, ev.is_final) == (7, True)
