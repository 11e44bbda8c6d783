"""Robot-side decoding over the network: cloud-only AR (the baseline), edge-cloud SD and FSD.

Latency models (FSD paper, Table 4): AR 2T_c + nT_q; SD (n/τ)(2T_c + γT_p + T_q);
FSD (n/τ)(2T_c + rγT_p + (1 − r)T_r + T_q). SD and FSD emit exactly the same tokens for the same
seed: a cached pre-draft is bit-identical to the draft SD would compute from the same prefix.

Legend: n — tokens; τ — tokens per round; γ — draft length; r — cache miss rate; T_p, T_q, T_c —
draft forward, verification, one-way communication; T_r — waiting for a pre-draft on a hit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from edge_spec_ros.decoding.metrics import DecodeStats
from edge_spec_ros.decoding.reference import DecodeConfig, DecodeResult, append_until_stop
from edge_spec_ros.edge.client import VerifierClient, VerifierError
from edge_spec_ros.edge.predraft import PreDrafter
from edge_spec_ros.models.drafter import Draft, Drafter
from edge_spec_ros.models.kv_cache import KVCache
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.spec.queues import POLICIES
from edge_spec_ros.spec.sampling import PositionalRNG
from edge_spec_ros.wire.messages import DraftBlock, ExitResult, Generate, Open, Tokens

MODES = ("ar", "sd", "fsd")


@dataclass(frozen=True)
class EdgeConfig:
    """threads: N pre-draft workers (FSD); client_policy / server_policy: Q_p and Q_e order (Table 7);
    tp_s / tq_s: emulated draft-forward and verification times (0: real compute only)."""

    decode: DecodeConfig = field(default_factory=DecodeConfig)
    threads: int = 4
    client_policy: str = "priority"
    server_policy: str = "priority"
    tp_s: float = 0.0
    tq_s: float = 0.0

    def __post_init__(self) -> None:
        for policy in (self.client_policy, self.server_policy):
            if policy not in POLICIES:
                raise ValueError(f"queue policy {policy!r} is not one of {POLICIES}")


class EdgeDecoder:
    """Runs one decision in a chosen mode against a remote verifier."""

    def __init__(self, client: VerifierClient, drafter: Drafter | None, config: EdgeConfig) -> None:
        self.client = client
        self.drafter = drafter
        self.config = config

    def decode(self, mode: str, prompt: EncodedPrompt, image: bytes) -> DecodeResult:
        """``prompt``: the robot's encoding of instruction + image; ``image``: the same image as sent
        (JPEG/PNG bytes, travels once)."""
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        if mode != "ar" and self.drafter is None:
            raise ValueError(f"mode {mode} needs a drafter")
        c = self.config
        stats = DecodeStats(mode.upper())
        t0 = time.perf_counter()
        request = Open(input_ids=prompt.input_ids.numpy().astype(np.int32), image=image,
                       temperature=c.decode.sampling.temperature, seed=c.decode.seed, want_exits=mode == "fsd",
                       queue_policy=c.server_policy, compute_tq_s=c.tq_s)
        sid, opened = self.client.open(request)
        stats.prefill_s = time.perf_counter() - t0
        try:
            if mode == "ar":
                tokens = self._cloud_ar(sid, stats, t0)
            else:
                tokens = self._speculative(sid, prompt, stats, t0, pre_draft=mode == "fsd")
        finally:
            self.client.end(sid)
        traffic = self.client.traffic.pop(sid)
        stats.bytes_up, stats.bytes_down = traffic.up_bytes, traffic.down_bytes
        stats.wall_s = time.perf_counter() - t0
        stats.tokens = len(tokens)
        return DecodeResult(tokens, stats)

    def _cloud_ar(self, sid: bytes, stats: DecodeStats, t0: float) -> list[int]:
        d = self.config.decode
        sent = time.perf_counter()
        self.client.send(sid, Generate(d.max_new_tokens, d.stop_tokens))
        out: list[int] = []
        while True:
            msg = self.client.receive(sid)
            if not isinstance(msg, Tokens):
                raise VerifierError(0, f"expected Tokens, got {type(msg).__name__}")
            stats.server_s += msg.compute_s
            stats.rounds += 1
            if not out:
                stats.ttft_s = time.perf_counter() - t0
            out.extend(int(t) for t in msg.tokens)
            if msg.is_final:
                break
        stats.round_trip_s = time.perf_counter() - sent
        stats.verify_s = stats.round_trip_s
        # the cloud counted the same budget and stops; this also cuts at a stop token it missed
        done: list[int] = []
        append_until_stop(done, out, d)
        return done

    def _speculative(self, sid: bytes, prompt: EncodedPrompt, stats: DecodeStats, t0: float,
                     pre_draft: bool) -> list[int]:
        c, d = self.config, self.config.decode
        rng = PositionalRNG(d.seed)
        kv = self.drafter.start(prompt)
        seq = prompt.input_ids.tolist()
        predrafter = PreDrafter(self.drafter, c.threads, c.client_policy, d.gamma, d.sampling, rng,
                                c.tp_s) if pre_draft else None
        out: list[int] = []
        try:
            draft = self._draft(kv, seq, stats, rng)
            for round_ in range(d.max_new_tokens + 1):
                sent = time.perf_counter()
                self.client.send(sid, DraftBlock(round=round_, position=draft.position,
                                                 tokens=np.asarray(draft.tokens, dtype=np.int32),
                                                 q=None if draft.q is None else draft.q.numpy()))
                stats.rounds += 1
                stats.drafted += draft.gamma
                if predrafter is not None:
                    predrafter.begin_round(round_, seq, kv.fork())
                final, earliest = self._await_final(sid, round_, predrafter)
                round_trip = time.perf_counter() - sent
                stats.round_trip_s += round_trip
                stats.server_s += final.compute_s
                stats.round_overheads_s.append(round_trip - final.compute_s)
                tokens = tuple(int(t) for t in final.tokens)
                stats.accepted += final.accepted
                seq.extend(tokens)
                first = not out
                done = append_until_stop(out, tokens, d)
                if first:
                    stats.ttft_s = time.perf_counter() - t0
                if done:
                    return out
                hit = predrafter.take(tokens) if predrafter is not None else None
                if hit is not None:
                    stats.cache_hits += 1
                    stats.hit_exit_sum += earliest.get(tokens, hit.layer)
                    draft, kv = hit.draft, hit.kv
                else:
                    stats.cache_misses += predrafter is not None
                    draft = self._draft(kv, seq, stats, rng)
            raise VerifierError(0, "decode did not finish within its token budget")  # unreachable
        finally:
            if predrafter is not None:
                predrafter.close()

    def _draft(self, kv: KVCache, seq: list[int], stats: DecodeStats, rng: PositionalRNG) -> Draft:
        d = self.config.decode
        t = time.perf_counter()
        draft = self.drafter.draft(kv, seq, d.gamma, d.sampling, rng, self.config.tp_s)
        stats.draft_s += time.perf_counter() - t
        stats.draft_forwards += d.gamma
        return draft

    def _await_final(self, sid: bytes, round_: int, predrafter: PreDrafter | None
                     ) -> tuple[ExitResult, dict[tuple[int, ...], int]]:
        """Receive until the round's final exit; early exits feed the pre-drafter. Returns the final
        result and, per early output, the earliest exit layer that produced it."""
        earliest: dict[tuple[int, ...], int] = {}
        while True:
            msg = self.client.receive(sid)
            if not isinstance(msg, ExitResult):
                raise VerifierError(0, f"expected ExitResult, got {type(msg).__name__}")
            if msg.round != round_:
                continue  # a late early exit of an earlier round
            if msg.is_final:
                return msg, earliest
            tokens = tuple(int(t) for t in msg.tokens)
            earliest[tokens] = min(earliest.get(tokens, msg.layer), msg.layer)
            if predrafter is not None:
                predrafter.offer(round_, tokens, msg.confidence, msg.layer)
