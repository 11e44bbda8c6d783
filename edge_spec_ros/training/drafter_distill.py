"""Distil a drafter from its verifier's own greedy answers (``models/distilled_drafter.py``).

Data: the verifier's greedy answers (at most 96 tokens) to the text task set's ``train`` and
``distill`` prompts (``bench/tasks.py``; 168 prompts, never the bench split), and with
``--sampled-answers S`` S more answers per prompt sampled at T = 0.7 (more contexts, each position
still with the verifier's own top-k as its target: a departure from training on greedy answers only,
for data, since the prompts are few), and with ``--synthetic-prompts N`` the greedy answers to N
prompts the verifier writes itself (``training/synthetic_prompts.py``, Magpie), generated once into
``--out`` in batches (resumable) with the verifier's top-k logits per answer token. Under greedy
decoding a draft token is accepted exactly when it is the verifier's argmax, which on its own answer
is the answer's next token; the loss is the cross-entropy of the student's next-token distribution
against the verifier's top-k distribution (soft targets carry more than the argmax; no verifier pass
per training step). The stream of ``train-exits --text tasks`` can be added (``--stream``, hard labels).

A step trains on ``--batch-size`` samples of similar length in one right-padded pass, with the
head's logits taken at the answer positions only; ``--autocast bfloat16`` runs the matmuls in bf16
(float32 weights and AdamW state), which CPUs with AMX or AVX512-BF16 run several times faster than
float32.

Resumable and seeded: the samples of step k are a function of (seed, k); student, optimiser state
and step are checkpointed every ``checkpoint_every`` steps and at the end (``--max-minutes`` stops at
a checkpoint), and a rerun with the same arguments continues. One torch thread by default.

Run: ``nice -n 10 python -m edge_spec_ros.training.drafter_distill --out artifacts/drafter/distilled``.

Legend: K — kept decoder layers; N — head rows.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from edge_spec_ros.config_cli import add_config, config_from, doc
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
from edge_spec_ros.models.prompt import PromptEncoder

STATE_FILE = "distill_state.pt"
ANSWER_TOKENS = 96  # the answer length train-exits --text tasks generates (--gen-tokens)
DATA_FILE = "distill_data.json"
TOP_K = 8  # verifier logits kept per answer token (the soft target)
GEN_BATCH = 8
SAMPLE_TEMPERATURE = 0.7  # the extra sampled answers (--sampled-answers): near the greedy path, not on it
AUTOCAST = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # training matmul precision (--autocast)


@dataclass(frozen=True)
class DistillConfig:
    """One distillation run: ``distill-drafter``'s training options are these fields (config_cli.add_config)."""

    layers: int = field(default=DEFAULT_LAYERS, metadata=doc("the verifier's first layers the drafter keeps",
                                                             1, 1000))
    head_rows: int = field(default=DEFAULT_HEAD_ROWS, metadata=doc("rows of the pruned LM head", 1, 10**7))
    steps: int = field(default=3000, metadata=doc("training steps", 0, 10**9))
    lr: float = field(default=2e-4, metadata=doc("learning rate", 0.0, 10.0))
    seed: int = field(default=0, metadata=doc("data and initialisation seed"))
    checkpoint_every: int = field(default=40, metadata=doc(
        "steps between checkpoints (a run resumes from the last)", 1, 10**9))
    batch_size: int = field(default=1, metadata=doc(
        "samples per training step (of similar length, right-padded: step_batch)", 1, 100_000))
    autocast: str = field(default="float32", metadata={**doc(
        "matmul precision of training; bfloat16 is several times faster on CPUs with AMX or AVX512-BF16 "
        "(float32 weights and optimiser either way)"), "choices": tuple(sorted(AUTOCAST))})


@dataclass(frozen=True)
class Sample:
    """One training sequence: prompt ids followed by the verifier's answer; ``answer_start`` indexes
    the answer's first token. ``top_ids`` / ``top_logits``: per answer token, the verifier's top-k ids
    and logits at the step that chose it (its soft target; None: the answer's tokens only)."""

    ids: list[int]
    answer_start: int
    top_ids: list[list[int]] | None = None
    top_logits: list[list[float]] | None = None


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


def head_rows_of(student) -> torch.Tensor:
    """(V,) the pruned head's row of every token id, −1 for the ids it cannot say."""
    ids = student.lm_head.ids
    rows = torch.full((student.lm_head.vocab_size,), -1, dtype=torch.long)
    rows[ids] = torch.arange(ids.numel())
    return rows


def batch_loss(student, batch: list[Sample], rows: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the student's next-token distribution against the verifier's, over the answer
    positions of ``batch`` (mean over positions): the verifier's top-k distribution renormalised over
    the ids the pruned head can say when a sample carries it, else the answer's next token (positions
    whose targets the head cannot say are left out). ``rows``: ``head_rows_of(student)``.

    The sequences are right-padded into one forward pass without an attention mask: attention is
    causal, so no real position sees the padding after it. The logits are taken over the head's N rows
    at the answer positions only, which is the same log-softmax as over the whole vocabulary with −∞
    outside the head (``PrunedHead``), at a fraction of the work."""
    width = max(len(s.ids) for s in batch)
    ids = torch.tensor([s.ids + [s.ids[-1]] * (width - len(s.ids)) for s in batch])  # (B, T)
    h = student.model.language_model(input_ids=ids).last_hidden_state  # (B, T, d)
    states, tops, teachers = [], [], []
    for b, s in enumerate(batch):
        first = s.answer_start - 1  # the last prompt token predicts the answer's first token
        n = len(s.ids) - 1 - first
        states.append(h[b, first:first + n])
        if s.top_ids is None:  # hard labels: the answer's next token with probability 1
            tops.append(torch.tensor(s.ids[first + 1:]).unsqueeze(-1))
            teachers.append(torch.zeros(n, 1))
        else:
            tops.append(torch.tensor(s.top_ids)[:n])
            teachers.append(torch.tensor(s.top_logits, dtype=torch.float32)[:n])
    k = max(t.shape[-1] for t in tops)
    top = rows[torch.cat([torch.nn.functional.pad(t, (0, k - t.shape[-1]), value=-1) for t in tops])]  # (n, k)
    teacher = torch.cat([torch.nn.functional.pad(t, (0, k - t.shape[-1]), value=float("-inf")) for t in teachers])
    teacher = teacher.masked_fill(top < 0, float("-inf"))
    keep = torch.isfinite(teacher).any(-1)
    p = torch.softmax(teacher[keep], -1)  # (n', k)
    z = (torch.cat(states)[keep] @ student.lm_head.weight.T).float()  # (n', N)
    logq = torch.log_softmax(z, -1).gather(-1, top[keep].clamp(min=0))  # (n', k)
    return -(p * logq.masked_fill(p == 0, 0.0)).sum(-1).mean()


def sample_loss(student, sample: Sample) -> torch.Tensor:
    """``batch_loss`` of one sample."""
    return batch_loss(student, [sample], head_rows_of(student))


def step_batch(samples: list[Sample], by_length: list[int], seed: int, step: int, size: int) -> list[Sample]:
    """The samples of training step ``step``, a function of (seed, step): ``size`` samples of similar
    length (a window of ``by_length``, the samples' indices sorted by length, at a random offset,
    wrapping round so that every sample is as likely), so the padded batch wastes little work."""
    rng = random.Random(seed * 1_000_003 + step)
    start = rng.randrange(len(samples))
    if size == 1:
        return [samples[start]]
    return [samples[by_length[(start + j) % len(samples)]] for j in range(min(size, len(samples)))]


@torch.no_grad()
def generate_samples(model, prompts: list[list[int]], pad: int, stop: int, max_new_tokens: int, top_k: int,
                     batch_size: int, done: list[Sample] | None = None,
                     checkpoint: Callable[[list[Sample]], None] = lambda samples: None,
                     sampled_from: int | None = None, temperature: float = SAMPLE_TEMPERATURE,
                     seed: int = 0, sampled_to: int | None = None) -> list[Sample]:
    """The verifier's answers to ``prompts`` (token ids), ``batch_size`` prompts per batched,
    left-padded HF ``generate``, with its top-k logits per answer token; continues after ``done``
    (the samples of an interrupted run) and calls ``checkpoint`` after each batch. Answers are
    sampled at ``temperature`` (top-50) from index ``sampled_from`` up to ``sampled_to`` (None: the end)
    and greedy elsewhere, each batch with the generator seeded by (seed, batch start), so a resumed run
    draws the same answers. Batching may round a logit differently from one-prompt decoding: these
    are training data, not references."""
    samples = list(done or [])
    boundary = len(prompts) if sampled_from is None else sampled_from
    sampled_end = len(prompts) if sampled_to is None else sampled_to
    while len(samples) < len(prompts):
        b = len(samples)
        sampled = boundary <= b < sampled_end
        end = boundary if b < boundary else sampled_end if sampled else len(prompts)
        batch = prompts[b:min(b + batch_size, end)]
        width = max(map(len, batch))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        options = dict(do_sample=True, temperature=temperature, top_k=50, top_p=1.0) if sampled else \
            dict(do_sample=False)
        if sampled:
            torch.manual_seed(seed * 1_000_003 + b)
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, **options,
                             eos_token_id=stop, pad_token_id=pad, output_logits=True, return_dict_in_generate=True)
        steps = torch.stack(out.logits, 1).float()  # (B, n, V)
        top = steps.topk(top_k, -1)
        for row, prompt in enumerate(batch):
            answer = out.sequences[row, width:].tolist()
            if stop in answer:
                answer = answer[:answer.index(stop) + 1]
            n = len(answer)
            samples.append(Sample(prompt + answer, len(prompt), top.indices[row, :n].tolist(),
                                  [[round(v, 4) for v in r] for r in top.values[row, :n].tolist()]))
        checkpoint(samples)
    return samples


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
        saved = asdict(DistillConfig()) | state["config"]  # a run saved before a field existed had its default
        if saved != asdict(config) | {"steps": saved["steps"]}:
            raise ValueError(f"{out} holds a run with another configuration: {saved}")
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
    if config.autocast not in AUTOCAST:
        raise ValueError(f"autocast must be one of {sorted(AUTOCAST)}, got {config.autocast!r}")
    rows = head_rows_of(student)
    by_length = sorted(range(len(samples)), key=lambda i: len(samples[i].ids))
    t0 = time.monotonic()
    while step < config.steps:
        batch = step_batch(samples, by_length, config.seed, step, config.batch_size)
        with torch.autocast("cpu", dtype=AUTOCAST[config.autocast], enabled=config.autocast != "float32"):
            loss = batch_loss(student, batch, rows)
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


def load_samples(path: Path) -> list[Sample]:
    return [Sample(**d) for d in json.loads(path.read_text())] if path.is_file() else []


def save_samples(samples: list[Sample], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([asdict(s) for s in samples]))
    tmp.replace(path)


def synthetic_prompts(model, encoder: PromptEncoder, held_out: tuple[str, ...], args: argparse.Namespace
                      ) -> list[list[int]]:
    """``--synthetic-prompts N``: N prompts written by the verifier (``training/synthetic_prompts.py``),
    none a near-copy of ``held_out``, kept in ``--out`` (resumable), as token ids in ``encoder``'s chat
    format."""
    from edge_spec_ros.training.synthetic_prompts import PROMPTS_FILE, PromptBatch, write_prompts

    path = Path(args.out) / PROMPTS_FILE
    started = time.monotonic()

    def checkpoint(state: PromptBatch) -> None:
        state.save(path)
        print(f"synthetic prompts: {state.attempts}/{args.synthetic_prompts} written, {len(state.prompts)} kept "
              f"({time.monotonic() - started:.0f} s)", flush=True)

    written = write_prompts(model, encoder, args.synthetic_prompts, args.gen_batch, held_out, args.seed,
                            PromptBatch.load(path), checkpoint)
    return [encoder.encode(p.text).input_ids.tolist() for p in written.prompts]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros distill-drafter`` (cli.py, which gives ``run`` the task set)."""
    parser.add_argument("--verifier", default="smollm2", help="model source (docs/models.md)")
    parser.add_argument("--splits", default="train,distill",
                        help="text task set splits whose prompts the verifier answers (never bench)")
    parser.add_argument("--stream", default=None,
                        help="also train on a train_tokens.json of `train-exits --text tasks` (hard labels)")
    parser.add_argument("--out", default="artifacts/drafter/distilled")
    add_config(parser, DistillConfig)
    parser.add_argument("--answer-tokens", type=int, default=ANSWER_TOKENS)
    parser.add_argument("--top-k", type=int, default=TOP_K, help="verifier logits kept per answer token")
    parser.add_argument("--sampled-answers", type=int, default=0,
                        help="beside each greedy answer, this many answers sampled at T = 0.7 (top-50, seeded): "
                             "more contexts, each with the verifier's own top-k targets")
    parser.add_argument("--synthetic-prompts", type=int, default=0,
                        help="the verifier also writes this many prompts of its own (Magpie, kinds in turn; "
                             "training/synthetic_prompts.py) and answers each greedily")
    parser.add_argument("--gen-batch", type=int, default=GEN_BATCH, help="prompts per batched generate")
    parser.add_argument("--generate-only", action="store_true", help="stop after the training answers")
    parser.add_argument("--max-minutes", type=float, default=40.0, help="training time (a rerun continues)")
    parser.add_argument("--threads", type=int, default=1)


def run(args: argparse.Namespace, prompts_of: Callable[[object, str], list[list[int]]],
        encoder_of: Callable[[object], PromptEncoder], held_out: tuple[str, ...]) -> None:
    """Answer the prompts of ``args.splits`` with the verifier (resumable), then distil; ``prompts_of``
    (tokenizer, split) gives a split's prompts as token ids (the text task set, bench/tasks.py);
    ``encoder_of`` (tokenizer) the task set's prompt encoder and ``held_out`` its bench prompts, for
    ``--synthetic-prompts``."""
    torch.set_num_threads(args.threads)
    from edge_spec_ros.models.pairs import load_pair

    splits = [s for s in args.splits.split(",") if s]
    if "bench" in splits:
        raise ValueError("the bench split is what the drafter is measured on; it is never trained on")
    pair = load_pair(args.verifier, parts=("verifier",))
    model = pair.verifier.stack.model
    stop = pair.tokenizer.eos_token_id
    pad = pair.tokenizer.pad_token_id if pair.tokenizer.pad_token_id is not None else stop
    prompts = [ids for split in splits for ids in prompts_of(pair.tokenizer, split)]
    data = Path(args.out) / DATA_FILE
    started = time.monotonic()

    def checkpoint(samples: list[Sample]) -> None:
        save_samples(samples, data)
        print(f"answers {len(samples)}/{len(prompts)} ({time.monotonic() - started:.0f} s)", flush=True)

    greedy = len(prompts)
    prompts = prompts * (1 + args.sampled_answers)
    sampled_end = len(prompts)
    synthetic = synthetic_prompts(model, encoder_of(pair.tokenizer), held_out, args) if args.synthetic_prompts else []
    prompts += synthetic
    samples = generate_samples(model, prompts, pad, stop, args.answer_tokens, args.top_k, args.gen_batch,
                               load_samples(data), checkpoint, sampled_from=greedy, seed=args.seed,
                               sampled_to=sampled_end)
    if args.stream:
        train_prompts = prompts_of(pair.tokenizer, "train")
        stream = [int(t) for t in json.loads(Path(args.stream).read_text())]
        samples += split_stream(stream, train_prompts, ANSWER_TOKENS, stop)
    if args.generate_only:
        return
    config = config_from(DistillConfig, args)
    log_every = 20

    def progress(step: int, loss: float) -> None:
        if step % log_every == 0:
            print(f"step {step}/{config.steps} loss {loss:.3f} ({time.monotonic() - started:.0f} s)", flush=True)

    student, step = distill(model, samples, config, args.out, args.verifier, (stop,), 60 * args.max_minutes, progress)
    report = {"step": step, "answers": len(samples), "sampled_answers": sampled_end - greedy,
              "synthetic_prompts": len(synthetic),
              "answer_tokens": sum(len(s.ids) - s.answer_start for s in samples),
              "train_token_match_pct": round(token_match(student, samples), 1), "config": asdict(config),
              "splits": splits, "minutes": round((time.monotonic() - started) / 60, 1)}
    Path(args.out, "distill_report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report))
