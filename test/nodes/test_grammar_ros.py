"""The drafter node's ``grammar`` over the ROS path: the bridge carries it in the Open's DecisionRequest,
the verifier masks p by it and the drafter q, so a grammar that allows one reply makes every decision
that reply (the verifier alone decides the tokens: had it not received the grammar, the pair's own
reply would come); a grammar that does not compile fails the drafter's configure with the reason."""

from __future__ import annotations

from pathlib import Path

from std_msgs.msg import String

from rosharness import drafter_matched_instruction, process, wait_for
from stack import stack_command, stack_params
from edge_spec_ros.msg import Decision
from edge_spec_ros.nav.config import NavConfig
from edge_spec_ros.nav.grammar import parse_action
from edge_spec_ros.nodes.ros_link import RELIABLE

NS = "grammar_ros"
UP_S = 90.0
FORCED = "Reasoning: the grey box is ahead. Action: stop"  # words of the shipped pair's vocabulary
NODES = ("drafter", "bridge", "camera")


def grammar_stack(tmp_path: Path, endpoint: str, grammar: str) -> list[str]:
    params = stack_params(tmp_path, endpoint, NS, NODES,
                          drafter={"mode": "fsd", "predraft_threads": 1, "torch_threads": 1, "grammar": grammar})
    return stack_command(params, NS, NODES)


def test_a_grammar_of_one_reply_makes_the_decision_that_reply(ros, server_endpoint, tmp_path):
    decisions = ros.collect(Decision, f"/{NS}/edge_spec/decision", RELIABLE)
    instruction = ros.node.create_publisher(String, f"/{NS}/instruction", RELIABLE)
    log = tmp_path / "stack.log"
    grammar = f'root ::= "{FORCED}"'
    cmd = grammar_stack(tmp_path, server_endpoint, grammar)
    with process(cmd, log) as proc:
        wait_for(lambda: "drafter ready" in log.read_text() and drafter_matched_instruction(log.read_text()) >= 1,
                 UP_S, lambda: f"the drafter\n{log.read_text()[-3000:]}")
        instruction.publish(String(data="go to the grey box"))
        wait_for(lambda: decisions, UP_S, lambda: f"a decision\n{log.read_text()[-3000:]}")
        assert proc.poll() is None
    assert decisions[0].text == FORCED, decisions[0].text
    assert parse_action(decisions[0].text, NavConfig()).ok


def test_a_grammar_that_does_not_compile_fails_the_configure_with_its_reason(ros, tmp_path):
    log = tmp_path / "drafter.log"
    cmd = grammar_stack(tmp_path, "tcp://127.0.0.1:9", 'root ::= "unterminated')
    with process(cmd, log):
        wait_for(lambda: "does not compile" in log.read_text(), UP_S,
                 lambda: f"the configure's failure\n{log.read_text()[-3000:]}")
    assert "grammar 'root ::= \"unterminated'" in log.read_text()
