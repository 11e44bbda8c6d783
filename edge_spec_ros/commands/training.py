"""The training and simulation commands: ``train-exits``, ``distill-drafter``, ``sim-episodes``,
``train-sim-pair`` and ``sim-eval``; the training runs' options are their configs' fields
(``ExitTrainingConfig``, ``SimPairConfig``, ``DistillConfig`` through ``training/drafter_distill.add_arguments``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edge_spec_ros.commands.common import SOURCE_HELP, load_pair, load_verifier, log, set_threads
from edge_spec_ros.config_cli import UsageError, comma_list

SIM_EVAL_MAX_NEW_TOKENS = 64  # config/go2_nav.yaml's drafter max_new_tokens (a test keeps them equal)
THREADS_HELP = "torch CPU threads (0: torch's default)"


TRAINING = {  # command -> (help line, description)
    "train-exits": ("train early-exit adapters (resumes a run in --out)",
                    "train the exit adapters, base frozen, each exit's loss reaching only its adapter (KL to the final "
                    "exit), on the project's sentences, the verifier's answers to the text task set's training prompts "
                    "(--text tasks), or the answers of a distill-drafter data file (--text tasks --answers FILE); "
                    "resumable from --out; prints per-exit token match % and average confidence and writes "
                    "exit_report.json / .png (cf. FSD Fig. 7); serve --adapters DIR and bench --adapters DIR use them"),
    "distill-drafter": ("distil a small drafter from the verifier's greedy answers to the text task set "
                        "(resumable; docs/smollm2_drafter.md)",
                        "distil a small drafter (the verifier's first layers fine-tuned, a pruned LM head) from the "
                        "verifier's greedy answers to the text task set (never its bench split), each position with "
                        "the verifier's own top-k as its target; resumable and seeded; writes distill_report.json; "
                        "bench --distilled DIR drafts with it (docs/smollm2_drafter.md)"),
    "sim-episodes": ("expert episodes in the simulated room, as rosbags",
                     "expert episodes in the simulated room, one rosbag each"),
    "train-sim-pair": ("train the simulated room's Qwen2-VL pair (resumable)",
                       "train the simulated room's verifier, the drafter distilled from it and the exit adapters "
                       "(resumable; make sim-pair is the command that made the shipped pair); --init-from fine-tunes "
                       "a pair (--average-with: starting from the mean of its verifier and these pairs'); the fraction "
                       "options (0 by default: the base stage's data) add far targets, the camera node's synthetic "
                       "frame and close-range states to the mix (docs/closed_loop.md)"),
    "sim-eval": ("closed loop: the model drives the simulated robot",
                 "the closed loop without ROS: success rate over seeded rooms, trajectory pictures (make sim-eval); "
                 "decodes with the robot's token budget (config/go2_nav.yaml)"),
}


def add_training(sub) -> None:
    for name, populate, func in (("train-exits", train_exits_options, cmd_train_exits),
                                 ("distill-drafter", distill_options, cmd_distill_drafter),
                                 ("sim-episodes", episodes_options, cmd_sim_episodes),
                                 ("train-sim-pair", sim_pair_options, cmd_train_sim_pair),
                                 ("sim-eval", sim_eval_options, cmd_sim_eval)):
        text, description = TRAINING[name]
        sub.add_parser(name, help=text, description=description, populate=populate).set_defaults(func=func)


def train_exits_options(train: argparse.ArgumentParser) -> None:
    from edge_spec_ros.config_cli import add_config
    from edge_spec_ros.training.exits import ExitTrainingConfig

    train.add_argument("--out", required=True, help="directory for adapters, checkpoints and the report")
    train.add_argument("--verifier", default="embedded", help=f"model source: {SOURCE_HELP}")
    train.add_argument("--dtype", default="float32")
    train.add_argument("--device", default="cpu")
    add_config(train, ExitTrainingConfig, defaults={"steps": 1000})
    train.add_argument("--bottleneck", type=int, default=0, help="adapter width (0: hidden size / 8)")
    train.add_argument("--exit-layers", type=comma_list(int), default=(),
                       help="e.g. 3,6,9 (default: every layer < L)")
    train.add_argument("--text", default="corpus", choices=["corpus", "tasks"],
                       help="corpus: the project's sentences; tasks: the verifier's own answers to the text "
                            "task set's training prompts (generated once into --out)")
    train.add_argument("--answers", default=None,
                       help="with --text tasks: train on the verifier's answers in this distill_data.json "
                            "(distill-drafter --out) instead of generating answers to the training prompts")
    train.add_argument("--gen-tokens", type=int, default=96, help="with --text tasks: answer length")
    train.add_argument("--threads", type=int, default=0, help=THREADS_HELP)
    train.set_defaults(adapters=None)


def distill_options(distill: argparse.ArgumentParser) -> None:
    from edge_spec_ros.training.drafter_distill import add_arguments

    add_arguments(distill)


def episodes_options(episodes: argparse.ArgumentParser) -> None:
    episodes.add_argument("--out", required=True, help="directory for the bags")
    episodes.add_argument("--episodes", type=int, default=10)
    episodes.add_argument("--target", default="silver bottle", help="'<colour> <kind>'")
    episodes.add_argument("--distractors", type=int, default=2)
    episodes.add_argument("--seed", type=int, default=0)


def sim_pair_options(pair: argparse.ArgumentParser) -> None:
    from edge_spec_ros.config_cli import add_config
    from edge_spec_ros.training.sim_pair import SimPairConfig

    pair.add_argument("--out", default="edge_spec_ros/assets/sim_pair", help="output directory")
    add_config(pair, SimPairConfig)
    pair.add_argument("--threads", type=int, default=0, help=THREADS_HELP)


def sim_eval_options(sim_eval: argparse.ArgumentParser) -> None:
    sim_eval.add_argument("--models", default="embedded",
                          help="model source of the verifier that drives: 'embedded' or a train-sim-pair directory "
                               "(any source of docs/models.md loads)")
    sim_eval.add_argument("--episodes", type=int, default=50)
    sim_eval.add_argument("--seed", type=int, default=0, help="first episode seed (room layout and target)")
    sim_eval.add_argument("--target", default="", help="'<colour> <kind>' in every room (default: drawn per room)")
    sim_eval.add_argument("--distractors", type=int, default=0, help="look-alikes per room (0: drawn, 1-3)")
    sim_eval.add_argument("--max-decisions", type=int, default=20, help="the drafter node's max_decisions")
    sim_eval.add_argument("--max-new-tokens", type=int, default=SIM_EVAL_MAX_NEW_TOKENS,
                          help="token budget of a decision (default: config/go2_nav.yaml's drafter max_new_tokens, "
                               f"{SIM_EVAL_MAX_NEW_TOKENS}, as the ROS loop decodes)")
    sim_eval.add_argument("--max-pixels", type=int, default=0, help="image pixel budget (0: the pair's own)")
    sim_eval.add_argument("--jpeg-quality", type=int, default=90, help="the drafter's JPEG quality (0: raw frames)")
    sim_eval.add_argument("--pictures", type=int, default=3, help="trajectory pictures of the first N episodes")
    sim_eval.add_argument("--out", default="artifacts/sim_eval")


def _tqdm():
    """tqdm's progress bar, a development tool (the ``all`` extra), not the robot's."""
    from edge_spec_ros.extras import require
    return require("tqdm", "all", "the training commands' progress bars").tqdm


def cmd_train_exits(args: argparse.Namespace) -> int:
    tqdm = _tqdm()

    from edge_spec_ros.models.adapters import ExitAdapters
    from edge_spec_ros.models.corpus import corpus
    from edge_spec_ros.config_cli import config_from
    from edge_spec_ros.training.exits import (ExitTrainingConfig, evaluate, token_batches, train_exits,
                                              write_report)

    if args.answers and args.text != "tasks":
        raise SystemExit("--answers needs --text tasks")
    set_threads(args.threads)
    pair = load_verifier(args)
    verifier, tokenizer = pair.verifier, pair.tokenizer
    model = verifier.stack.model
    hidden, L = model.config.text_config.hidden_size, verifier.num_layers
    layers = list(args.exit_layers) or list(range(1, L))
    if any(not 1 <= layer < L for layer in layers):
        raise SystemExit(f"--exit-layers must lie in 1..{L - 1}")
    adapters = ExitAdapters(hidden, layers, args.bottleneck or None)
    config = config_from(ExitTrainingConfig, args)
    if args.text == "tasks":
        batch, held_out = task_text_batches(verifier, tokenizer, config, args)
    else:
        batch = token_batches(tokenizer, corpus(), config)
        held_out = [batch(10**9 + i) for i in range(4)]  # steps never reached in training
    with tqdm(total=config.steps, desc="exit adapters", unit="step") as bar:
        def progress(step: int, loss: float) -> None:
            bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            bar.update(step - bar.n)
        train_exits(model, adapters, batch, config, args.out, progress)
    report = evaluate(model, adapters, held_out)
    print(f"{'exit':>6}{'token match %':>16}{'avg confidence':>16}")
    for layer, match, conf in zip(report.layers, report.match_pct, report.confidence, strict=True):
        print(f"{layer:>6}{match:>16.1f}{conf:>16.3f}")
    print(f"{'final':>6}{100.0:>16.1f}{report.final_confidence:>16.3f}")
    json_path, png_path = write_report(report, args.out)
    print(f"adapters in {args.out}; wrote {json_path} and {png_path}")
    return 0


def task_text_batches(verifier, tokenizer, config, args: argparse.Namespace):
    """Training batches from the verifier's greedy answers to the text task set's training split
    (generated once, kept in --out), held-out batches from its answers to the bench split."""
    tqdm = _tqdm()

    from edge_spec_ros.bench.tasks import task_prompts, text_encoder
    from edge_spec_ros.training.self_distill import (
        answers_stream,
        cached_stream,
        save_stream,
        self_generated_stream,
        stream_batches,
    )

    encoder = text_encoder(tokenizer)
    stops = (tokenizer.eos_token_id,)

    def generate(split: str, max_new_tokens: int) -> list[int]:
        prompts = [t.prompt for t in task_prompts(encoder, split=split)]
        with tqdm(total=len(prompts), desc=f"answers ({split} prompts)", unit="prompt") as bar:
            return self_generated_stream(verifier, prompts, max_new_tokens, stops, lambda n: bar.update(n - bar.n))

    if args.answers:
        try:
            stream = answers_stream(args.answers)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"--answers {args.answers}: {exc}") from None
        save_stream(stream, args.out)
    else:
        stream = cached_stream(args.out, lambda: generate("train", args.gen_tokens))
    batch = stream_batches(stream, config.batch_size, config.seq_len, config.seed)
    held = stream_batches(generate("bench", args.gen_tokens // 2), config.batch_size, config.seq_len, config.seed)
    log(f"{len(stream)} training tokens (prompts + the verifier's answers)")
    return batch, [held(i) for i in range(4)]


def cmd_distill_drafter(args: argparse.Namespace) -> int:
    from edge_spec_ros.bench.tasks import BENCH, task_prompts, text_encoder
    from edge_spec_ros.training.drafter_distill import run

    def prompts_of(tokenizer, split: str) -> list[list[int]]:
        return [t.prompt.input_ids.tolist() for t in task_prompts(text_encoder(tokenizer), split=split)]

    try:
        run(args, prompts_of, text_encoder, tuple(t for texts in BENCH.values() for t in texts))
    except ValueError as exc:
        log(f"error: {exc}")
        return 2
    return 0


def cmd_sim_episodes(args: argparse.Namespace) -> int:
    from edge_spec_ros.sim.expert import run_episode, write_episode_bag
    from edge_spec_ros.sim.world import World

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reached = 0
    for i in range(args.episodes):
        seed = args.seed + i
        world = World.random(seed, args.target, args.distractors)
        episode = run_episode(world, args.target)
        reached += episode.reached
        write_episode_bag(episode, out / f"episode_{seed:04d}")
        log(f"episode {seed}: {len(episode.steps)} decisions, {'reached' if episode.reached else 'not reached'}")
    print(f"{reached}/{args.episodes} episodes reached the {args.target}; bags in {out}")
    return 0


def cmd_train_sim_pair(args: argparse.Namespace) -> int:
    tqdm = _tqdm()

    from edge_spec_ros.config_cli import config_from
    from edge_spec_ros.training.sim_pair import SimPairConfig, train_sim_pair

    set_threads(args.threads)
    try:
        config = config_from(SimPairConfig, args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    bars: dict = {}

    def progress(phase: str, step: int, total: int, loss: float) -> None:
        bar = bars.get(phase) or bars.setdefault(phase, tqdm(total=total, desc=phase, initial=step - 1,
                                                              unit="room" if phase.endswith("rollouts") else "step"))
        if loss == loss:  # rollouts report no loss
            bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        bar.update(step - bar.n)

    report = train_sim_pair(args.out, config, progress)
    for bar in bars.values():
        bar.close()
    for name in ("verifier", "drafter"):
        r = report[name]
        print(f"{name}: {r['parameters']:,} parameters, held-out text match {r['text_match_pct']:.1f}%, "
              f"action match {r['action_match_pct']:.1f}%")
    print("closed-loop validation success per stage: " + ", ".join(
        f"{stage} {pct:.0f}%" for stage, pct in report.get("validation_success_pct", {}).items()))
    e = report["exits"]
    print("exit token match % with the final exit: " + ", ".join(
        f"{layer}: {m:.0f}" for layer, m in zip(e["layers"], e["match_pct"], strict=True)))
    print(f"wrote {args.out}/verifier, drafter, exits and training_report.json")
    return 0


def cmd_sim_eval(args: argparse.Namespace) -> int:
    from edge_spec_ros.models.prompt import PromptConfig, PromptEncoder
    from edge_spec_ros.sim.closed_loop import ModelPolicy, Task, evaluate, plot_trajectory

    pair = load_pair(args.models, parts=("verifier",))
    encoder = PromptEncoder(pair.tokenizer, PromptConfig(max_pixels=args.max_pixels or pair.max_pixels))
    policy = ModelPolicy(pair.verifier, encoder, jpeg_quality=args.jpeg_quality, max_new_tokens=args.max_new_tokens)
    task = Task(args.target, args.distractors)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def on_episode(summary, episode, world) -> None:
        log(f"episode {summary.seed}: find the {summary.target} among {summary.distractors} distractors: "
             f"{'reached' if summary.reached else 'NOT reached'} after {summary.decisions} decisions")
        if summary.seed - args.seed < args.pictures:
            plot_trajectory(world, episode, out / f"trajectory_{summary.seed:04d}.png")
            (out / f"trajectory_{summary.seed:04d}.txt").write_text("\n".join(t for _, t in episode.steps) + "\n")

    seeds = list(range(args.seed, args.seed + args.episodes))
    report = evaluate(policy, seeds, args.max_decisions, task, on_episode)
    seconds = sorted(policy.seconds)
    groups = {"distractors": report.by(lambda e: e.distractors),
              "colour": report.by(lambda e: e.target.split()[0]), "kind": report.by(lambda e: e.target.split()[1]),
              "target": report.by(lambda e: e.target)}
    result = {"episodes": len(seeds), "task": task.__dict__, "first_seed": args.seed,
              "max_pixels": encoder.config.max_pixels, "jpeg_quality": args.jpeg_quality,
              "max_decisions": args.max_decisions, "max_new_tokens": args.max_new_tokens,
              "success_rate": report.success_rate,
              **{f"by_{name}": {str(k): list(v) for k, v in g.items()} for name, g in groups.items()},
              "decisions": len(seconds), "median_decision_s_local_greedy": seconds[len(seconds) // 2],
              "per_episode": [s.__dict__ for s in report.episodes]}
    (out / "closed_loop.json").write_text(json.dumps(result, indent=2) + "\n")
    for name in ("distractors", "colour", "kind"):
        print(f"by {name}: " + ", ".join(f"{k} {r}/{n}" for k, (r, n) in groups[name].items()))
    print(f"success: {sum(s.reached for s in report.episodes)}/{len(seeds)} episodes "
          f"({100 * report.success_rate:.0f}%); {len(seconds)} decisions; results and pictures in {out}")
    return 0
