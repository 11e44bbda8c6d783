"""The constrained verifier alone, the reference of grammar-constrained decoding's exactness tests."""

from __future__ import annotations

from edge_spec_ros.decoding.reference import DecodeConfig
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.constraint import mask_logits
from edge_spec_ros.spec.sampling import PositionalRNG, Stream, choose


def constrained_autoregressive(verifier: EarlyExitVerifier, prompt, constraint, config: DecodeConfig) -> list[int]:
    """The constrained verifier alone (``decoding.reference.autoregressive`` with every row masked by the
    automaton after the reply so far): its greedy output is what every mode must emit."""
    rng = PositionalRNG(config.seed)
    kv = verifier.start(prompt)
    seq, out, state = prompt.input_ids.tolist(), [], constraint.start()
    while len(out) < config.max_new_tokens:
        logits = mask_logits(verifier.logits(kv, seq, len(seq) - 1)[-1], state.mask())
        token, _ = choose(logits, config.sampling, rng, Stream.TARGET, len(seq))
        state.advance(token)
        seq.append(token)
        out.append(token)
        if token in config.stop_tokens:
            break
    return out
