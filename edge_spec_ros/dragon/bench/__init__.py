"""DRAGON's benchmarks (``edge-spec-ros bench dragon-latency|dragon-quality|dragon-schedule|dragon-wire``):
latency beside the paper's baselines, answer quality, the scheduler, the wire cost."""
