"""memory_node in its own process: decisions, instructions and notes become RobotMemory entries with
the odometry pose, kept across a restart; DRAGON's robot side retrieves them."""

from __future__ import annotations

import json
import math
import time

from nav_msgs.msg import Odometry
from std_msgs.msg import String

from rosharness import node_command, process, service_answers, wait_for
from edge_spec_ros.dragon.stores import RobotMemory
from edge_spec_ros.msg import Decision
from edge_spec_ros.nodes.memory_node import MemoryNodeConfig, yaw
from edge_spec_ros.nodes.ros_link import RELIABLE

DISCOVERY_S = 20.0


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_entries_with_pose_and_kept_across_a_restart(ros, tmp_path):
    memory_dir = tmp_path / "memory"
    path = memory_dir / "memory.jsonl"
    decisions = ros.node.create_publisher(Decision, "edge_spec/decision", RELIABLE)
    instructions = ros.node.create_publisher(String, "instruction", RELIABLE)
    notes = ros.node.create_publisher(String, "memory/note", RELIABLE)
    odom = ros.node.create_publisher(Odometry, "odom", 10)

    def pose(x, y, theta):
        msg = Odometry()
        msg.pose.pose.position.x, msg.pose.pose.position.y = x, y
        msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(theta / 2), math.cos(theta / 2)
        odom.publish(msg)

    cmd = node_command("memory_node", "-p", f"memory_dir:={memory_dir}")
    with process(cmd, tmp_path / "memory_node.log") as proc:
        wait_for(lambda: decisions.get_subscription_count() > 0 and instructions.get_subscription_count() > 0
                 and notes.get_subscription_count() > 0 and odom.get_subscription_count() > 0, DISCOVERY_S,
                 "memory_node to come up")
        instructions.publish(String(data="find the red chair"))
        wait_for(lambda: len(lines(path)) == 1, 10, "the instruction entry")
        for _ in range(10):  # odometry is a stream: a few messages, then the pose is the node's
            pose(1.5, -2.0, 0.5)
            time.sleep(0.05)
        notes.publish(String(data="the charger is behind the sofa"))
        wait_for(lambda: len(lines(path)) == 2, 10, "the note")
        assert lines(path)[-1]["kind"] == "note" and lines(path)[-1]["x"] == 1.5
        msg = Decision()
        msg.decision, msg.instruction, msg.mode = 1, "find the red chair", "fsd"
        msg.text = "Reasoning: I see a red chair next to the window. Action: move forward 50 cm"
        decisions.publish(msg)
        instructions.publish(String(data="stop"))  # a stop word: not recorded
        wait_for(lambda: any(e["kind"] == "observation" for e in lines(path)), 10, "the decision entry")
        assert proc.poll() is None
    entries = lines(path)
    assert entries[0]["kind"] == "instruction" and entries[0]["text"] == "find the red chair"
    assert entries[0]["x"] == 0.0 and entries[0]["y"] == 0.0
    observation = next(e for e in entries if e["kind"] == "observation")
    assert "red chair next to the window" in observation["text"]
    assert (observation["x"], observation["y"]) == (1.5, -2.0)
    assert math.isclose(observation["theta"], 0.5, abs_tol=1e-9)
    assert all(e["text"] != "stop" for e in entries)
    assert {e["kind"] for e in entries} == {"instruction", "note", "observation"}
    memory = RobotMemory(memory_dir)  # after the node's exit: everything is there
    assert len(memory) == len(entries)
    hits = memory.top_k("where did you see the red chair", 3)
    assert any(h.text.startswith("[observation") and "x=1.50 m y=-2.00 m" in h.text for h in hits)


def test_config_and_yaw():
    assert math.isclose(yaw(0.0, 0.0, math.sin(0.4), math.cos(0.4)), 0.8)
    try:
        MemoryNodeConfig(memory_dir=" ")
    except ValueError:
        pass
    else:
        raise AssertionError("an empty memory_dir must be refused")


def test_the_add_note_service_answers_once_written_and_questions_are_not_recorded(ros, tmp_path):
    """``memory/add_note`` (AddNote) writes a note and answers with the count of entries; an empty note
    is refused with the reason; a question on ``instruction`` (mode dragon's) is not recorded, an
    instruction is."""
    from edge_spec_ros.srv import AddNote as AddNoteSrv

    memory_dir = tmp_path / "memory"
    path = memory_dir / "memory.jsonl"
    client = ros.node.create_client(AddNoteSrv, "memory/add_note")
    instructions = ros.node.create_publisher(String, "instruction", RELIABLE)

    def call(text: str):
        future = client.call_async(AddNoteSrv.Request(text=text))
        wait_for(future.done, 10, f"the answer to {text!r}")
        return future.result()

    cmd = node_command("memory_node", "-p", f"memory_dir:={memory_dir}", "-p", "odom_topic:=''")
    with process(cmd, tmp_path / "memory_node.log"):
        wait_for(lambda: client.service_is_ready() and instructions.get_subscription_count() > 0, DISCOVERY_S,
                 "memory_node's service")
        # an empty note writes nothing: it is the handshake that replies reach this node
        empty = service_answers(client, AddNoteSrv.Request(text="   "), DISCOVERY_S, "memory_node's replies")
        assert not empty.success and "empty" in empty.message and empty.entries == 0
        first = call("the charger is behind the sofa")
        assert first.success and first.message == "" and first.entries == 1
        assert lines(path)[-1]["kind"] == "note" and lines(path)[-1]["text"] == "the charger is behind the sofa"
        assert call("   ").entries == 1
        instructions.publish(String(data="where did you see the red chair?"))
        instructions.publish(String(data="go to the kitchen"))
        wait_for(lambda: len(lines(path)) == 2, 10, "the instruction entry")
        assert call("the kitchen door sticks").entries == 3
    assert [e["text"] for e in lines(path)] == ["the charger is behind the sofa", "go to the kitchen",
                                                "the kitchen door sticks"]
    ros.node.destroy_client(client)


def test_one_writer_per_memory_a_second_records_nothing_and_keeps_running(ros, tmp_path):
    """While another process holds ``<memory_dir>/memory.lock`` (a memory node writing there), a
    memory node on that directory logs why, stays up and records nothing (entry ids are counted by
    the one writer: two writers would number entries twice)."""
    import fcntl

    from edge_spec_ros.nodes.memory_node import LOCK_FILE
    from edge_spec_ros.srv import AddNote as AddNoteSrv

    memory_dir = tmp_path / "memory"
    memory_dir.mkdir()
    client = ros.node.create_client(AddNoteSrv, "memory/add_note")
    log = tmp_path / "memory_node.log"
    with open(memory_dir / LOCK_FILE, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        cmd = node_command("memory_node", "-p", f"memory_dir:={memory_dir}", "-p", "odom_topic:=''")
        with process(cmd, log) as proc:
            wait_for(client.service_is_ready, DISCOVERY_S, "memory_node's service")
            # refused, so asking again changes nothing
            answer = service_answers(client, AddNoteSrv.Request(text="the charger is behind the sofa"), DISCOVERY_S,
                                     "the answer")
            assert not answer.success and "another memory node writes to" in answer.message
            assert proc.poll() is None
    assert "another memory node writes to" in log.read_text()
    assert not (memory_dir / "memory.jsonl").exists()
    ros.node.destroy_client(client)


def test_a_memory_file_with_a_repeated_id_is_used_whole(ros, tmp_path):
    """A memory.jsonl edited by hand that repeats an entry id: the node starts recording (it used to
    record nothing), keeps both entries, logs the file, the line and the new id, and numbers a new
    note above them."""
    from edge_spec_ros.srv import AddNote as AddNoteSrv

    memory_dir = tmp_path / "memory"
    memory_dir.mkdir()
    path = memory_dir / "memory.jsonl"
    row = {"kind": "note", "x": 0.0, "y": 0.0, "theta": 0.0, "time": 1.0}
    path.write_text(json.dumps({"entry_id": 0, "text": "the charger is behind the sofa", **row}) + "\n"
                    + json.dumps({"entry_id": 0, "text": "the keys hang by the door", **row}) + "\n")
    client = ros.node.create_client(AddNoteSrv, "memory/add_note")
    log = tmp_path / "memory_node.log"
    cmd = node_command("memory_node", "-p", f"memory_dir:={memory_dir}", "-p", "odom_topic:=''")
    with process(cmd, log):
        wait_for(client.service_is_ready, DISCOVERY_S, "memory_node's service")
        empty = service_answers(client, AddNoteSrv.Request(text="   "), DISCOVERY_S, "memory_node's replies")
        assert not empty.success and empty.entries == 2, empty.message
        future = client.call_async(AddNoteSrv.Request(text="the umbrella is in the hall"))
        wait_for(future.done, 10, "the note's answer")
        assert future.result().success and future.result().entries == 3
    assert [e["entry_id"] for e in lines(path)] == [0, 0, 2]
    text = log.read_text()
    assert "2 entries" in text and f"{path} line 2: entry id 0 repeats line 1's; kept as entry 1" in text, text[-2000:]
    ros.node.destroy_client(client)
