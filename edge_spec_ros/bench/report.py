"""The benchmark report: a text table, JSON and a PNG plot, each stamped with what it was measured on.

The stamp (``stamp``) names the commit (short hash, ``-dirty`` with uncommitted changes to tracked
files), the machine (CPU model, cores, torch version, GPU) and the model pair (its source and the
parameters of each part); ``table`` prints it first, ``write`` keeps it in the JSON and under the plot.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

from edge_spec_ros.extras import require

REPO = Path(__file__).resolve().parents[2]  # the checkout this module runs from (when it is one)
GIT_TIMEOUT_S = 10.0

ROWS = (
    ("tokens", "tokens", "{:.0f}"),
    ("rounds", "rounds", "{:.0f}"),
    ("τ tokens/round", "tau", "{:.2f}"),
    ("α acceptance", "alpha", "{:.2f}"),
    ("α per token (MLE)", "alpha_mle", "{:.2f}"),
    ("r cache miss", "miss_rate", "{:.1%}"),
    ("avg hit exit", "avg_hit_exit", "{:.1f}"),
    ("branch blocks held", "branches_held", "{:.0f}"),
    ("blocks held two rounds ahead", "after_next_held", "{:.0f}"),
    ("TTFT ms", "ttft_s", "ms"),
    ("per token ms", "per_token_s", "ms"),
    ("  after the first verdict ms", "steady_per_token_s", "ms"),
    ("  ms per round after it", "steady_round_s", "ms"),
    ("  tokens per round after it", "steady_tau", "{:.2f}"),
    ("bound ms (T_q/τ(α,γ))", "bound_per_token_s", "ms"),
    ("T_p ms", "tp_s", "ms"),
    ("T_q ms", "tq_s", "ms"),
    ("T_c ms", "tc_s", "ms"),
    ("up B/round", "bytes_up_per_round", "{:.0f}"),
    ("down B/round", "bytes_down_per_round", "{:.0f}"),
    ("overhead ms (median)", "overhead_median_s", "ms"),
    ("LOSSY mean TV", "mean_tv", "{:.3f}"),
    ("wall s", "wall_s", "{:.2f}"),
)


def commit_stamp(repo: str | Path = REPO) -> str:
    """``<short hash>``, ``<short hash>-dirty`` when tracked files differ from it, ``unknown`` outside a
    git checkout (an installed package)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                              timeout=GIT_TIMEOUT_S).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}-dirty" if dirty else commit


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_stamp() -> str:
    """CPU model, cores this process may use (of the machine's), torch version, GPU."""
    import torch

    cores, usable = os.cpu_count() or 0, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    cpu = f"{cpu_model()}, {usable or cores} cores" + (f" (of {cores})" if usable and usable != cores else "")
    gpu = f"GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, torch {torch.__version__}, {gpu}"


def millions(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n < 1e8 else f"{n / 1e9:.2f}B"


def pair_stamp(source: str, parameters: dict[str, int]) -> str:
    """``embedded (verifier 1.29M, drafter 0.26M parameters)``."""
    counts = ", ".join(f"{part} {millions(n)}" for part, n in parameters.items())
    return f"{source} ({counts} parameters)" if counts else source


def stamp(pair) -> dict[str, str]:
    """What a measurement ran on: commit, machine and ``pair`` (a ``models.pairs.ModelPair``: its
    source and the parameters of each part)."""
    return {"commit": commit_stamp(), "machine": machine_stamp(),
            "pair": pair_stamp(pair.source or "unnamed pair", pair.parameters())}


def stamp_line(stamp: dict[str, str]) -> str:
    return f"measured on commit {stamp['commit']}; machine: {stamp['machine']}; pair: {stamp['pair']}"


def table(report: dict) -> str:
    modes = list(report["modes"])
    lines = [stamp_line(report["stamp"])] if report.get("stamp") else []
    lines.append(f"profile {report['profile']}: {report['description']}")
    lines += [f"  {line}" for line in report["emulated"]]
    config = report.get("config", {})
    if "gamma" in config:
        lines.append("γ: ODLD per round, AS² hands over to cloud-only decoding and probes back (--no-adaptive-gamma: "
                     f"fixed γ = {config['gamma']})" if config.get("adaptive_gamma")
                     else f"γ: fixed, {config['gamma']} every round (sweeps likewise)")
    width = max(12, *(len(m) + 2 for m in modes))
    lines.append(f"{'':<22}" + "".join(f"{m.upper():>{width}}" for m in modes))
    for label, key, fmt in ROWS:
        cells = []
        for m in modes:
            v = report["modes"][m][key]
            cells.append(f"{v * 1e3:{width}.1f}" if fmt == "ms" else f"{fmt.format(v):>{width}}")
        lines.append(f"{label:<22}" + "".join(cells))
    if report.get("decisions"):  # one decode per prompt: a decision of the navigation loop
        lines.append(f"{'decision s (mean)':<22}" + "".join(
            f"{report['modes'][m]['wall_s'] / report['decisions']:{width}.2f}" for m in modes))
    for name, value in report["speedups"].items():
        a, b = name.split("_", 2)[1:]
        lines.append(f"speedup {a.upper()} → {b.upper()}: {value:.2f}x")
    lines.append(f"exactness: {report['exact']}")
    if report.get("adaptive"):
        lines.extend(adaptive_table(report["adaptive"]))
    if report.get("ros_vs_zmq"):
        lines.extend(paths_table(report["ros_vs_zmq"]))
        lines.append(f"exactness across paths: {report['paths_exact']}")
    if report.get("picospec_model"):
        lines.append("PicoSpec throughput model (eqs. 5-9) with this run's α, T_draft, T_RTT, T_verify:")
        lines += [f"  {k} = {v:.3f}" for k, v in report["picospec_model"].items()]
    if report.get("payload"):
        lines.append("bytes per round at the Qwen2 vocabulary (151,657), γ as above, encoded by the protocol:")
        lines.append(f"  {'mode':<16}{'up':>12}{'down (accept)':>15}{'down (reject)':>15}  note")
        for row in report["payload"]:
            lines.append(f"  {row['mode']:<16}{row['up_bytes']:>12,}{row['down_bytes_all_accepted']:>15,}"
                         f"{row['down_bytes_on_rejection']:>15,}  {row['note']}")
    if report.get("tasks"):
        lines.extend(task_table(report["tasks"]))
    if report.get("grammar"):
        lines.extend(grammar_table(report["config"]["grammar"], report["grammar"]))
        lines.append(f"exactness under the grammar: {report['grammar_exact']}")
    for name, rows in report["sweeps"].items():
        lines.append(f"sweep over {name}:")
        for row in rows:
            lines.append("  " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in row.items()))
    return "\n".join(lines)


def grammar_table(grammar: str, rows: dict[str, dict]) -> list[str]:
    """Per mode, unconstrained beside under the grammar (``bench --grammar``)."""
    lines = [f"under the grammar {grammar[:40]!r} (a second pass of the same prompts) beside unconstrained:",
             f"  {'mode':<16}{'parse':>13}{'τ':>13}{'α':>13}{'decision s':>15}{'up B/round':>19}"
             f"{'down B/round':>19}"]
    for mode, r in rows.items():
        free, con = r["free"], r["grammar"]
        cells = [f"{free[k]:.0%} → {con[k]:.0%}" if k == "parse_rate" else
                 f"{free[k]:,.0f} → {con[k]:,.0f}" if k.startswith("bytes") else f"{free[k]:.2f} → {con[k]:.2f}"
                 for k in ("parse_rate", "tau", "alpha", "decision_s", "bytes_up_per_round", "bytes_down_per_round")]
        lines.append(f"  {mode:<16}" + "".join(f"{c:>{w}}" for c, w in zip(cells, (13, 13, 13, 15, 19, 19))))
    return lines


def paths_table(rows: dict[str, dict]) -> list[str]:
    """The ROS path beside the direct ZeroMQ one, per mode."""
    lines = ["ROS path (RosVerifierLink -> bridge_node process -> the same verifier) vs direct ZeroMQ, "
             "interleaved prompt by prompt; overhead = (t_ros - t_zmq) / rounds:",
             f"  {'mode':<16}{'decision ms':>12}{'decision ms':>12}{'open ms':>9}{'open ms':>9}{'rounds':>8}"
             f"{'overhead':>10}{'median of':>11}{'w/o open':>10}  outputs    traffic",
             f"  {'':<16}{'zmq':>12}{'ros':>12}{'zmq':>9}{'ros':>9}{'':>8}"
             f"{'ms/round':>10}{'prompts':>11}{'ms/round':>10}"]
    for mode, r in rows.items():
        rounds = f"{r['rounds_zmq']}" if r["rounds_zmq"] == r["rounds_ros"] else f"{r['rounds_zmq']}/{r['rounds_ros']}"
        outputs = "identical" if r["identical"] else "DIFFERENT" if r["must_match"] else "differ*"
        traffic = {True: "same", False: "DIFFERS", None: "–"}[r["same_traffic"]]
        lines.append(f"  {mode:<16}{r['decision_ms_zmq']:>12.1f}{r['decision_ms_ros']:>12.1f}{r['open_ms_zmq']:>9.1f}"
                     f"{r['open_ms_ros']:>9.1f}{rounds:>8}{r['overhead_ms_per_round']:>+10.2f}"
                     f"{r['overhead_ms_per_round_median']:>+11.2f}{r['overhead_ms_per_round_after_open']:>+10.2f}"
                     f"  {outputs:<10} {traffic}")
    if any(not r["must_match"] and not r["identical"] for r in rows.values()):
        lines.append("  * sampled, timing-dependent: exact in distribution, not token for token between runs")
    return lines


ADAPTIVE_ROWS = (
    ("α (per token)", "alpha", "{:.2f}"),
    ("b transmit/T_LLM", "b", "{:.3f}"),
    ("c draft/T_LLM", "c", "{:.3f}"),
    ("d propagation/T_LLM", "d", "{:.2f}"),
    ("a cloud token/T_LLM", "a", "{:.2f}"),
    ("T_LLM ms", "t_llm_ms", "{:.1f}"),
    ("propagation ms", "propagation_ms", "{:.1f}"),
    ("transmit ms/kB", "per_kb_ms", "{:.4f}"),
    ("γ*", "gamma", "{:.0f}"),
    ("AS² speedup est.", "speedup_estimate", "{:.2f}"),
    ("measured ms/token spec", "spec_ms", "{:.2f}"),
    ("cloud ms to 1st token", "cloud_first_ms", "{:.2f}"),
    ("cloud ms/further token", "cloud_ms", "{:.2f}"),
    ("speculating", "speculate", "{:.0f}"),
    ("probe rounds", "probes", "{:.0f}"),
    ("cloud probes", "cloud_probes", "{:.0f}"),
    ("hand-overs", "hand_overs", "{:.0f}"),
    ("cloud-only tokens", "cloud_tokens", "{:.0f}"),
)


def adaptive_table(adaptive: dict[str, dict[str, float]]) -> list[str]:
    """The adaptive γ controller's final estimates per mode (TK-SLT ODLD/AS², link split)."""
    modes = list(adaptive)
    width = max(10, *(len(m) + 2 for m in modes))
    lines = ["adaptive γ (ODLD) and cloud fallback (AS²), estimates after the run (speculating: by the measured "
             "ms/token once both are known, else by the model):",
             f"  {'':<24}" + "".join(f"{m.upper():>{width}}" for m in modes)]
    for label, key, fmt in ADAPTIVE_ROWS:
        lines.append(f"  {label:<24}" + "".join(f"{fmt.format(adaptive[m][key]):>{width}}" for m in modes))
    return lines


TASK_ROWS = (
    ("τ tokens/round", "tau", "{:.2f}"),
    ("cache miss rate", "miss_rate", "{:.1%}"),
    ("avg early exit", "avg_hit_exit", "{:.1f}"),
    ("α acceptance", "alpha", "{:.2f}"),
    ("tokens", "tokens", "{:.0f}"),
)


def task_table(tasks: dict[str, dict[str, float]]) -> list[str]:
    """Per task kind, as the FSD paper's Table 6 (metrics as rows, one column per kind)."""
    names = list(tasks)
    width = max(10, *(len(n) + 2 for n in names))
    lines = ["per task kind (cf. FSD Table 6):", f"  {'':<20}" + "".join(f"{n:>{width}}" for n in names)]
    speedup_keys = dict.fromkeys(k for row in tasks.values() for k in row if k.startswith("speedup_"))
    rows = [(f"speedup {k.split('_', 2)[1].upper()} → {k.split('_', 2)[2].upper()}", k, "{:.2f}x")
            for k in speedup_keys]
    for label, key, fmt in [*rows, *TASK_ROWS]:
        if any(key in row for row in tasks.values()):
            lines.append(f"  {label:<20}" + "".join(
                f"{fmt.format(tasks[n][key]) if key in tasks[n] else '–':>{width}}" for n in names))
    return lines


def write(report: dict, out_dir: str | Path) -> tuple[Path, Path]:
    matplotlib = require("matplotlib", "all", "the benchmark's plot (bench/report.py)")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"bench_{report['profile']}"
    json_path = out / f"{stem}.json"
    json_path.write_text(json.dumps(report, indent=2))

    panels = 1 + ("threads" in report["sweeps"]) + ("gamma" in report["sweeps"])
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4), squeeze=False)
    ax = axes[0][0]
    modes = list(report["modes"])
    ax.bar([m.upper() for m in modes], [report["modes"][m]["per_token_s"] * 1e3 for m in modes],
           color=[plt.cm.tab10(i) for i in range(len(modes))])
    ax.tick_params(axis="x", labelrotation=30 if len(modes) > 3 else 0)
    ax.set_ylabel("latency per token (ms)")
    ax.set_title(f"{report['profile']}")
    i = 1
    if "threads" in report["sweeps"]:
        rows = report["sweeps"]["threads"]
        ax = axes[0][i]
        i += 1
        ax.plot([r["threads"] for r in rows], [r["speedup_sd_fsd"] for r in rows], "o-", label="speedup SD→FSD")
        ax.set_xlabel("pre-draft threads N")
        ax.set_ylabel("speedup")
        ax2 = ax.twinx()
        ax2.plot([r["threads"] for r in rows], [r["miss_rate"] * 100 for r in rows], "s--", color="#c53",
                 label="cache miss %")
        ax2.set_ylabel("cache miss rate (%)")
        ax.set_title("effect of threads (cf. FSD Fig. 4a)")
    if "gamma" in report["sweeps"]:
        rows = report["sweeps"]["gamma"]
        ax = axes[0][i]
        g = [r["gamma"] for r in rows]
        ax.plot(g, [r.get("speedup_sd_fsd", 0) for r in rows], "o-", label="SD→FSD")
        ax.plot(g, [r.get("speedup_ar_sd", 0) for r in rows], "s-", label="AR→SD")
        ax.axhline(1.0, color="#999", lw=0.8)
        ax.set_xlabel("draft length γ")
        ax.set_ylabel("speedup")
        ax.legend()
        ax.set_title("effect of γ (cf. FSD Fig. 4b)")
    if report.get("stamp"):
        fig.text(0.01, 0.005, stamp_line(report["stamp"]), fontsize=6, color="#555", ha="left", va="bottom", wrap=True)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
    else:
        fig.tight_layout()
    png_path = out / f"{stem}.png"
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return json_path, png_path
