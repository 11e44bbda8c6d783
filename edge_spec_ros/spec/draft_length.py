"""Draft length and speculate-or-not decisions of TK-SLT (Zheng & Yang, "Communication-Efficient
Collaborative LLM Inference via Distributed Speculative Decoding"; Sec. II-C, IV, V, Table I).

Legend (the paper's notation):
  α — per-token acceptance probability of a draft token (eq. 8), i.i.d. across positions;
  γ — draft length (tokens drafted on the edge per draft-verify round);
  T_LLM — one run of the target (verifies γ tokens in parallel); T_SLM — one draft-token step;
  T_V — uplink time of one draft token's distribution (eq. 3);
  b = T_V / T_LLM — transmission cost ratio per draft token (eq. 5);
  c = T_SLM / T_LLM — drafting cost ratio per draft token (eq. 5);
  L = b + c — the per-draft-token overhead relative to one target run (eq. 6), so that a round takes
      T_inf = (1 + γL) T_LLM (eq. 7);
  S_inf(γ) — speedup of distributed speculative decoding over the standalone (cloud-only) target,
      S_inf(γ) = (1 − α^{γ+1}) / ((1 + γL)(1 − α)) (eq. 11);
  γ0 — the real stationary point of S_inf (eq. 21, Lambert W_{-1}); γ* — the best integer γ (Thm. 2).

ODLD (Algorithm 1) computes γ* and S*_inf = S_inf(γ*); AS² (Algorithm 2) speculates iff S*_inf > 1.
``DraftLengthController`` drives both online from measured rounds. Everything here is pure: no I/O.

Propagation delay (a departure the paper's model leaves out): eq. (7) charges the link per draft
token only (T_V), but a real link also costs a fixed delay per round, d·T_LLM (the round trip's
propagation), whatever γ is, while cloud-only decoding pays it once per decision. A round then takes
T_LLM (1 + γL + d), and against a standalone target whose own token costs a·T_LLM (a = T_AR/T_LLM,
measured when the cloud decodes alone; 1 before) the speedup is

    S(γ) = a (1 − α^{γ+1}) / ((1 − α)(1 + γL + d)) = a/(1 + d) · S_inf(γ; L' = L/(1 + d)),

since 1 + γL + d = (1 + d)(1 + γL/(1 + d)). So ODLD with L' gives γ*, and AS² speculates iff
S(γ*) > 1 (``adaptive_selection_with_delay``; d = 0, a = 1 is Algorithm 2). The controller separates
T_V from d by regressing each round's link time (round trip − T_LLM) on the bytes it sent
(``LinkRegression``: intercept = propagation, slope = transmission cost per byte).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

from edge_spec_ros.extras import require

# the robot's γ policy; the cloud's install has no SciPy
lambertw = require("scipy.special", "robot", "the optimal draft length (spec/draft_length.py)").lambertw

DEFAULT_MAX_GAMMA = 64
# Speedups within this of 1 count as "no gain": S*(γ=1) = (1 + α)/(1 + L) is exactly 1 whenever α = L
# (two entries of Table I), and rounding must not decide those ties either way. Alg. 2 asks for S* > 1.
SPEEDUP_TIE_TOL = 1e-12
# The controller's α estimate is clamped into [ALPHA_MIN, ALPHA_MAX] ⊂ (0, 1): a run of fully accepted
# rounds measures α̂ = 1 (ODLD would then pin γ to max_gamma, the paper needs α < 1) and a run of
# immediate rejections α̂ = 0 (speculation could never look worthwhile again); clamping keeps both
# recoverable and inside the paper's domain 0 < α < 1 (eq. 17).
ALPHA_MIN = 0.01
ALPHA_MAX = 0.99
DEFAULT_SMOOTHING = 0.2  # EMA weight of the newest round: ~5 rounds of memory, reacts within a few rounds

# Below t = (1/L − 1) ln α ≈ −700, the Lambert argument −e^{t−1} of eq. (21) underflows: solve W there.
_UNDERFLOW_T = -699.0
# Above t ≈ −1e-8 the argument lies within ~1e-8 of the branch point −1/e, where 1 + e·x cancels; use
# the branch-point series there instead.
_BRANCH_T = -1e-8


@dataclass(frozen=True)
class DraftLength:
    """ODLD's answer (Algorithm 1): γ*, S*_inf = S_inf(γ*) (eq. 11) and γ0 (eq. 21).

    γ0 is +inf where S_inf grows without bound in γ (α = 1 with L < 1, or L = 0 with α > 0), −1 at
    α = 0 (the α → 0 limit of eq. 21) and nan where eq. (21) has no real solution (L > 1, or α = 1
    with L ≥ 1).
    """

    gamma: int  # γ*, in [1, max_gamma]
    speedup: float  # S*_inf
    gamma0: float  # γ0


@dataclass(frozen=True)
class SpeculationChoice:
    """AS²'s answer (Algorithm 2): speculate with ``gamma`` draft tokens iff ``use_speculation``.

    ``gamma`` and ``speedup`` are ODLD's γ* and S*_inf either way; when ``use_speculation`` is False
    they describe the best speculative option, which does not beat the standalone target (S* ≤ 1).
    """

    use_speculation: bool  # S*_inf > 1
    gamma: int  # γ*
    speedup: float  # S*_inf

    @property
    def effective_gamma(self) -> int:
        """Draft tokens to produce this round: γ* when speculating, 0 for standalone (cloud-only) decoding."""
        return self.gamma if self.use_speculation else 0

    @property
    def effective_speedup(self) -> float:
        """The speedup of the chosen mode: S*_inf when speculating, 1 for the standalone target."""
        return self.speedup if self.use_speculation else 1.0


# --------------------------------------------------------------------------- validation


def _check_alpha(alpha: float) -> float:
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:  # also rejects nan
        raise ValueError(f"acceptance rate α must be a probability in [0, 1], got {alpha}")
    return alpha


def _check_cost(name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"cost ratio {name} must be finite and ≥ 0, got {value}")
    return value


def _check_int(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be ≥ {minimum}, got {value}")
    return value


# --------------------------------------------------------------------------- eq. (11)


def speedup_ratio(alpha: float, gamma: int, L: float) -> float:
    """S_inf(γ) = (1 − α^{γ+1}) / ((1 + γL)(1 − α)) (eq. 11, Theorem 1).

    The numerator over (1 − α) is E[#tokens] per round (eq. 12) = Σ_{i=0}^{γ} α^i; it is evaluated as
    −expm1((γ+1) ln α)/(1 − α), which stays accurate as α → 1, and takes its limits exactly at the
    ends: α = 1 gives (γ + 1)/(1 + γL), α = 0 gives 1/(1 + γL). γ = 0 (no draft) gives S = 1.

    Raises ValueError unless α ∈ [0, 1], γ is an integer ≥ 0 and L is finite and ≥ 0.
    """
    alpha = _check_alpha(alpha)
    gamma = _check_int("draft length γ", gamma, 0)
    L = _check_cost("L", L)
    cost = 1.0 + gamma * L  # eq. (7), in units of T_LLM
    if alpha == 1.0:
        expected_tokens = float(gamma + 1)
    elif alpha == 0.0:
        expected_tokens = 1.0
    else:
        expected_tokens = -math.expm1((gamma + 1) * math.log(alpha)) / (1.0 - alpha)
    return expected_tokens / cost


# --------------------------------------------------------------------------- eq. (21)


def _wm1_plus_one(t: float) -> float:
    """W_{-1}(−e^{t−1}) + 1 for t < 0, i.e. the bracket of eq. (21) with t = (1/L − 1) ln α.

    scipy's lambertw on the ordinary range; near the branch point (t → 0⁻) the series
    W_{-1} = −1 − p − p²/3 − 11p³/72 − 43p⁴/540 with p = √(2(1 + e·x)) = √(−2 expm1(t)); and where the
    argument underflows (t ≲ −700) Newton's method on w + ln(−w) = t − 1 (the log of w e^w = x).
    """
    if t > _BRANCH_T:
        p = math.sqrt(-2.0 * math.expm1(t))
        return -p * (1.0 + p * (1.0 / 3.0 + p * (11.0 / 72.0 + p * 43.0 / 540.0)))
    if t < _UNDERFLOW_T:
        u = t - 1.0  # ln(−x)
        w = u - math.log(-u)  # asymptotic start: W_{-1}(x) ≈ ln(−x) − ln(−ln(−x))
        for _ in range(64):
            step = (w + math.log(-w) - u) / (1.0 + 1.0 / w)
            w -= step
            if abs(step) <= 4.0 * math.ulp(w):
                break
        return w + 1.0
    return float(lambertw(-math.exp(t - 1.0), k=-1).real) + 1.0


def _gamma0(alpha: float, L: float) -> float:
    """γ0 of eq. (21), extended to the edges the paper's constraints (17)-(20) exclude (see DraftLength)."""
    if L > 1.0 or (alpha == 1.0 and L >= 1.0):
        # Departure: for L ≥ 1 the Lambert argument −α^{1/L−1}/e leaves (−1/e, 0) (eq. 32) and there is
        # no interior stationary point; S_inf is then non-increasing in γ (each extra draft token adds
        # α^i ≤ 1 expected tokens at a cost L ≥ 1), so ODLD falls back to γ* = 1.
        return math.nan
    if alpha == 0.0:
        # Departure: α = 0 makes ln α = −∞; the α → 0 limit of eq. (21) is (1/L − 1) − 1/L = −1 → γ* = 1.
        return -1.0
    if alpha == 1.0 or L == 0.0:
        # Departure: every draft is accepted (α = 1, L < 1) or drafting is free (L = 0, b = c = 0):
        # S_inf strictly increases with γ, so the optimum is unbounded and ODLD takes max_gamma.
        return math.inf
    # L == 1 lands on the branch point W_{-1}(−1/e) = −1: γ0 = −1/L = −1 → γ* = 1, as for L > 1.
    log_alpha = math.log(alpha)
    t = (1.0 / L - 1.0) * log_alpha
    return _wm1_plus_one(t) / log_alpha - 1.0 / L


# --------------------------------------------------------------------------- Algorithms 1 and 2


def optimal_draft_length(
    alpha: float, b: float, c: float, max_gamma: int = DEFAULT_MAX_GAMMA
) -> DraftLength:
    """ODLD (Algorithm 1, Theorem 2): γ* maximising S_inf(γ) (eq. 11) over integers 1 ≤ γ ≤ max_gamma.

    γ0 from eq. (21) (L = b + c); γ* = 1 if γ0 < 1, else whichever of ⌊γ0⌋, ⌈γ0⌉ has the larger
    S_inf, ⌈γ0⌉ on ties. S_inf is unimodal in γ, so clamping to max_gamma keeps the best γ in range.

    Departures from the paper's domain (0 < α < 1, 0 < b + c < 1, b, c > 0), each justified in
    ``_gamma0``: α = 0 → 1; L ≥ 1 → 1; α = 1 or L = 0 → max_gamma (1 if α = 1 and L ≥ 1). Only L
    matters, so b = 0 or c = 0 alone is fine.

    Raises ValueError unless α ∈ [0, 1], b and c are finite and ≥ 0 and max_gamma is an integer ≥ 1.
    """
    alpha = _check_alpha(alpha)
    L = _check_cost("b", b) + _check_cost("c", c)
    max_gamma = _check_int("max_gamma", max_gamma, 1)
    gamma0 = _gamma0(alpha, L)
    if math.isnan(gamma0) or gamma0 < 1.0:
        gamma = 1
    elif gamma0 >= max_gamma:  # includes +inf
        gamma = max_gamma
    else:
        lo, hi = math.floor(gamma0), math.ceil(gamma0)
        gamma = hi if speedup_ratio(alpha, lo, L) <= speedup_ratio(alpha, hi, L) else lo
    return DraftLength(gamma=gamma, speedup=speedup_ratio(alpha, gamma, L), gamma0=gamma0)


def adaptive_selection(
    alpha: float, b: float, c: float, max_gamma: int = DEFAULT_MAX_GAMMA
) -> SpeculationChoice:
    """AS² (Algorithm 2): run ODLD and speculate iff S*_inf > 1, otherwise use the standalone target.

    Speedups within SPEEDUP_TIE_TOL of 1 count as no gain (standalone): S* = 1 exactly when γ* = 1
    and α = L, and rounding alone must not flip that choice.
    """
    best = optimal_draft_length(alpha, b, c, max_gamma)
    return SpeculationChoice(
        use_speculation=best.speedup > 1.0 + SPEEDUP_TIE_TOL, gamma=best.gamma, speedup=best.speedup
    )


def adaptive_selection_with_delay(
    alpha: float, b: float, c: float, d: float, a: float = 1.0, max_gamma: int = DEFAULT_MAX_GAMMA
) -> SpeculationChoice:
    """AS² with a fixed link delay per round: d = T_prop/T_LLM, and the standalone target's cost per
    token a·T_LLM (module docstring). γ* = ODLD(α, b/(1 + d), c/(1 + d)); speculate iff
    S(γ*) = a/(1 + d) · S_inf(γ*; L/(1 + d)) > 1. d = 0, a = 1 is ``adaptive_selection``.

    Raises ValueError unless α ∈ [0, 1], b, c, d are finite and ≥ 0 and a is finite and > 0."""
    d = _check_cost("d", d)
    a = float(a)
    if not (math.isfinite(a) and a > 0.0):
        raise ValueError(f"standalone cost ratio a must be finite and > 0, got {a}")
    scale = 1.0 + d
    best = optimal_draft_length(alpha, _check_cost("b", b) / scale, _check_cost("c", c) / scale, max_gamma)
    speedup = best.speedup * a / scale
    return SpeculationChoice(use_speculation=speedup > 1.0 + SPEEDUP_TIE_TOL, gamma=best.gamma, speedup=speedup)


def round_cost(alpha: float, gamma: int, L: float, d: float) -> tuple[float, float]:
    """(cost, tokens) of one speculative round in units of T_LLM: 1 + γL + d (eq. 7 plus the fixed
    delay) and the expected tokens it yields, Σ_{i=0}^{γ} α^i (eq. 12)."""
    gamma = _check_int("draft length γ", gamma, 1)
    L, d = _check_cost("L", L), _check_cost("d", d)
    tokens = speedup_ratio(alpha, gamma, 0.0)  # with L = 0 the ratio is the expected tokens per round
    return 1.0 + gamma * L + d, tokens


@dataclass(frozen=True)
class LinkFit:
    """A round's link time modelled as ``propagation_s`` + ``per_byte_s`` × bytes sent."""

    propagation_s: float  # intercept: the fixed delay of a round (both directions' propagation)
    per_byte_s: float  # slope: transmission cost per byte sent
    rounds: int  # observations behind the fit


# a = T_AR/T_LLM is capped at 1: a cloud-only token (one position) costs no more than verifying γ + 1
# positions, and a few slow cloud tokens (a busy verifier) must not make speculation look better
A_MAX = 1.0
MIN_RELATIVE_SPREAD = 0.02  # bytes must vary by this share of their mean before a slope is fitted


class LinkRegression:
    """Exponentially weighted least squares of a round's link time y (s) on its bytes x.

    Means, variance of x and covariance of x and y are kept centred (exponentially weighted Welford
    updates, weight ``smoothing`` on the newest round), so megabyte rounds lose no precision. The fit
    (``fit``) is the least-squares line, kept physical: slope ≥ 0 and intercept ≥ 0. While x has not
    varied (spread below MIN_RELATIVE_SPREAD of its mean, e.g. every round at the same γ) the two are
    not identifiable and the whole link time counts as propagation (slope 0): a controller that then
    tries another γ sends another size and the slope becomes measurable."""

    def __init__(self, smoothing: float = DEFAULT_SMOOTHING) -> None:
        smoothing = float(smoothing)
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.smoothing = smoothing
        self.rounds = 0
        self._mx = self._my = self._vxx = self._cxy = 0.0

    def observe(self, bytes_sent: float, link_s: float) -> None:
        x, y = float(bytes_sent), float(link_s)
        for name, v in (("bytes_sent", x), ("link_s", y)):
            if not (math.isfinite(v) and v >= 0.0):
                raise ValueError(f"{name} must be finite and ≥ 0, got {v}")
        if self.rounds == 0:
            self._mx, self._my = x, y
        else:
            w = self.smoothing
            dx, dy = x - self._mx, y - self._my
            self._mx += w * dx
            self._my += w * dy
            self._vxx = (1.0 - w) * (self._vxx + w * dx * dx)
            self._cxy = (1.0 - w) * (self._cxy + w * dx * dy)
        self.rounds += 1

    def fit(self) -> LinkFit:
        """The current line (0, 0 before any observation)."""
        mx, my = self._mx, self._my
        slope = 0.0
        if self.rounds > 1 and self._vxx > (MIN_RELATIVE_SPREAD * mx) ** 2 and self._vxx > 0.0:
            slope = max(0.0, self._cxy / self._vxx)
        intercept = my - slope * mx
        if intercept < 0.0:  # the line crosses below zero bytes: pass it through the origin instead
            intercept, slope = 0.0, (my / mx if mx > 0 else 0.0)
        return LinkFit(propagation_s=intercept, per_byte_s=slope, rounds=self.rounds)


# --------------------------------------------------------------------------- online driver


class DraftLengthController:
    """Online ODLD + AS²: estimates α, b and c from measured rounds and answers ``choice()``.

    b and c are exponential moving averages (weight λ = ``smoothing`` on the newest round) of each
    round's t_transmit/t_verify and t_draft/t_verify (eq. 5). α is a ratio of two moving averages:
    accepted draft tokens over acceptance *trials*, where a round's trials are its accepted tokens plus
    one if it ended in a rejection. Under the paper's i.i.d. model the number accepted is a geometric
    variable censored at γ, and this ratio is its maximum-likelihood α; accepted/drafted would
    underestimate α (e.g. α = 0.8, γ = 4 gives E[accepted]/γ ≈ 0.59). The prior (alpha0, b0, c0)
    stands until the first ``observe``. Early rounds: an EMA started from a prior keeps the prior's
    weight (1 − λ)^n after n rounds (0.64 after two, with λ = 0.2: a controller measured by a short
    decision still drafted from its prior), so the (n+1)-th round weighs max(λ, 1/(n+1)), a running
    mean until the EMA's window is reached: the measured times replace their prior at the first round
    (as T_LLM), and α's prior (alpha0 accepted of one trial) weighs as one round among the first ones
    (max(λ, 1/(n+2))). The α used is clamped into [ALPHA_MIN, ALPHA_MAX].

    With the bytes each round sent (``observe(..., bytes_sent)``) the link time is split instead
    (module docstring): ``LinkRegression`` gives the propagation per round, d = T_prop/T_LLM, and the
    transmission cost per byte, b = slope × (bytes per draft token)/T_LLM; T_LLM is an EMA of the
    measured verification time. ``observe_cloud`` measures the standalone target's own token, a =
    T_AR/T_LLM (1 until then). ``choice`` is then ``adaptive_selection_with_delay``; without bytes it
    is the paper's Algorithm 2 on b and c.

    Caveat: once AS² chooses standalone decoding, rounds carry no α; the caller should still
    speculate now and then (``probe_spacing``) so the controller can notice a recovery.
    Not thread-safe: callers lock.
    """

    def __init__(
        self,
        alpha0: float,
        b0: float,
        c0: float,
        *,
        smoothing: float = DEFAULT_SMOOTHING,
        max_gamma: int = DEFAULT_MAX_GAMMA,
    ) -> None:
        smoothing = float(smoothing)
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.smoothing = smoothing
        self.max_gamma = _check_int("max_gamma", max_gamma, 1)
        self._accepted = _check_alpha(alpha0)  # EMA of accepted tokens per round; prior: α0 of 1 trial
        self._trials = 1.0  # EMA of acceptance trials per round
        self._b = _check_cost("b0", b0)
        self._c = _check_cost("c0", c0)
        self.observations = 0
        self.link = LinkRegression(smoothing)
        self._t_llm = 0.0  # EMA of T_LLM (s), from the first round on
        self._bytes_per_token = 0.0  # EMA of bytes sent per draft token
        self._t_ar = 0.0  # EMA of the standalone target's time per token (s); 0: not measured
        self.cloud_tokens = 0

    @property
    def alpha(self) -> float:
        """The current α estimate, clamped into [ALPHA_MIN, ALPHA_MAX]."""
        return min(max(self._accepted / self._trials, ALPHA_MIN), ALPHA_MAX)

    @property
    def b(self) -> float:
        """The current estimate of b = T_V / T_LLM (eq. 5)."""
        return self._b

    @property
    def c(self) -> float:
        """The current estimate of c = T_SLM / T_LLM (eq. 5)."""
        return self._c

    @property
    def L(self) -> float:
        """The current estimate of L = b + c (eq. 6)."""
        return self._b + self._c

    @property
    def t_llm_s(self) -> float:
        """The current estimate of T_LLM (s); 0 before the first round."""
        return self._t_llm

    def cost_ratios(self) -> tuple[float, float, float, float]:
        """(b, c, d, a) as ``choice`` uses them: with a link fit, b = transmission only and d =
        propagation, both over T_LLM; without one, the paper's b and d = 0. a = T_AR/T_LLM, 1 until
        the standalone target has been measured, at most A_MAX."""
        a = min(self._t_ar / self._t_llm, A_MAX) if self._t_ar > 0.0 and self._t_llm > 0.0 else 1.0
        if self.link.rounds == 0 or self._t_llm <= 0.0:
            return self._b, self._c, 0.0, a
        fit = self.link.fit()
        b = fit.per_byte_s * self._bytes_per_token / self._t_llm
        return b, self._c, fit.propagation_s / self._t_llm, a

    def observe(
        self,
        accepted: int,
        drafted: int,
        t_draft_token_s: float,
        t_transmit_token_s: float,
        t_verify_s: float,
        bytes_sent: int | None = None,
    ) -> None:
        """Fold in one draft-verify round: ``accepted`` of ``drafted`` draft tokens accepted, the mean
        drafting and link time per draft token (T_SLM, and T_V: the round trip less T_LLM, per draft
        token) and the target's verification time (T_LLM), in seconds; ``bytes_sent``: the block's
        bytes on the uplink (then the link time is regressed on it, see the class docstring). Raises
        ValueError (and changes nothing) on inconsistent input."""
        drafted = _check_int("drafted", drafted, 1)
        accepted = _check_int("accepted", accepted, 0)
        if accepted > drafted:
            raise ValueError(f"accepted ({accepted}) cannot exceed drafted ({drafted})")
        times = {"t_draft_token_s": t_draft_token_s, "t_transmit_token_s": t_transmit_token_s}
        for name, value in times.items():
            if not (math.isfinite(float(value)) and float(value) >= 0.0):
                raise ValueError(f"{name} must be finite and ≥ 0, got {value}")
        t_verify_s = float(t_verify_s)
        if not (math.isfinite(t_verify_s) and t_verify_s > 0.0):
            raise ValueError(f"t_verify_s must be finite and > 0, got {t_verify_s}")
        if bytes_sent is not None and not (math.isfinite(float(bytes_sent)) and float(bytes_sent) >= 0.0):
            raise ValueError(f"bytes_sent must be finite and ≥ 0, got {bytes_sent}")
        trials = accepted + (1 if accepted < drafted else 0)
        n = self.observations
        w = max(self.smoothing, 1.0 / (n + 1))  # the times: their prior stands until the first round
        keep = 1.0 - w
        self._t_llm = keep * self._t_llm + w * t_verify_s
        if bytes_sent is not None:
            per_token = float(bytes_sent) / drafted
            first = self.link.rounds == 0
            self.link.observe(float(bytes_sent), float(t_transmit_token_s) * drafted)
            self._bytes_per_token = per_token if first else keep * self._bytes_per_token + w * per_token
        self._b = keep * self._b + w * float(t_transmit_token_s) / t_verify_s
        self._c = keep * self._c + w * float(t_draft_token_s) / t_verify_s
        w_alpha = max(self.smoothing, 1.0 / (n + 2))  # α's prior: one round's evidence among the first rounds
        self._accepted = (1.0 - w_alpha) * self._accepted + w_alpha * accepted
        self._trials = (1.0 - w_alpha) * self._trials + w_alpha * trials
        self.observations += 1

    def observe_cloud(self, tokens: int, compute_s: float) -> None:
        """The standalone target decoded ``tokens`` tokens in ``compute_s`` seconds of its own compute
        (cloud-only decoding): updates T_AR, the cost a speculative round must beat per token."""
        tokens = _check_int("tokens", tokens, 1)
        compute_s = float(compute_s)
        if not (math.isfinite(compute_s) and compute_s > 0.0):
            raise ValueError(f"compute_s must be finite and > 0, got {compute_s}")
        per_token = compute_s / tokens
        self._t_ar = per_token if self._t_ar == 0.0 else \
            (1.0 - self.smoothing) * self._t_ar + self.smoothing * per_token
        self.cloud_tokens += tokens

    def choice(self) -> SpeculationChoice:
        """AS² on the current estimates (the prior before any observation): Algorithm 2 until a round
        reports its bytes, then with the link's propagation delay apart (``adaptive_selection_with_delay``)."""
        b, c, d, a = self.cost_ratios()
        if d == 0.0 and a == 1.0:
            return adaptive_selection(self.alpha, b, c, self.max_gamma)
        return adaptive_selection_with_delay(self.alpha, b, c, d, a, self.max_gamma)

    def probe_spacing(self, budget: float) -> int:
        """Standalone tokens to decode between two probe rounds so that probing costs at most
        ``budget`` (a share, e.g. 0.02) of the standalone decoding's time: a probe round costs
        T_LLM (1 + γ*L + d) and yields E[tokens] the standalone target would have produced in
        a·E[tokens]·T_LLM; the excess over ``budget`` × a·T_LLM per token gives the spacing. Near
        break-even probes come often, where speculation is hopeless they come rarely. At least 1."""
        budget = float(budget)
        if not 0.0 < budget < 1.0:
            raise ValueError(f"probe budget must be in (0, 1), got {budget}")
        b, c, d, a = self.cost_ratios()
        gamma = self.choice().gamma
        cost, tokens = round_cost(self.alpha, gamma, b + c, d)
        excess = max(0.0, cost - a * tokens)
        return max(1, math.ceil(excess / (budget * a)))
