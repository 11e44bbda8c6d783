"""How well draft sources agree with a verifier: τ at γ per task kind, greedy, side by side.

Under greedy decoding the verifier's output is a fixed sequence y_1..y_n (its own autoregressive
answer), and a speculative round from position t commits the longest prefix of the draft that equals
y_{t+1..} plus one token of the verifier's (the correction or the bonus token). So τ of any draft
source follows exactly from replaying its drafts against y: no verifier pass per round is needed, and
every source is measured on the very same answers. The replay drafts from every prefix the real
decoder would draft from (the committed sequence after each round), with the source's own cache.

Per source and task kind it reports τ (tokens per round), α (accepted / drafted draft tokens), the
share of drafted tokens that came from prompt lookup, and the source's draft time per drafted token
relative to one verifier token step (T_SLM / T_q per token, both measured in this run, one thread),
beside the analytic ratio of per-token multiply-accumulates (Linear weights on the token path: the
decoder layers, adapters and the LM head rows; attention over the context is left out).

Sources: ``lookup`` (prompt lookup over prompt + committed text, ``edge/draft_sources.PromptLookup``;
a round it has nothing for commits the verifier's one token), ``self-K`` (the verifier's first K
layers + the exit-K adapter), ``lookup→self-K`` (``LookupDrafter``: lookup first, the model fills the
block), and the same two for a distilled drafter checkpoint (``training/drafter_distill.py``); with
``--datastore``, ``retrieval→lookup`` (``edge/retrieval.py``: the datastore's continuation first, then
prompt lookup) alone and ahead of each model.

Run: ``edge-spec-ros bench drafter-agreement --adapters artifacts/smollm2/exits
--draft-layers 6 [--distilled artifacts/drafter/distilled] [--datastore
artifacts/drafter/distilled/distill_data.json] --out artifacts/drafter/agreement``.

Legend: γ — draft length; τ — tokens committed per round; α — acceptance rate; T_SLM, T_q — one
drafter / verifier token step.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from torch import nn

from edge_spec_ros.bench.tasks import TASK_KINDS, task_prompts, text_encoder
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.edge.draft_sources import FirstProposal, LookupDrafter, PromptLookup
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.prompt import EncodedPrompt
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig

GAMMA = 4
MAX_NEW_TOKENS = 64
TARGET_TAU = 2.5
TIMING_TOKENS = 16
ANSWERS_FILE = "answers.json"
GREEDY = SamplingConfig()

Propose = Callable[[list[int], int], tuple[int, ...]]


@dataclass
class Replay:
    """One source on one or more answers: rounds, committed tokens, drafted and accepted draft tokens,
    lookup-drafted tokens, draft seconds."""

    rounds: int = 0
    committed: int = 0
    drafted: int = 0
    accepted: int = 0
    lookup: int = 0
    draft_s: float = 0.0

    def add(self, other: "Replay") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def tau(self) -> float:
        return self.committed / self.rounds if self.rounds else 0.0

    @property
    def alpha(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


def replay(propose: Propose, prompt_ids: list[int], answer: list[int], gamma: int) -> Replay:
    """Greedy speculative decoding of ``answer`` (the verifier's own greedy answer) with drafts from
    ``propose(prefix, γ)``: each round commits the draft's longest prefix that matches the answer
    plus the verifier's token (fewer at the end of the answer)."""
    out = Replay()
    t = 0
    while t < len(answer):
        t0 = time.perf_counter()
        draft = propose(prompt_ids + answer[:t], gamma)
        out.draft_s += time.perf_counter() - t0
        a = 0
        while a < len(draft) and t + a < len(answer) and draft[a] == answer[t + a]:
            a += 1
        commit = min(a + 1, len(answer) - t)
        out.rounds += 1
        out.committed += commit
        out.drafted += len(draft)
        out.accepted += min(a, commit)
        t += commit
    return out


def reference_answers(verifier, prompts: list, config: DecodeConfig, source: str, path: Path) -> list[list[int]]:
    """The verifier's greedy answers to ``prompts`` (``TaskPrompt``), kept in ``path`` by prompt text,
    source and token budget, so that later runs replay the same answers without decoding them again."""
    cache = json.loads(path.read_text()) if path.is_file() else {}
    key = lambda p: f"{source}|{config.max_new_tokens}|{p.text}"  # noqa: E731
    missing = [p for p in prompts if key(p) not in cache]
    for p in missing:
        cache[key(p)] = autoregressive(verifier, p.prompt, config).tokens
    if missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache))
    return [cache[key(p)] for p in prompts]


def verifier_token_time(verifier, prompts: list, kinds: tuple[str, ...], config: DecodeConfig) -> float:
    """T_q per token: seconds per greedy verifier token step, measured in this run on the first prompt
    of every kind (``TIMING_TOKENS`` tokens each)."""
    timing = DecodeConfig(max_new_tokens=TIMING_TOKENS, gamma=config.gamma)
    s = n = 0
    for kind in kinds:
        p = next(p for p in prompts if p.task == kind)
        result = autoregressive(verifier, p.prompt, timing)
        s, n = s + result.stats.verify_s, n + result.stats.tokens
    return s / n


def teacher_forced_hits(drafter: Drafter, prompt: EncodedPrompt, answer: list[int]) -> list[bool]:
    """hits[j]: the drafter's greedy token after the prompt and ``answer[:j]`` is ``answer[j]``, all j in
    one forward pass. A greedy draft from position t matches the answer for as long as these hold in a
    row (each accepted draft token is the answer's token, so the next draft step sees the answer's
    prefix), which makes ``replay_hits`` exact without drafting round by round."""
    ids = prompt.input_ids.tolist()
    logits = drafter.stack.final_logits(drafter.start(prompt), ids + answer, len(ids) - 1)  # (n + 1, V)
    return (logits[:len(answer)].argmax(-1) == torch.tensor(answer)).tolist()


def replay_hits(prompt_ids: list[int], answer: list[int], gamma: int, hits: list[bool] | None,
                lookup: PromptLookup | FirstProposal | None) -> Replay:
    """``replay`` of the chain lookup → model (either may be absent) from the model's teacher-forced
    ``hits``: each round the lookup proposes k ≤ γ tokens and, when all k match, the model's γ − k
    continue while they hit (the model drafts γ − k whatever happens: their count is drafted)."""
    out = Replay()
    n, t = len(answer), 0
    while t < n:
        found = lookup.propose(prompt_ids + answer[:t], gamma) if lookup is not None else ()
        a = 0
        while a < len(found) and t + a < n and found[a] == answer[t + a]:
            a += 1
        drafted = len(found)
        if hits is not None and len(found) < gamma:
            drafted = gamma
            if a == len(found):
                while a < gamma and t + a < n and hits[t + a]:
                    a += 1
        commit = min(a + 1, n - t)
        out.rounds += 1
        out.committed += commit
        out.drafted += drafted
        out.lookup += len(found)
        out.accepted += min(a, commit)
        t += commit
    return out


def model_proposer(drafter: Drafter, prompt: EncodedPrompt) -> Propose:
    """A drafter's greedy drafts from any prefix of ``prompt``'s decode (its own rollback cache)."""
    kv = drafter.start(prompt)
    rng = PositionalRNG(0)
    return lambda prefix, gamma: drafter.draft(kv, prefix, gamma, GREEDY, rng).tokens


def token_macs(model: nn.Module, head_rows: int | None = None) -> int:
    """Multiply-accumulates per token of a Qwen2-VL text stack's Linear layers (decoder layers and any
    adapter in its norm) plus its LM head (``head_rows`` × d; default the vocabulary)."""
    text = model.model.language_model
    macs = sum(m.in_features * m.out_features for m in text.layers.modules() if isinstance(m, nn.Linear))
    macs += sum(m.in_features * m.out_features for m in text.norm.modules() if isinstance(m, nn.Linear))
    rows = head_rows if head_rows is not None else model.config.text_config.vocab_size
    return macs + rows * text.config.hidden_size


@dataclass
class SourceReport:
    name: str
    macs_ratio: float  # per-token MACs / the verifier's
    per_kind: dict[str, dict[str, float]] = field(default_factory=dict)
    overall: dict[str, float] = field(default_factory=dict)


def summary(r: Replay, timing: Replay, verifier_token_s: float) -> dict[str, float]:
    """τ, α and the lookup share of ``r``; the draft time per drafted token (relative to T_q) and per
    round of ``timing``, the real drafts timed for this source (zero for lookup alone)."""
    return {"tau": round(r.tau, 3), "alpha": round(r.alpha, 3),
            "lookup_share": round(r.lookup / r.drafted, 3) if r.drafted else 0.0,
            "rounds": r.rounds, "tokens": r.committed,
            "time_ratio": round((timing.draft_s / max(timing.drafted, 1)) / verifier_token_s, 3),
            "draft_ms_per_round": round(1000 * timing.draft_s / max(timing.rounds, 1), 2)}


def markdown(reports: list[SourceReport], kinds: tuple[str, ...]) -> str:
    head = "| source | " + " | ".join(kinds) + " | all | α | lookup share | cost (MACs) | cost (time) |"
    rows = [head, "|" + "---|" * (len(kinds) + 6)]
    for rep in reports:
        taus = " | ".join(f"{rep.per_kind[k]['tau']:.2f}" for k in kinds)
        o = rep.overall
        rows.append(f"| {rep.name} | {taus} | **{o['tau']:.2f}** | {o['alpha']:.2f} | {o['lookup_share']:.2f} | "
                    f"{rep.macs_ratio:.2f} | {o['time_ratio']:.2f} |")
    return "\n".join(rows)


def _sources(args: argparse.Namespace, self_drafter: Drafter | None, v_macs: float):
    """(the models, the model-free proposers, every draft source of the table: (name, MACs ratio, the model
    (None: model-free only), the model-free proposer first (None: none)))."""
    lookup = PromptLookup(max_ngram=args.max_ngram)
    models: list[tuple[str, Drafter, float]] = []
    if args.draft_layers:
        models.append((f"self-{args.draft_layers}", self_drafter, token_macs(self_drafter.stack.model) / v_macs))
    if args.distilled:
        from edge_spec_ros.models.distilled_drafter import load_distilled

        distilled = load_distilled(args.distilled)
        models.append(("distilled", distilled, distilled.token_macs() / v_macs))
    proposers = {"lookup": lookup}
    if args.datastore:
        from edge_spec_ros.edge.retrieval import Retrieval

        proposers["retrieval→lookup"] = FirstProposal(Retrieval.load(args.datastore), lookup)
    sources: list[tuple[str, float, Drafter | None, str | None]] = [(p, 0.0, None, p) for p in proposers]
    for name, drafter, ratio in models:
        sources += [(name, ratio, drafter, None)] + [(f"{p}→{name}", ratio, drafter, p) for p in proposers]
    return models, proposers, sources


def _write(args: argparse.Namespace, reports: list[SourceReport], kinds: tuple[str, ...], checks: dict,
           verifier_token_s: float, answers: list) -> None:
    """agreement.json and agreement.md in --out, and the table on stdout."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(reports, kinds)
    meta = {"replay_check_rounds(real, teacher-forced)": checks, "verifier": args.verifier, "gamma": args.gamma, "max_new_tokens": args.max_new_tokens,
            "prompts_per_kind": args.prompts, "threads": args.threads, "verifier_ms_per_token":
            round(1000 * verifier_token_s, 2), "answer_tokens": sum(map(len, answers)),
            "load_average": Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None}
    (out / "agreement.json").write_text(json.dumps({"meta": meta, "sources": [asdict(r) for r in reports]}, indent=2))
    (out / "agreement.md").write_text(table + "\n")
    print(json.dumps(meta))
    print(table)
    best = max(reports, key=lambda r: r.overall["tau"])
    print(f"best: {best.name} τ {best.overall['tau']:.2f} (target {TARGET_TAU} at cost ≤ 0.25)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``edge-spec-ros bench drafter-agreement``."""
    parser.add_argument("--verifier", default="smollm2")
    parser.add_argument("--adapters", default=None, help="exit-adapter directory (train-exits) for the self-drafter")
    parser.add_argument("--draft-layers", type=int, default=6, help="self-drafter depth K (0: no self-drafter)")
    parser.add_argument("--distilled", default=None, help="a distilled drafter (edge-spec-ros distill-drafter --out)")
    parser.add_argument("--prompts", type=int, default=6, help="prompts per task kind")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--gamma", type=int, default=GAMMA)
    parser.add_argument("--max-ngram", type=int, default=PromptLookup().max_ngram)
    parser.add_argument("--datastore", default=None,
                        help="also the retrieval sources (edge/retrieval.py): this datastore (distill_data.json), "
                             "then prompt lookup, then each model")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="artifacts/drafter/agreement")


def command(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    from edge_spec_ros.models.pairs import load_pair

    pair = load_pair(args.verifier, parts=("verifier", "drafter") if args.draft_layers else ("verifier",),
                     adapters=args.adapters, draft_layers=args.draft_layers)
    verifier = pair.verifier
    v_macs = token_macs(verifier.stack.model)
    prompts = task_prompts(text_encoder(pair.tokenizer), per_task=args.prompts)
    kinds = tuple(k for k in TASK_KINDS if any(p.task == k for p in prompts))
    config = DecodeConfig(max_new_tokens=args.max_new_tokens, gamma=args.gamma,
                          stop_tokens=(pair.tokenizer.eos_token_id,))
    answers = reference_answers(verifier, prompts, config, args.verifier, Path(args.out) / ANSWERS_FILE)
    verifier_token_s = verifier_token_time(verifier, prompts, kinds, config)

    models, proposers, sources = _sources(args, pair.drafter if args.draft_layers else None, v_macs)
    hits = {name: [teacher_forced_hits(drafter, p.prompt, answer) for p, answer in zip(prompts, answers)]
            for name, drafter, _ in models}
    timed = [i for i, p in enumerate(prompts) if i == next(j for j, q in enumerate(prompts) if q.task == p.task)]

    reports, checks = [], {}
    for name, ratio, drafter, first_name in sources:
        model_name = name.split("→")[-1]
        first = proposers[first_name] if first_name else None
        rep = SourceReport(name, round(ratio, 3))
        total, timing = Replay(), Replay()
        for kind in kinds:
            acc = Replay()
            for i, (p, answer) in enumerate(zip(prompts, answers)):
                if p.task != kind:
                    continue
                ids = p.prompt.input_ids.tolist()
                acc.add(replay_hits(ids, answer, args.gamma, hits[model_name][i] if drafter else None, first))
                if drafter is not None and i in timed:  # real drafts: the draft time, and a check of the replay
                    chain = LookupDrafter(drafter, first) if first else drafter
                    real = replay(model_proposer(chain, p.prompt), ids, answer, args.gamma)
                    fast = replay_hits(ids, answer, args.gamma, hits[model_name][i], first)
                    checks[f"{name}/{p.task}"] = (real.rounds, fast.rounds)
                    timing.add(real)
            rep.per_kind[kind] = summary(acc, timing, verifier_token_s)
            total.add(acc)
        rep.overall = summary(total, timing, verifier_token_s)
        reports.append(rep)

    _write(args, reports, kinds, checks, verifier_token_s, answers)
    return 0
