"""Distil a drafter from its verifier's own greedy answers (``models/distilled_drafter.py``).

Data: the verifier's greedy answers to the text task set's training split (``bench/tasks.TRAIN``),
each after its prompt: the stream ``train-exits --text tasks`` writes (``train_tokens.json``), reused
when given, else generated once into ``--out``. Under greedy decoding a draft token is accepted
exactly when it is the verifier's argmax, and on its own greedy answer the verifier's argmax at
position t is the answer's token t + 1: so the loss is the cross-entropy of the student's next token
against the answer's next token, over the answer's positions (hard-label distillation of the greedy
verifier; no verifier pass per step). The bench split is never trained on.

Resumable and seeded: the sample of step k is a function of (seed, k); student, optimiser state and
step are checkpointed every ``checkpoint_every`` steps and at the end (``--max-minutes`` stops at a
checkpoint), and a rerun with the same arguments continues. One torch thread by default.

Run: ``nice -n 10 python -m edge_spec_ros.training.drafter_distill --stream
artifacts/smollm2/exits/train_tokens.json --out artifacts/drafter/distilled``.

Legend: K — kept decoder layers; N — head rows.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from edge_spec_ros.models.distilled_drafter import (
    DEFAULT_HEAD_ROWS,
    DEFAULT_LAYERS,
    DistilledConfig,
    build_student,
    head_ids,
    load_student,
    save_student,
    trainable_parameters,
)

STATE_FILE = "distill_state.pt"
ANSWER_TOKENS = 96  # the answer length train-exits --text tasks generates (--gen-tokens)


@dataclass(frozen=True)
class DistillConfig:
    layers: int = DEFAULT_LAYERS
    head_rows: int = DEFAULT_HEAD_ROWS
    steps: int = 480
    lr: float = 1e-4
    seed: int = 0
    checkpoint_every: int = 40


@dataclass(frozen=True)
class Sample:
    """One training sequence: prompt ids followed by the verifier's answer; ``answer_start`` indexes
    the answer's first token."""

    ids: list[int]
    answer_start: int


def split_stream(stream: list[int], prompts: list[list[int]], max_answer: int, stop: int) -> list[Sample]:
    """The (prompt, answer) samples of a stream made of each prompt followed by the verifier's answer
    (at most ``max_answer`` tokens, ending at ``stop`` or at that length)."""
    samples, pos = [], 0
    for prompt in prompts:
        if stream[pos:pos + len(prompt)] != prompt:
            raise ValueError(f"the stream does not hold the training prompts in order (at token {pos})")
        start = pos + len(prompt)
        end = start
        while end < len(stream) and end - start < max_answer:
            end += 1
            if stream[end - 1] == stop:
                break
        samples.append(Sample(stream[pos:end], len(prompt)))
        pos = end
    if pos != len(stream):
        raise ValueError(f"{len(stream) - pos} stream tokens after the last answer")
    return samples


def sample_loss(student, sample: Sample) -> torch.Tensor:
    """Cross-entropy of the student's next token against the answer's, over the answer positions
    whose next token the pruned head can say."""
    ids = torch.tensor([sample.ids])
    logits = student(input_ids=ids).logits[0]  # (T, V), −∞ outside the head's ids
    first = sample.answer_start - 1  # the last prompt token predicts the answer's first token
    pred = logits[first:len(sample.ids) - 1]
    target = ids[0, first + 1:].clone()
    in_head = torch.isin(target, student.lm_head.ids)
    target[~in_head] = -100
    return torch.nn.functional.cross_entropy(pred.float(), target, ignore_index=-100)


@torch.no_grad()
def token_match(student, samples: list[Sample]) -> float:
    """Teacher-forced agreement with the verifier's greedy answers: % of answer positions where the
    student's argmax is the verifier's next token."""
    hit = n = 0
    for s in samples:
        logits = student(input_ids=torch.tensor([s.ids])).logits[0]
        first = s.answer_start - 1
        pred = logits[first:len(s.ids) - 1].argmax(-1)
        target = torch.tensor(s.ids[first + 1:])
        hit += int((pred == target).sum())
        n += target.numel()
    return 100.0 * hit / max(n, 1)


def distill(verifier_model, samples: list[Sample], config: DistillConfig, out_dir: str | Path, verifier: str,
            always: tuple[int, ...] = (), max_seconds: float | None = None,
            progress: Callable[[int, float], None] = lambda step, loss: None):
    """Train (or resume) until ``config.steps`` or ``max_seconds``; returns (student, step reached)."""
    out = Path(out_dir)
    torch.manual_seed(config.seed)
    seen = sorted({t for s in samples for t in s.ids[s.answer_start:]})
    state_path = out / STATE_FILE
    if state_path.is_file():
        state = torch.load(state_path, weights_only=True)
        if state["config"] != asdict(config) | {"steps": state["config"]["steps"]}:
            raise ValueError(f"{out} holds a run with another configuration: {state['config']}")
        student, _ = load_student(verifier_model, out)
        step = int(state["step"])
    else:
        student = build_student(verifier_model, config.layers,
                                head_ids(verifier_model.config.text_config.vocab_size, config.head_rows, seen, always))
        state, step = None, 0
    student.requires_grad_(False)
    params = trainable_parameters(student)
    for p in params:
        p.requires_grad_(True)
    student.train()
    optimiser = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
    if state is not None:
        optimiser.load_state_dict(state["optimiser"])
    t0 = time.monotonic()
    while step < config.steps:
        sample = samples[random.Random(config.seed * 1_000_003 + step).randrange(len(samples))]
        loss = sample_loss(student, sample)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        step += 1
        progress(step, float(loss.detach()))
        timed_out = max_seconds is not None and time.monotonic() - t0 > max_seconds
        if step % config.checkpoint_every == 0 or step == config.steps or timed_out:
            save_student(student, DistilledConfig(verifier, config.layers, config.head_rows, step), out)
            torch.save({"step": step, "optimiser": optimiser.state_dict(), "config": asdict(config)}, state_path)
        if timed_out:
            break
    return student.eval().requires_grad_(False), step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verifier", default="smollm2", help="model source (docs/models.md)")
    parser.add_argument("--stream", default=None,
                        help="train_tokens.json of `train-exits --text tasks` (default: generate into --out)")
    parser.add_argument("--out", default="artifacts/drafter/distilled")
    parser.add_argument("--layers", type=int, default=DEFAULT_LAYERS)
    parser.add_argument("--head-rows", type=int, default=DEFAULT_HEAD_ROWS)
    parser.add_argument("--steps", type=int, default=DistillConfig.steps)
    parser.add_argument("--lr", type=float, default=DistillConfig.lr)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-minutes", type=float, default=45.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from edge_spec_ros.bench.tasks import task_prompts, text_encoder
    from edge_spec_ros.models.pairs import load_pair
    from edge_spec_ros.training.self_distill import cached_stream, self_generated_stream

    pair = load_pair(args.verifier, parts=("verifier",))
    stop = pair.tokenizer.eos_token_id
    prompts = [t.prompt for t in task_prompts(text_encoder(pair.tokenizer), split="train")]
    if args.stream:
        stream = [int(t) for t in json.loads(Path(args.stream).read_text())]
    else:
        stream = cached_stream(args.out, lambda: self_generated_stream(pair.verifier, prompts, ANSWER_TOKENS, (stop,)))
    samples = split_stream(stream, [p.input_ids.tolist() for p in prompts], ANSWER_TOKENS, stop)
    config = DistillConfig(args.layers, args.head_rows, args.steps, args.lr, args.seed)
    model = pair.verifier.stack.model
    log_every = 20
    started = time.monotonic()

    def progress(step: int, loss: float) -> None:
        if step % log_every == 0:
            print(f"step {step}/{config.steps} loss {loss:.3f} ({time.monotonic() - started:.0f} s)", flush=True)

    student, step = distill(model, samples, config, args.out, args.verifier, (stop,), 60 * args.max_minutes, progress)
    report = {"step": step, "answers": len(samples), "answer_tokens": sum(len(s.ids) - s.answer_start for s in samples),
              "train_token_match_pct": round(token_match(student, samples), 1), "config": asdict(config)}
    Path(args.out, "distill_report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
