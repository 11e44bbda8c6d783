"""Every mode of the registry through ROS (RosVerifierLink and a bridge_node process) gives the output
it gives over direct ZeroMQ: greedy for all modes, and sampled for every mode whose sampled output is
not timing-dependent (PicoSpec's pipelined modes draw differently when a verdict arrives earlier;
their sampled distribution is tested in test/edge/test_protocol_distributions.py)."""

from __future__ import annotations

import pytest

from edge_spec_ros.bench.runner import Bench, BenchConfig, timing_dependent
from edge_spec_ros.edge.registry import MODES
from edge_spec_ros.models.embedded import embedded_pair


@pytest.mark.parametrize("temperature", [0.0, 3.0])  # hot: the trained pair is peaked, DSSD must reject
def test_every_mode_is_the_same_through_ros_and_zeromq(server_endpoint, temperature):
    config = BenchConfig(profile="loopback", prompts=1, max_new_tokens=10, threads=2, temperature=temperature,
                         modes=MODES, paths=("zmq", "ros"), adaptive_gamma=False)  # the protocols' fixed γ
    rows = Bench(embedded_pair(), server_endpoint, config).run()["ros_vs_zmq"]
    assert set(rows) == set(MODES)
    checked = [m for m in MODES if not timing_dependent(m, temperature, False)]
    if temperature == 0:
        assert checked == list(MODES)  # greedy output never depends on timing
    assert "dssd-topk-lossy" in checked  # the lossy mode too: its pruned p_δ travels through ROS
    for mode in checked:
        assert rows[mode]["must_match"] and rows[mode]["identical"], (mode, rows[mode])
