"""PicoSpec's throughput model (Section 3.4, eqs. 5-9).

Legend: γ — draft length; α — per-token acceptance probability; T_draft — drafting γ tokens on the
edge; T_RTT — network round trip; T_verify — one verification in the cloud; EL — expected tokens
generated per cycle; R — throughput (tokens per second).
"""

from __future__ import annotations

from dataclasses import dataclass


def expected_length(alpha: float, gamma: int) -> float:
    """EL = (1 − α^γ) / (1 − α) (eq. 5); γ as α → 1, 1 as α → 0."""
    if not 0 <= alpha <= 1 or gamma < 1:
        raise ValueError(f"need 0 <= α <= 1 and γ >= 1, got α={alpha}, γ={gamma}")
    return float(gamma) if alpha == 1 else (1 - alpha**gamma) / (1 - alpha)


@dataclass(frozen=True)
class PipelineTimes:
    t_draft: float
    t_rtt: float
    t_verify: float

    def __post_init__(self) -> None:
        if min(self.t_draft, self.t_rtt, self.t_verify) < 0:
            raise ValueError(f"times must be >= 0, got {self}")

    @property
    def sync_cycle(self) -> float:
        """L_sync = T_draft + T_RTT + T_verify (eq. 6)."""
        return self.t_draft + self.t_rtt + self.t_verify

    @property
    def overlapped_cycle(self) -> float:
        """L_async on a full hit: max(T_draft, T_RTT + T_verify) (eq. 2)."""
        return max(self.t_draft, self.t_rtt + self.t_verify)


def sync_throughput(alpha: float, gamma: int, times: PipelineTimes) -> float:
    """R_sync = EL / L_sync (eq. 7)."""
    return expected_length(alpha, gamma) / times.sync_cycle


def async_cycle(alpha: float, gamma: int, times: PipelineTimes) -> float:
    """E[T_async] = α^γ max(T_draft, T_RTT + T_verify) + (1 − α^γ)(T_draft + T_RTT + T_verify) (eqs. 8-9)."""
    hit = alpha**gamma
    return hit * times.overlapped_cycle + (1 - hit) * times.sync_cycle


def expected_round_tokens(alpha: float, gamma: float) -> float:
    """τ(α, γ) = (1 − α^(γ+1)) / (1 − α): tokens a round yields, the target's own token included (EL of
    eq. 5 at γ + 1); γ + 1 at α = 1. γ may be a mean over rounds (fractional)."""
    if not 0 <= alpha <= 1 or gamma < 0:
        raise ValueError(f"need 0 <= α <= 1 and γ >= 0, got α={alpha}, γ={gamma}")
    return gamma + 1.0 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def latency_immunity_bound(t_verify: float, alpha: float, gamma: float) -> float:
    """Seconds per token when the pipeline hides drafting and the network entirely ("latency
    immunity", Sec. 3.4) and only the verifier's occupancy remains: T_verify / τ(α, γ). No pipelined
    schedule with one verification per round beats it."""
    return t_verify / expected_round_tokens(alpha, gamma)


def async_throughput(alpha: float, gamma: int, times: PipelineTimes) -> float:
    """R_async = EL / E[T_async]."""
    return expected_length(alpha, gamma) / async_cycle(alpha, gamma, times)


@dataclass(frozen=True)
class OpenTimes:
    """Measured times of a decision's start: t_open — the Open's round trip to ``Opened`` (its upload,
    the verifier's prefill and 2T_c: what cloud-only decoding waits before its first ``Generate``);
    t_p — T_p, one draft step; t_q — T_q, one verification; t_c — T_c, one way; t_pre — T_pre, the
    drafter's own prefill of the prompt, which comes before its first draft step."""

    t_open: float
    t_p: float
    t_q: float
    t_c: float
    t_pre: float = 0.0

    def __post_init__(self) -> None:
        if min(self.t_open, self.t_p, self.t_q, self.t_c, self.t_pre) < 0:
            raise ValueError(f"times must be >= 0, got {self}")

    def drafted(self, gamma: int) -> float:
        """When a first block of γ drafted from the prompt is ready (t = 0: the Open leaves): T_pre + γT_p."""
        return self.t_pre + gamma * self.t_p

    def first_verdict(self, gamma: int) -> float:
        """When the verdict on a first block of γ drafted from the prompt while the Open travels is back
        (t = 0: the Open leaves): the verifier has prefilled at t_open − T_c, the block reaches it at
        T_pre + γT_p + T_c, and its verdict takes T_q + T_c more."""
        return self.t_q + self.t_c + max(self.t_open - self.t_c, self.drafted(gamma) + self.t_c)

    @property
    def cloud_first_token(self) -> float:
        """Cloud-only decoding's first token: the Open's round trip, then a Generate's, 2T_c + T_q."""
        return self.t_open + 2 * self.t_c + self.t_q


def first_block_gamma(alpha: float, times: OpenTimes, gamma_max: int) -> int:
    """γ₀ of the first block, drafted from the prompt while the Open travels and is prefilled.

    Drafting it costs T_pre + γ₀·T_p (the drafter's prefill of the prompt, then γ₀ steps), hidden by the
    Open's travel and prefill as long as T_pre + γ₀T_p ≤ t_open − 2T_c; beyond, each draft step delays
    the first verdict by T_p. Within T_pre + γ₀T_p ≤ t_open the first verdict
    (``OpenTimes.first_verdict``) is never later than cloud-only decoding's first token
    (``OpenTimes.cloud_first_token``: t_open + 2T_c + T_q); among those γ (1 ≤ γ ≤ ``gamma_max``) γ₀
    maximises the first round's rate τ(α, γ) / first_verdict(γ), the smallest on a tie. A γ of 1 when
    even one step does not fit: the block still saves the round trip that drafting after ``Opened``
    would cost."""
    if gamma_max < 1:
        raise ValueError(f"need gamma_max >= 1, got {gamma_max}")
    fits = [g for g in range(1, gamma_max + 1) if times.drafted(g) <= times.t_open] or [1]
    return max(fits, key=lambda g: (expected_round_tokens(alpha, g) / max(times.first_verdict(g), 1e-9), -g))


def chained_cycle(t_draft: float, t_rtt: float, t_verify: float, depth: int = 1) -> float:
    """L_async on a full hit as this implementation runs the pipeline, steady state, with ``depth`` D
    blocks drafted ahead of the one being verified. A departure from eq. 2 (max(T_draft, T_RTT +
    T_verify), the next block leaving with the verdict): a block drafted ahead leaves the moment it is
    finished, chained behind the block being verified. D = 1: the robot drafts block k + 2 from block
    k's verdict on, and the cloud starts it at max(c_k + T_verify + T_RTT + T_draft, c_{k+1} +
    T_verify), c_k the start of block k: a cycle of max(T_verify, (T_verify + T_RTT + T_draft) / 2).
    Measured under ``go2-paper`` at fixed γ = 4, 6, 8 (T_draft = (γ + 1) x 72 ms): 623, 682, 759 ms a
    round against 620, 682, 754 modelled; eq. 2 gives 860 for all three. D = 2: block k + 2 is drafted
    from block k − 1's verdict on and leaves at block k's, so the cloud starts it at max(c_{k-1} +
    T_verify + T_RTT + T_draft, c_k + T_verify + T_RTT, c_{k+1} + T_verify): max(T_verify, (T_verify
    + T_RTT) / 2, (T_verify + T_RTT + T_draft) / 3). Valid while the block drafted ahead is finished
    before the verdict it follows (T_draft ≤ T_RTT + T_verify with D = 1, T_draft ≤ T_verify with D =
    2); later, it is cut there."""
    if depth not in (1, 2):
        raise ValueError(f"need depth 1 or 2, got {depth}")
    if depth == 1:
        return max(t_verify, (t_verify + t_rtt + t_draft) / 2)
    return max(t_verify, (t_verify + t_rtt) / 2, (t_verify + t_rtt + t_draft) / 3)


def pipelined_gamma(alpha: float, t_p: float, t_q: float, t_rtt: float, gamma_max: int,
                    t_rtt_token: float = 0.0, depth: int = 1, serial: int = 1) -> int:
    """γ of PicoSpec's pipeline: the γ that maximises τ(α, γ) / E[T_async] (eqs. 8-9: α^γ of the rounds
    a full hit, whose cycle is ``chained_cycle`` with D = ``depth`` and T_draft = (γ + 1)T_p, a block
    drafted ahead being the guess of the cloud's token and γ more; the others the synchronous cycle
    γT_p + T_RTT + T_verify of eq. 6), the smallest on a tie, with T_RTT = ``t_rtt`` +
    γ·``t_rtt_token`` (the block's transmission grows with γ). Among the γ (1 ≤ γ ≤ ``gamma_max``)
    whose block drafted ahead is finished within one verification, (γ + 1)T_p ≤ T_verify: a whole
    round trip to spare before the verdict, so that a slower draft step or link does
    not cut it (beyond, measured rounds exceed the model: ``go2-paper`` at γ = 10, 918 ms against 841;
    with D = 2 at fixed γ = 9, 11, 12, 755-807, 960 and 998-1,021 ms against T_q = 620, although
    ``chained_cycle`` allows T_draft up to 2T_q − T_RTT there). The serial optimum (ODLD) prices a round
    at γT_p + T_RTT + T_q instead; it is ``serial`` γ, taken where it is the faster by that price (a
    round trip long against T_q: under ``wifi``, T_RTT 150 ms and T_q 10 ms, γ = 2 fits and yields 3
    tokens every 80 ms, the serial γ = 16 about 15 every 216 ms) or where no γ ≥ 2 fits (a draft step
    takes half a verification or more, a verifier next door): the blocks drafted ahead are then cut
    short by the verdicts, each round pays its own overheads, and γ = 1 was the slowest γ measured
    (``loopback``, fixed γ = 1, 2, 4, 8, 16: 0.21, 0.17, 0.17, 0.15 and 0.12 s a decision, where the
    model, blind to the robot's own time per round, rated γ = 1 above 16). A γ policy of a pipelined
    mode asks this one."""
    if gamma_max < 1:
        raise ValueError(f"need gamma_max >= 1, got {gamma_max}")

    def rate(gamma: int) -> float:
        rtt = t_rtt + gamma * t_rtt_token
        hit = alpha**gamma
        cycle = hit * chained_cycle((gamma + 1) * t_p, rtt, t_q, depth) + (1 - hit) * (gamma * t_p + rtt + t_q)
        return expected_round_tokens(alpha, gamma) / max(cycle, 1e-12)

    serial = min(max(serial, 1), gamma_max)
    fits = [g for g in range(1, gamma_max + 1) if (g + 1) * t_p <= t_q]
    if len(fits) < 2:
        return serial
    best = max(fits, key=lambda g: (rate(g), -g))
    serial_rate = expected_round_tokens(alpha, serial) / max(serial * t_p + t_rtt + serial * t_rtt_token + t_q, 1e-12)
    return best if rate(best) >= serial_rate else serial
