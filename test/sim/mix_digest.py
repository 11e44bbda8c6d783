"""The shipped pair's training mix, pinned: every option of the sampler that is off by default must
leave it as it was (the tests of each option compare against this)."""

from __future__ import annotations

import hashlib

from edge_spec_ros.sim.samples import SimDataConfig, sim_sample

# sha256 of "instruction|text" of samples 0-11 of data seed 3, as the sampler drew them before the far,
# near and synthetic samples existed (the shipped pair's mix)
DEFAULT_MIX_SHA256 = "6b77fcd3fb4ced9bdc3078edf9b3976424dd001cf9024d67b4e52ff86a470b0f"


def mix_digest(config: SimDataConfig, n: int = 12) -> str:
    samples = [sim_sample(config, i) for i in range(n)]
    return hashlib.sha256("\n".join(f"{s.instruction}|{s.text}" for s in samples).encode()).hexdigest()
