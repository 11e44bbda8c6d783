"""Reference decoders in one process: target-only autoregressive and speculative (draft + verify).

They define what every distributed mode must reproduce: with T = 0 the speculative output equals
the autoregressive output token for token; with T > 0 it is distributed as the target's.

Legend: γ — draft length; δ — accepted draft tokens; τ — tokens per round; α — acceptance rate;
p — target distribution; q — draft distribution.

A drafter with fewer ids than the target (V_q < V_p) is verified with q padded by zeros to V_p
(``spec.vocab``): still exact. V_q > V_p and a drafted id ≥ V_p raise ValueError.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig, Stream, choose
from edge_spec_ros.spec.sparse import DraftDistribution
from edge_spec_ros.spec.verify import verify
from edge_spec_ros.spec.vocab import draft_in_vocab


@dataclass(frozen=True)
class DecodeConfig:
    """max_new_tokens: n; gamma: γ; stop_tokens: ids that end the decode (kept in the output)."""

    max_new_tokens: int = 48
    gamma: int = 4
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0
    stop_tokens: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or self.gamma < 1:
            raise ValueError(f"max_new_tokens and gamma must be >= 1, got {self.max_new_tokens}, {self.gamma}")


@dataclass(frozen=True)
class DecodeResult:
    tokens: list[int]
    stats: DecodeStats


def append_until_stop(out: list[int], new: tuple[int, ...] | list[int], config: DecodeConfig) -> bool:
    """Append ``new`` to ``out`` up to a stop token or the token budget; True when decoding is done."""
    for token in new:
        out.append(token)
        if token in config.stop_tokens or len(out) >= config.max_new_tokens:
            return True
    return False


def autoregressive(verifier: EarlyExitVerifier, prompt: EncodedPrompt, config: DecodeConfig) -> DecodeResult:
    """Target-only decoding: one forward pass of the target per token."""
    stats = DecodeStats("AR")
    rng = PositionalRNG(config.seed)
    t0 = time.perf_counter()
    kv = verifier.start(prompt)
    stats.prefill_s = time.perf_counter() - t0
    seq = prompt.input_ids.tolist()
    out: list[int] = []
    done = False
    while not done:
        t = time.perf_counter()
        logits = verifier.logits(kv, seq, len(seq) - 1)[-1]  # (V,)
        token, _ = choose(logits, config.sampling, rng, Stream.TARGET, len(seq))
        stats.verify_s += time.perf_counter() - t
        stats.rounds += 1
        seq.append(token)
        done = append_until_stop(out, (token,), config)
        if len(out) == 1:
            stats.ttft_s = time.perf_counter() - t0
    stats.wall_s = time.perf_counter() - t0
    stats.tokens = len(out)
    return DecodeResult(out, stats)


def speculative(drafter: Drafter, verifier: EarlyExitVerifier, prompt: EncodedPrompt,
                config: DecodeConfig, distribution: DraftDistribution | None = None,
                gammas: Sequence[int] = ()) -> DecodeResult:
    """Speculative decoding: the drafter proposes γ tokens, the target verifies them in one pass.
    ``distribution``: the drafter samples from a top-K / reduced-precision q (TK-SLT). ``gammas``: the γ
    of each round in order, ``config.gamma`` after them (a decoder's own partition into blocks,
    ``DecodeStats.block_gammas``: sampled, the tokens depend on it, since a bonus token is drawn from p
    where a longer block would have drafted and verified one)."""
    stats = DecodeStats("SD")
    rng = PositionalRNG(config.seed)
    t0 = time.perf_counter()
    draft_kv = drafter.start(prompt)
    target_kv = verifier.start(prompt)
    stats.prefill_s = time.perf_counter() - t0
    seq = prompt.input_ids.tolist()
    out: list[int] = []
    done = False
    while not done:
        t = time.perf_counter()
        gamma = gammas[stats.rounds] if stats.rounds < len(gammas) else config.gamma
        draft = drafter.draft(draft_kv, seq, gamma, config.sampling, rng, distribution=distribution)
        t1 = time.perf_counter()
        q = draft_in_vocab(draft.q, verifier.stack.vocab_size, draft.tokens)  # (γ, V_p); before the target reads
        logits = verifier.logits(target_kv, seq + list(draft.tokens), len(seq) - 1)  # (γ+1, V_p)
        verdict = verify(draft.tokens, logits, q, config.sampling, rng, draft.position)
        stats.draft_s += t1 - t
        stats.verify_s += time.perf_counter() - t1
        stats.rounds += 1
        stats.drafted += draft.gamma
        stats.block_gammas.append(draft.gamma)
        stats.accepted += verdict.accepted
        seq.extend(verdict.tokens)
        first = not out
        done = append_until_stop(out, verdict.tokens, config)
        if first:
            stats.ttft_s = time.perf_counter() - t0
    stats.wall_s = time.perf_counter() - t0
    stats.tokens = len(out)
    return DecodeResult(out, stats)
