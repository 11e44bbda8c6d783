"""The robot decoder's long-lived parts: FSD's pre-draft workers, TK-SLT's γ controller and the
pipelined modes' branch-block gates.

Both outlive a decision. The ``PreDrafter``'s N threads start with the first decision in a mode
with early exits and then idle between decisions (each decision ``begin``s and ``end``s it); the
``DraftLengthController`` of each mode keeps its α, b, c estimates from one decision to the next. A
part is built again only when the configuration it was built from changes (N, the Q_p policy, the
priors).

Legend: N — pre-draft threads; Q_p — the client's early-exit queue; α, b, c — TK-SLT eq. 5, 8.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from edge_spec_ros.edge.config import EdgeConfig
from edge_spec_ros.edge.gamma import AdaptiveGamma, CloudCost, DecisionLength, FixedGamma, GammaPolicy
from edge_spec_ros.edge.pipeline import BranchGate
from edge_spec_ros.edge.predraft import PreDrafter
from edge_spec_ros.edge.registry import Mode
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.spec.draft_length import DraftLengthController
from edge_spec_ros.spec.sampling import PositionalRNG


class LongLivedParts:
    """The pre-drafter and the adaptive γ policies of one decoder; one decision at a time.

    One γ controller per mode: what it measures differs between modes (b: the uplink payload per
    draft token, γ×V q in SD against γ values in DSSD; α: the q drafted from, TK-SLT's top K), so a
    mode's estimates never come from another's decisions. The cloud-only regime's cost is the cloud's and
    the link's, whatever the mode: one ``CloudCost`` for all, which cloud-only decisions measure too."""

    def __init__(self) -> None:
        self._decision = threading.Lock()
        self.predrafter: PreDrafter | None = None
        self.adaptive: dict[str, tuple[tuple, AdaptiveGamma]] = {}  # mode -> (built from, policy)
        self.cloud = CloudCost()  # what handing tokens to the cloud costs, shared by every mode's policy
        self.lengths = DecisionLength()  # how many tokens a decision emits, every mode's decisions
        self.branch_gates: dict[str, BranchGate] = {}  # pipelined mode -> its branch blocks' gate

    def branch_gate(self, mode: str) -> BranchGate:
        """The gate of ``mode``'s branch blocks (edge.pipeline), measured over this decoder's decisions."""
        return self.branch_gates.setdefault(mode, BranchGate())

    @contextmanager
    def decision(self, config: EdgeConfig, drafter: Drafter, mode: Mode,
                 rng: PositionalRNG) -> Iterator[tuple[GammaPolicy, PreDrafter | None]]:
        """The γ policy and (a mode with early exits) the pre-drafter, begun for one decision whose
        draws are ``rng``'s; the pre-drafter's decision ends with the block. Decisions wait for each
        other."""
        d = config.decode
        with self._decision:
            policy = self._gamma_policy(config, mode)
            policy.begin(d.gamma, d.max_new_tokens)
            predrafter = self._predrafter(config, drafter) if mode.early_exits else None
            if predrafter is not None:
                predrafter.begin(rng, d.sampling, d.gamma, config.tp_s)
            try:
                yield policy, predrafter
            finally:
                if predrafter is not None:
                    predrafter.end()

    def close(self) -> None:
        """Stop and join the pre-draft workers (a later decision starts new ones)."""
        predrafter, self.predrafter = self.predrafter, None
        if predrafter is not None:
            predrafter.close()

    def stop(self) -> None:
        """Tell the pre-draft workers to exit without waiting (the decoder's finaliser)."""
        if self.predrafter is not None:
            self.predrafter.stop()

    def _gamma_policy(self, config: EdgeConfig, mode: Mode) -> GammaPolicy:
        """Fixed γ, or the mode's adaptive policy (a pipelined mode's prices γ by the pipeline's model,
        ``EdgeConfig.pipeline_gamma``)."""
        if not config.adaptive_gamma:
            return FixedGamma()
        pipelined = mode.pipelined and config.pipeline_gamma
        built_from = (config.alpha_prior, config.b_prior, config.c_prior, config.max_gamma, config.measured_fallback,
                      pipelined, config.pipeline_depth)
        if mode.name not in self.adaptive or self.adaptive[mode.name][0] != built_from:
            controller = DraftLengthController(config.alpha_prior, config.b_prior, config.c_prior,
                                               max_gamma=config.max_gamma)
            self.adaptive[mode.name] = built_from, AdaptiveGamma(controller, measured=config.measured_fallback,
                                                                 pipelined=pipelined, depth=config.pipeline_depth,
                                                                 cloud=self.cloud, lengths=self.lengths)
        return self.adaptive[mode.name][1]

    def _predrafter(self, config: EdgeConfig, drafter: Drafter) -> PreDrafter:
        p = self.predrafter
        if p is None or p.drafter is not drafter or p.threads != config.threads or p.policy != config.client_policy:
            self.close()
            self.predrafter = PreDrafter(drafter, config.threads, config.client_policy)
        return self.predrafter
