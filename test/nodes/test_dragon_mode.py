"""Mode dragon on the robot: a question on ``instruction`` is answered on ``edge_spec/answer`` from the
robot's memory (written by memory_node) and the verifier's documents (``serve --documents DIR``),
with no Decision and no motion; a verifier without documents gives an Answer carrying the reason.

The stack test (slow) runs ``bringup`` (drafter in mode dragon, bridge, action, camera and memory nodes, a
verifier process with the shipped pair and a document folder) in its own process; the answerer test
runs ``nodes/dragon_answer.DragonAnswerer`` on the test's node against in-process servers with small
models and checks the answer against DRDG/TW token for token."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from geometry_msgs.msg import Twist
from std_msgs.msg import String

from rosharness import process, service_answers, wait_for
from edge_spec_ros.cloud.server import ServerConfig, VerifierServer
from edge_spec_ros.dragon.aggregation import drdg_tw
from edge_spec_ros.dragon.document_lm import build_side, chat_prompt_ids
from edge_spec_ros.dragon.peer import wire_precision
from edge_spec_ros.dragon.session import DragonService, dragon_sessions
from edge_spec_ros.dragon.stores import DocumentStore, RobotMemory
from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.models.tiny import DRAFTER_SPEC, build_tiny_qwen2vl
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.msg import Answer as AnswerMsg, Decision, NavAction as NavActionMsg
from edge_spec_ros.nodes.dragon_answer import ANSWER_TOPIC, DragonAnswerer, DragonNodeConfig
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.srv import AddNote as AddNoteSrv

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "where did you see the red chair?"
NOTE = "the red chair is in the kitchen, next to the window"
STACK_UP_S = 240.0  # two processes load the shipped pair on a shared, loaded computer


def write_documents(folder: Path) -> Path:
    folder.mkdir()
    (folder / "house.md").write_text("The kitchen is at the end of the hall.\n\nChairs stand near tables; "
                                     "a red chair is easy to see.\n\nThe charger is in the study.")
    return folder


@pytest.mark.slow  # two processes load the shipped pair: about 30 s
def test_a_question_through_the_stack_is_answered_from_memory_and_documents(ros, tmp_path):
    """bringup with the drafter in mode dragon: the memory node it starts takes a note (AddNote), the
    question is answered on edge_spec/answer from that note (the one memory entry the robot's LM
    read) and the verifier's documents; no Decision, no NavAction, no motion; the answer ends the
    episode; the question is not recorded in the memory."""
    docs = write_documents(tmp_path / "docs")
    memory_dir = tmp_path / "memory"
    config = yaml.safe_load((ROOT / "config" / "go2_nav.yaml").read_text())
    config["drafter"]["ros__parameters"].update(mode="dragon", max_new_tokens=6, predraft_threads=1,
                                                memory_dir=str(memory_dir), dragon_timeout_s=60.0)
    config["memory"]["ros__parameters"].update(memory_dir=str(memory_dir))
    params = tmp_path / "dragon.yaml"
    params.write_text(yaml.safe_dump(config))
    script = ("from edge_spec_ros.bringup import BringupConfig, run\n"
              f"m = run(BringupConfig(params_file={str(params)!r}, serve=True, documents={str(docs)!r}, "
              "timeout_s=300.0))\n"
              "print(f'{len(m.answers)} answers, {len(m.decisions)} decisions')\n")
    answers = ros.collect(AnswerMsg, ANSWER_TOPIC, RELIABLE)
    decisions = ros.collect(Decision, "edge_spec/decision", RELIABLE)
    actions = ros.collect(NavActionMsg, "edge_spec/action", RELIABLE)
    twists = ros.collect(Twist, "cmd_vel")
    question = ros.node.create_publisher(String, "instruction", RELIABLE)
    notes = ros.node.create_client(AddNoteSrv, "memory/add_note")
    log = tmp_path / "bringup.log"
    with process([sys.executable, "-c", script], log) as proc:
        wait_for(lambda: notes.service_is_ready() and question.get_subscription_count() >= 3 or proc.poll() is not None,
                 STACK_UP_S, "the stack (drafter, action and memory nodes)")
        assert proc.poll() is None, log.read_text()[-3000:]
        # an empty note writes nothing: it is the handshake that replies reach this node
        service_answers(notes, AddNoteSrv.Request(text=" "), 20, "memory_node's replies")
        future = notes.call_async(AddNoteSrv.Request(text=NOTE))
        wait_for(future.done, 10, "the note to be written")
        assert future.result().success and future.result().entries == 1
        question.publish(String(data=QUESTION))
        wait_for(lambda: answers or proc.poll() is not None, 120, "the answer")
        proc.wait(timeout=60)  # the answer ends the episode
    out = log.read_text()
    assert answers, out[-3000:]
    answer = answers[0]
    assert answer.error == "" and answer.question == QUESTION, answer
    assert answer.text and 1 <= answer.tokens <= 6 and answer.memory_entries == 1, answer
    assert 0.0 <= answer.robot_acceptance <= 1.0 and 0.0 <= answer.cloud_acceptance <= 1.0
    assert f"[answer 1] {QUESTION!r} -> {answer.text!r}" in out and "1 answers, 0 decisions" in out, out[-3000:]
    assert not decisions and not actions  # an answer commands nothing
    assert all(t.linear.x == 0.0 and t.angular.z == 0.0 for t in twists)
    assert [e.text for e in RobotMemory(memory_dir).entries] == [NOTE]  # the question was not recorded
    ros.node.destroy_client(notes)


def drafter_pair(tokenizer) -> SimpleNamespace:
    """The drafter node's pair as the answerer reads it: the robot's stack (a tiny model) and the tokenizer."""
    return SimpleNamespace(drafter=SimpleNamespace(stack=DecoderStack(build_tiny_qwen2vl(DRAFTER_SPEC, tokenizer,
                                                                                        seed=1))),
                           tokenizer=tokenizer)


def reference(robot_stack, cloud_stack, memory, docs, prompt_ids, decode_text, n):
    sampling = SamplingConfig(0.0)
    store = DocumentStore(docs)
    robot = build_side(robot_stack, memory, memory.top_k(QUESTION, 2), QUESTION, prompt_ids, decode_text, sampling)
    cloud = build_side(cloud_stack, store, store.top_k(QUESTION, 2), QUESTION, prompt_ids, decode_text, sampling)
    return drdg_tw(wire_precision(robot.next_distribution), wire_precision(cloud.next_distribution), [], n,
                   PositionalRNG(0), sampling).tokens


def test_the_answerer_publishes_drdg_tw_s_answer_or_the_servers_refusal(ros, tmp_path, target_model, tokenizer,
                                                                         encoder):
    docs = write_documents(tmp_path / "docs")
    memory = RobotMemory(tmp_path / "memory")
    memory.add("observation", "I saw the red chair in the kitchen", (1.0, 2.0, 0.0), time=1.0)
    memory.add("note", "the charger is behind the sofa", (0.0, 0.0, 0.0), time=2.0)
    verifier = EarlyExitVerifier(target_model)
    pair = drafter_pair(tokenizer)
    answers = ros.collect(AnswerMsg, ANSWER_TOPIC, RELIABLE)
    n = 8
    for documents in ("", str(docs)):
        service = DragonService(verifier.stack, encoder, documents) if documents else None  # none: refused
        server = VerifierServer(verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*", idle_exit_s=60.0,
                                                                max_requests=2000), dragon_sessions(service))
        endpoint = server.start()
        try:
            config = DragonNodeConfig(verifier_endpoint=endpoint, memory_dir=str(memory.directory),
                                      dragon_timeout_s=30.0)
            answerer = DragonAnswerer(ros.node, pair, encoder, config, max_new_tokens=n, temperature=0.0, seed=0)
            wait_for(lambda: answerer.publisher.get_subscription_count() > 0, 10, "the answer subscription")
            text = answerer.answer(QUESTION, lambda: True)
            wait_for(lambda: len(answers) == (1 if not documents else 2), 10, "the Answer message")
            assert answerer.answer(QUESTION, lambda: False) is None  # superseded while answering: not published
        finally:
            server.stop()
        if not documents:
            assert text is None
            assert "no DRAGON documents" in answers[0].error and answers[0].text == ""
    expected = reference(pair.drafter.stack, verifier.stack, memory, docs, chat_prompt_ids(encoder), tokenizer.decode, n)
    answer = answers[1]
    assert answer.error == "" and text == answer.text == encoder.decode(list(expected)).strip()
    assert [h.doc_id for h in memory.top_k(QUESTION, 2)] == ["mem-0"]  # the charger note shares no word
    assert answer.tokens == len(expected) and answer.memory_entries == 1 and answer.answer == 1
    assert len(answers) == 2


def test_dragon_model_answers_with_its_own_lm_or_says_why_it_cannot(ros, tmp_path, target_model, tokenizer, encoder):
    """``dragon_model`` set: the answerer loads that source's LM (not the drafter's) and the answer is
    DRDG/TW's over it; a source that cannot be loaded gives an Answer whose error names it and says why."""
    from edge_spec_ros.models.pairs import ModelSourceError

    docs = write_documents(tmp_path / "docs")
    memory = RobotMemory(tmp_path / "memory")
    memory.add("observation", "I saw the red chair in the kitchen", (1.0, 2.0, 0.0), time=1.0)
    verifier = EarlyExitVerifier(target_model)
    pair = drafter_pair(tokenizer)
    answering = DecoderStack(build_tiny_qwen2vl(DRAFTER_SPEC, tokenizer, seed=2))
    loaded = []

    def load(source, parts):
        loaded.append((source, tuple(parts)))
        return SimpleNamespace(drafter=SimpleNamespace(stack=answering), tokenizer=tokenizer,
                               prompt_encoder=lambda: encoder)

    def missing(source, parts):
        raise ModelSourceError(f"model source {source!r}: no GGUF here")

    answers = ros.collect(AnswerMsg, ANSWER_TOPIC, RELIABLE)
    n = 8
    server = VerifierServer(verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*", idle_exit_s=60.0,
                                                            max_requests=2000),
                            dragon_sessions(DragonService(verifier.stack, encoder, docs)))
    endpoint = server.start()
    try:
        config = DragonNodeConfig(verifier_endpoint=endpoint, memory_dir=str(memory.directory), dragon_timeout_s=30.0,
                                  dragon_model="answering-lm")
        answerer = DragonAnswerer(ros.node, pair, encoder, config, max_new_tokens=n, temperature=0.0, seed=0,
                                  load=load)
        assert loaded == [("answering-lm", ("drafter",))] and answerer.dragon.stack is answering
        wait_for(lambda: answerer.publisher.get_subscription_count() > 0, 10, "the answer subscription")
        text = answerer.answer(QUESTION, lambda: True)
        wait_for(lambda: len(answers) == 1, 10, "the Answer message")
        broken = DragonAnswerer(ros.node, pair, encoder, replace(config, dragon_model="smollm2"),
                                max_new_tokens=n, temperature=0.0, seed=0, load=missing)
        assert broken.dragon is None and broken.answer(QUESTION, lambda: True) is None
        wait_for(lambda: len(answers) == 2, 10, "the refusal's Answer message")
    finally:
        server.stop()
    expected = reference(answering, verifier.stack, memory, docs, chat_prompt_ids(encoder), tokenizer.decode, n)
    assert answers[0].error == "" and text == answers[0].text == encoder.decode(list(expected)).strip()
    assert answers[0].tokens == len(expected) and answers[0].memory_entries == 1
    error = answers[1].error
    assert answers[1].text == "" and "dragon_model 'smollm2' cannot be loaded" in error and "no GGUF here" in error


def test_a_new_instruction_cancels_an_answer_mid_way(ros, tmp_path, target_model, tokenizer, encoder):
    """``current()`` turning false while an answer decodes stops it at once (long before its token budget):
    nothing is published, the cloud's session is closed, and the next question is answered in full."""
    import threading

    docs = write_documents(tmp_path / "docs")
    memory = RobotMemory(tmp_path / "memory")
    memory.add("observation", "I saw the red chair in the kitchen", (1.0, 2.0, 0.0), time=1.0)
    verifier = EarlyExitVerifier(target_model)
    pair = drafter_pair(tokenizer)
    answers = ros.collect(AnswerMsg, ANSWER_TOPIC, RELIABLE)
    budget = 500
    server = VerifierServer(verifier, encoder, ServerConfig(bind="tcp://127.0.0.1:*", idle_exit_s=60.0,
                                                            max_requests=100000),
                            dragon_sessions(DragonService(verifier.stack, encoder, docs)))
    endpoint = server.start()
    try:
        config = DragonNodeConfig(verifier_endpoint=endpoint, memory_dir=str(memory.directory), dragon_timeout_s=30.0)
        answerer = DragonAnswerer(ros.node, pair, encoder, config, max_new_tokens=budget, temperature=0.0, seed=0)
        answerer.stop_tokens = ()  # no eos: only the budget or a cancel ends the answer
        wait_for(lambda: answerer.publisher.get_subscription_count() > 0, 10, "the answer subscription")
        superseded = threading.Event()
        result = []
        worker = threading.Thread(target=lambda: result.append(
            answerer.answer(QUESTION, lambda: not superseded.is_set())))
        worker.start()
        wait_for(lambda: answerer.dragon.last_peer is not None and len(answerer.dragon.last_peer.tokens) >= 3, 60,
                 "the answer's first tokens")
        superseded.set()  # a new instruction arrives
        worker.join(30)
        assert not worker.is_alive() and result == [None]
        committed = len(answerer.dragon.last_peer.tokens)
        assert 3 <= committed < budget and not answerer.dragon.last_peer.done
        wait_for(lambda: not server.sessions, 10, "the cloud to drop the cancelled session")
        answerer.dragon.config = replace(answerer.dragon.config, max_new_tokens=4)
        assert answerer.answer(QUESTION, lambda: True) is not None  # the next question: answered in full
        wait_for(lambda: len(answers) == 1, 10, "the next answer")
    finally:
        server.stop()
    assert answers[0].tokens == 4 and answers[0].error == ""
