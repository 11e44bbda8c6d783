"""The robot decoder's configuration (``EdgeConfig``): the decision's decoding settings, FSD's
pre-draft workers and queue policies, the modes' K, TK-SLT's γ controller and PicoSpec's branch
blocks. Read by ``edge.modes.EdgeDecoder`` and by the parts that outlive a decision
(``edge.long_lived``).

Legend: γ — draft length; K — kept entries; Q_p, Q_e — the client's and the server's early-exit queues.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edge_spec_ros.decoding.reference import DecodeConfig
from edge_spec_ros.edge.pipeline import BRANCHES, DEPTH, MAX_BRANCHES, MAX_DEPTH
from edge_spec_ros.edge.registry import Mode, get_mode
from edge_spec_ros.spec.queues import POLICIES
from edge_spec_ros.spec.sparse import DraftDistribution


@dataclass(frozen=True)
class EdgeConfig:
    """threads: N pre-draft workers (FSD); client_policy / server_policy: Q_p and Q_e order (Table 7);
    tp_s: emulated draft-forward time (0: real compute only); the verification time is emulated by
    the verifier's operator (``serve --emulate-tq-s``), never asked for by the robot."""

    decode: DecodeConfig = field(default_factory=DecodeConfig)
    threads: int = 4
    client_policy: str = "priority"
    server_policy: str = "priority"
    tp_s: float = 0.0
    tkslt_k: int = 20  # TK-SLT's K
    lowpay_k: int = 4  # the low-payload mode's K
    lossy_p_k: int = 10  # PicoSpec's K for the pruned downlink of p_δ (LOSSY)
    # γ per round by ODLD, cloud-only chunks by AS², probes back (edge.gamma). Off here, in the protocol's
    # own configuration, so that a decoder built without it keeps the published fixed-γ schedules (the
    # exactness tests compare SD and FSD round by round); on by default where the robot decodes (the
    # drafter node's adaptive_gamma) and in the bench (BenchConfig)
    adaptive_gamma: bool = False
    # with adaptive_gamma: the measured wall times per token of both regimes decide once known (edge.gamma);
    # False: TK-SLT's AS² on the cost model alone, as published
    measured_fallback: bool = True
    alpha_prior: float = 0.5  # the controller's α, b, c before the first measured round
    b_prior: float = 0.05
    c_prior: float = 0.05
    max_gamma: int = 16
    # with adaptive_gamma in PicoSpec's modes: γ by the pipeline's model (spec.pipeline.pipelined_gamma: the next
    # block is drafted while this one is verified), not ODLD's serial one; False: ODLD's γ* as in serial modes
    pipeline_gamma: bool = True
    # PicoSpec: branch blocks per round for the likeliest other verdicts of the block being verified
    # (edge.pipeline; 0: none); they change when the verifier works, never the tokens
    branch_blocks: int = BRANCHES
    # PicoSpec: blocks drafted ahead of the one being verified (edge.pipeline): 1, S_{i+1} as published; 2, the
    # block after next too, so the cloud need not wait for it after a verdict
    pipeline_depth: int = DEPTH
    # the first block rides with the Open (edge.first_block): drafted from the prompt while the Open travels,
    # verified right after the prefill; False (or a link without open_with): Open, Opened, then the first draft
    first_block: bool = True
    reconnect_retries: int = 2  # a decision interrupted by a lost or restarted verifier is opened again
    # the reply's constraint (docs/grammar.md): "" none; a grammar id ("action": a navigation decision) or EBNF
    # text. The Open names it and the verifier masks p; the drafter masks q with the decoder's GrammarBook
    grammar: str = ""

    def draft_distribution(self, mode: Mode | str) -> DraftDistribution | None:
        """The q the drafter samples from in ``mode`` (the registry's, or its name; None: the full
        softmax)."""
        k_field = (mode if isinstance(mode, Mode) else get_mode(mode)).sparse_q
        return DraftDistribution(getattr(self, k_field)) if k_field else None

    def __post_init__(self) -> None:
        if not 0 <= self.branch_blocks <= MAX_BRANCHES:
            raise ValueError(f"branch_blocks must be 0..{MAX_BRANCHES}, got {self.branch_blocks}")
        if not 1 <= self.pipeline_depth <= MAX_DEPTH:
            raise ValueError(f"pipeline_depth must be 1..{MAX_DEPTH}, got {self.pipeline_depth}")
        for policy in (self.client_policy, self.server_policy):
            if policy not in POLICIES:
                raise ValueError(f"queue policy {policy!r} is not one of {POLICIES}")
