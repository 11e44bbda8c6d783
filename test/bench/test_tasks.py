"""The text task set (FSD Table 6's task kinds) and the per-kind benchmark report."""

from __future__ import annotations

import pytest

from edge_spec_ros import warm_start
from edge_spec_ros.bench import report as bench_report
from edge_spec_ros.bench.runner import Bench, BenchConfig
from edge_spec_ros.bench.tasks import (
    BENCH,
    DISTILL,
    TASK_KINDS,
    TRAIN,
    task_prompts,
    text_encoder,
)
from edge_spec_ros.models.pairs import load_pair


def test_every_task_kind_has_its_own_bench_and_training_prompts():
    assert TASK_KINDS == ("conversation", "code", "maths", "instructions", "summarisation", "qa")
    for split in (BENCH, TRAIN):
        assert set(split) == set(TASK_KINDS)
        assert all(len(split[t]) >= 6 and len(set(split[t])) == len(split[t]) for t in TASK_KINDS)
    bench = {p for t in TASK_KINDS for p in BENCH[t]}
    train = {p for t in TASK_KINDS for p in TRAIN[t]}
    assert not bench & train  # the exits are measured on prompts they were not trained on


def test_no_training_prompt_holds_a_text_the_bench_asks_about():
    def texts(prompt: str) -> set[str]:  # what follows the question: an article, or nothing
        return {part for part in prompt.split("\n\n")[1:] if part}

    bench = {a for p in BENCH["summarisation"] for a in texts(p)}
    assert len(bench) == len(BENCH["summarisation"])  # every summarisation prompt carries its article
    for split in (TRAIN, DISTILL):
        for kind in TASK_KINDS:
            for prompt in split[kind]:
                assert not texts(prompt) & bench and not any(a in prompt for a in bench), prompt[:60]
    assert {a for p in TRAIN["summarisation"] for a in texts(p)}  # control: the train split has texts too


def test_task_prompts_are_text_only(tokenizer):
    encoder = text_encoder(tokenizer)
    prompts = task_prompts(encoder, 2, tasks=("code", "qa"))
    assert [p.task for p in prompts] == ["code", "code", "qa", "qa"]
    assert all(p.prompt.pixel_values is None and int(p.prompt.mm_token_type_ids.sum()) == 0 for p in prompts)
    assert tokenizer.decode(prompts[0].prompt.input_ids).endswith(f"{BENCH['code'][0]}<|im_end|>\n<|im_start|>assistant\n")
    assert len(task_prompts(encoder, split="train")) == sum(len(v) for v in TRAIN.values())
    with pytest.raises(ValueError, match="unknown task kinds"):
        task_prompts(encoder, 1, tasks=("poetry",))
    with pytest.raises(ValueError, match="split"):
        task_prompts(encoder, 1, split="test")


def test_a_text_prompt_encodes_as_before(tokenizer, encoder):
    """A plain-string user turn renders exactly as the Qwen2-VL template's one-text-part list did."""
    messages = [{"role": "system", "content": encoder.config.system_prompt},
                {"role": "user", "content": [{"type": "text", "text": "stop"}]}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert encoder.encode("stop").input_ids.tolist() == tokenizer(text)["input_ids"]


def test_bench_reports_every_task_kind(start_server, target_model, tokenizer, tmp_path):
    """A small random Qwen2-VL served from a checkpoint directory, its first 4 layers drafting."""
    target_model.save_pretrained(tmp_path / "verifier")
    tokenizer.save_pretrained(tmp_path / "verifier")
    config = BenchConfig(profile="loopback", task_set="text", prompts=1, max_new_tokens=4, threads=2)
    pair = load_pair(tmp_path / "verifier", parts=("drafter",), draft_layers=4)
    serve = ("--verifier", str(tmp_path / "verifier"), "--dtype", "float32", "--device", "cpu", "--threads", "1")
    with start_server(*serve) as endpoint:
        report = Bench(pair, endpoint, config).run()
    assert report["exact"] == "identical outputs across ar, sd, fsd"
    tasks = report["tasks"]
    assert list(tasks) == [*TASK_KINDS, "average"]
    for row in tasks.values():
        assert {"speedup_ar_sd", "speedup_sd_fsd", "tau", "miss_rate", "alpha", "tokens"} <= set(row)
        assert row["tau"] >= 1 and 0 <= row["miss_rate"] <= 1
    assert tasks["average"]["tau"] == pytest.approx(sum(tasks[t]["tau"] for t in TASK_KINDS) / 6)
    assert all(tasks[t]["speedup_ar_best"] == max(tasks[t]["speedup_ar_sd"], tasks[t]["speedup_ar_fsd"])
               for t in TASK_KINDS)
    assert report["stamp"]["pair"].startswith(f"{tmp_path / 'verifier'} (verifier 0.")  # parameters of both parts
    text = bench_report.table(report)
    assert text.startswith("measured on commit ")
    assert "per task kind (cf. FSD Table 6)" in text and "cache miss rate" in text and "summarisation" in text
    assert "speedup AR → BEST" in text and "speedup SD → FSD" in text


def test_bench_config_checks_the_task_set():
    with pytest.raises(ValueError, match="unknown task set"):
        BenchConfig(task_set="images")
    with pytest.raises(ValueError, match="unknown task kinds"):
        BenchConfig(task_set="text", tasks=("poetry",))


@pytest.mark.slow
def test_bench_with_smollm2(tmp_path):
    """The real pair through the whole network stack: SmolLM2 served, its first 6 layers drafting."""
    import json
    import sys

    cmd = [sys.executable, "-m", "edge_spec_ros.cli", "bench", "--verifier", "smollm2", "--draft-layers", "6",
           "--task-set", "text", "--prompts", "1", "--max-new-tokens", "6", "--threads", "2", "--out", str(tmp_path)]
    result = warm_start.run(cmd, check=False, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "identical outputs across ar, sd, fsd" in result.stdout and "per task kind" in result.stdout
    report = json.loads((tmp_path / "bench_loopback.json").read_text())
    assert list(report["tasks"]) == [*TASK_KINDS, "average"]


def test_bench_drafts_with_a_distilled_drafter_behind_prompt_lookup(start_server, target_model, tokenizer, tmp_path):
    """``bench --distilled DIR --draft-source lookup``: the robot's drafter is the distilled one in DIR
    behind prompt lookup, and the outputs stay the verifier's."""
    import argparse

    from edge_spec_ros.commands.bench import bench_pair
    from edge_spec_ros.edge.draft_sources import LookupDrafter
    from edge_spec_ros.models.distilled_drafter import DistilledConfig, DistilledDrafter, build_student, head_ids, \
        save_student

    verifier_dir, distilled_dir = tmp_path / "verifier", tmp_path / "distilled"
    target_model.save_pretrained(verifier_dir)
    tokenizer.save_pretrained(verifier_dir)
    student = build_student(target_model, 2, head_ids(target_model.config.text_config.vocab_size, 64))
    save_student(student, DistilledConfig(str(verifier_dir), 2, 64), distilled_dir)
    args = argparse.Namespace(verifier=str(verifier_dir), draft_layers=0, adapters=None, distilled=str(distilled_dir),
                              draft_source="lookup", datastore="")
    pair, serve = bench_pair(args)
    assert isinstance(pair.drafter, LookupDrafter) and isinstance(pair.drafter.model, DistilledDrafter)
    assert "(drafter: distilled" in pair.source and "(draft source: lookup)" in pair.source
    config = BenchConfig(profile="loopback", task_set="text", tasks=("summarisation",), prompts=1, max_new_tokens=6,
                         modes=("ar", "sd"))
    with start_server(*serve, "--threads", "1") as endpoint:
        report = Bench(pair, endpoint, config).run()
    assert report["exact"] == "identical outputs across ar, sd"
    assert pair.drafter.lookup_tokens + pair.drafter.model_tokens > 0
    for bad in ({"distilled": str(tmp_path / "missing")}, {"draft_layers": 2}):
        with pytest.raises(SystemExit, match="--distilled"):
            bench_pair(argparse.Namespace(**{**vars(args), **bad}))
    for bad, says in (({"draft_source": "retrieval"}, "needs a datastore"),
                      ({"draft_source": "retrieval", "datastore": str(tmp_path / "none.json")}, "cannot read"),
                      ({"datastore": str(tmp_path / "none.json")}, "read by draft source 'retrieval' only")):
        with pytest.raises(SystemExit, match=says):
            bench_pair(argparse.Namespace(**{**vars(args), **bad}))
