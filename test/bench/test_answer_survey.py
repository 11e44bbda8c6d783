"""bench/answer_survey.py runs the question set through the robot's answer path (a real VerifierServer
with the item's documents, a ZmqDragonLink) and writes one JSON line per item."""

from __future__ import annotations

import json

from edge_spec_ros.bench.answer_survey import SurveyRow, summary
from edge_spec_ros.cli import main


def test_summary_counts_per_kind():
    rows = [SurveyRow("r1", "robot", "q", "in the kitchen", True, 4, 1.0, 1.0, 0.5, 1),
            SurveyRow("c1", "cloud", "q", "no idea", False, 2, 3.0, 1.0, 1.0, 0)]
    by = {s["need"]: s for s in summary(rows)}
    assert by["robot"]["accuracy"] == 1.0 and by["cloud"]["accuracy"] == 0.0 and "both" not in by
    assert by["all"] == {"need": "all", "items": 2, "accuracy": 0.5, "mean_tokens": 3.0, "mean_wall_s": 2.0}


def test_one_item_through_the_answer_path(capsys):
    assert main(["bench", "answer-survey", "--model", "embedded", "--items", "1", "--max-new-tokens", "4"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    row = json.loads(line)
    assert row["id"] == "r01" and 0 < row["tokens"] <= 4 and row["memory_entries"] >= 1 and row["wall_s"] > 0
