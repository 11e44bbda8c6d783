"""The full robot stack (camera, bridge, drafter, action nodes) in a separate process, against a
verifier process on loopback; and rosbag record / replay through it. The camera shows the synthetic
frame; the shipped trained pair reads it and answers with an action, which the stack executes."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest
import yaml
from geometry_msgs.msg import Twist
from std_msgs.msg import String

from rosharness import drafter_matched_instruction, process, wait_for
from edge_spec_ros.bags import read_bag, typestore, write_camera_bag
from edge_spec_ros.camera.synthetic import synthetic_camera_image
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
from edge_spec_ros.models.embedded import embedded_pair
from edge_spec_ros.models.prompt import decode_image, encode_image
from edge_spec_ros.msg import Decision, DecodeStats as DecodeStatsMsg, NavAction as NavActionMsg
from edge_spec_ros.nav import NavConfig, parse_action
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.spec.sampling import SamplingConfig

ROOT = Path(__file__).resolve().parents[2]
INSTRUCTION = "find the silver bottle"
MAX_NEW_TOKENS = 64  # the replies name what is in view before the action
STACK_UP_S = 60.0


def params_file(tmp_path, endpoint: str, mode: str, temperature: float = 0.0, max_decisions: int = 0) -> Path:
    config = yaml.safe_load((ROOT / "config" / "go2_nav.yaml").read_text())
    config["bridge"]["ros__parameters"]["verifier_endpoint"] = endpoint
    drafter = config["drafter"]["ros__parameters"]
    drafter.update(mode=mode, max_new_tokens=MAX_NEW_TOKENS, predraft_threads=2, temperature=temperature)
    if temperature > 0:  # sampled tokens follow the γ schedule: the reference's fixed γ (ODLD's γ follows timing)
        drafter["adaptive_gamma"] = False
    if max_decisions:
        drafter.update(max_decisions=max_decisions)
    config["action"]["ros__parameters"]["odom_topic"] = ""  # no odometry without the sim: timed motions
    path = tmp_path / f"params_{mode}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def reference_text(temperature: float = 0.0) -> str:
    """Greedy: the verifier's own output; sampled: the in-process speculative decoder's at seed 0 —
    for the synthetic frame as the verifier sees it (JPEG)."""
    pair = embedded_pair()
    encoder = pair.prompt_encoder()
    prompt = encoder.encode(INSTRUCTION, decode_image(encode_image(synthetic_camera_image(), quality=90)))
    config = DecodeConfig(max_new_tokens=MAX_NEW_TOKENS, sampling=SamplingConfig(temperature),
                          stop_tokens=(pair.tokenizer.eos_token_id,))
    if temperature == 0:
        return encoder.decode(autoregressive(pair.verifier, prompt, config).tokens)
    return encoder.decode(speculative(pair.drafter, pair.verifier, prompt, config).tokens)


@pytest.fixture(scope="module")
def expected_text() -> str:
    return reference_text()


@pytest.mark.parametrize("mode,temperature", [("fsd", 0.0), ("ar", 0.0), ("pico", 0.0), ("dssd", 0.9)])
def test_instruction_through_the_stack(ros, server_endpoint, tmp_path, mode, temperature):
    """An instruction through camera, drafter, bridge and action nodes: the decision equals the
    reference token for token (greedy: the verifier's own output; sampled DSSD, whose q, resampling on
    the robot and resampled-token uplink all cross the bridge: the in-process decoder's)."""
    expected = reference_text(temperature)
    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "bringup", "--params",
           str(params_file(tmp_path, server_endpoint, mode, temperature)), "--duration", "90"]
    decisions = ros.collect(Decision, "edge_spec/decision", RELIABLE)
    actions = ros.collect(NavActionMsg, "edge_spec/action", RELIABLE)
    stats = ros.collect(DecodeStatsMsg, "edge_spec/stats", RELIABLE)
    twists = ros.collect(Twist, "cmd_vel")
    instruction = ros.node.create_publisher(String, "instruction", RELIABLE)
    log = tmp_path / "bringup.log"
    with process(cmd, log) as proc:
        # the action node publishes cmd_vel only while moving or holding zero: wait for the graph instead
        wait_for(lambda: ros.node.count_publishers("/cmd_vel") > 0 and instruction.get_subscription_count() >= 2,
                 STACK_UP_S, "the stack")
        # our publisher has matched the drafter; the drafter must have matched it back (else the
        # instruction is lost: a volatile subscription never gets what was sent before it matched)
        wait_for(lambda: drafter_matched_instruction(log.read_text()) >= 1, STACK_UP_S,
                 f"the drafter matching the instruction publisher ({log.read_text()[-2000:]})")
        instruction.publish(String(data=INSTRUCTION))
        wait_for(lambda: actions and stats, 60, lambda: f"a decision ({log.read_text()[-2000:]})")
        assert proc.poll() is None
    decision = decisions[-1]
    assert decision.instruction == INSTRUCTION and decision.mode == mode
    assert decision.text == expected  # exact, through ROS and ZeroMQ
    assert stats[-1].mode == mode.upper() and stats[-1].rounds >= 1
    # the action node executes exactly the action the grammar reads from that text
    action = parse_action(expected, NavConfig()).action
    assert action is not None, expected
    assert actions[0].decision == 1 and actions[0].kind == action.kind
    if action.kind != "stop":
        wait_for(lambda: any(t.linear.x or t.angular.z for t in twists), 10, "the robot to move")


def test_bag_replay_through_the_stack_and_record(ros, server_endpoint, tmp_path, expected_text):
    """A recorded camera + instruction bag drives the stack; the recorder captures its outputs."""
    bag = write_camera_bag(tmp_path / "input_bag", [synthetic_camera_image() for _ in range(25)], INSTRUCTION,
                           rate_hz=5.0, instruction_at_s=3.0)  # time for every process to discover the others
    recorded = tmp_path / "recorded_bag"
    record = [sys.executable, "-m", "edge_spec_ros.cli", "record", "--out", str(recorded), "--duration", "120",
              "--topic", "/instruction", "--topic", "/edge_spec/decision", "--topic", "/cmd_vel"]
    # the episode ends with its one decision's motion; --duration is only the safety net (a loaded
    # computer can take seconds for the first decision)
    stack = [sys.executable, "-m", "edge_spec_ros.cli", "bringup", "--params",
             str(params_file(tmp_path, server_endpoint, "sd", max_decisions=1)), "--bag", str(bag), "--duration", "60"]
    def recording(topic: str) -> bool:
        return any(i.node_name == "bag_recorder" for i in ros.node.get_subscriptions_info_by_topic(topic))

    with process(record, tmp_path / "record.log") as recorder:
        wait_for(lambda: all(recording(t) for t in ("/instruction", "/edge_spec/decision", "/cmd_vel")), 30,
                 "the recorder's subscriptions")
        with process(stack, tmp_path / "stack.log") as proc:
            proc.wait(timeout=90)
        time.sleep(1.0)  # the last messages reach the recorder
        recorder.send_signal(signal.SIGINT)  # stops and closes the bag
        recorder.wait(timeout=20)
    out = (tmp_path / "stack.log").read_text()
    assert f"[decision 1 sd] {expected_text!r}" in out, out[-3000:]
    assert f"[action 1] {parse_action(expected_text, NavConfig()).action.kind} " in out, out[-3000:]
    messages = list(read_bag(recorded))
    topics = {m.topic for m in messages}
    assert {"/instruction", "/edge_spec/decision", "/cmd_vel"} <= topics, topics
    store = typestore()
    sent = [store.deserialize_cdr(m.data, m.msgtype).data for m in read_bag(bag, ("/instruction",))]
    got = [store.deserialize_cdr(m.data, m.msgtype).data for m in messages if m.topic == "/instruction"]
    assert got == sent == [INSTRUCTION]
    decision = next(m for m in messages if m.topic == "/edge_spec/decision")
    assert store.deserialize_cdr(decision.data, decision.msgtype).text == expected_text
