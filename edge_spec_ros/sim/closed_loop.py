"""Closed-loop evaluation: a model drives the simulated robot to the named object among distractors.

The evaluation is the ROS loop's, without ROS: the same rooms (``episode_world``, which ``sim_node``
builds from the same parameters), the same image path (the frame is JPEG-encoded at the drafter's
quality and decoded, then resized to the same pixel budget), the same grammar and planner executed
in the same simulated time (``run_episode``), the same decision budget, and an end-state success
criterion: where the robot is when the episode ends (``World.reached``: within the success distance
of the target and facing it), not whether it passed it on the way. The model decides from the frame
and the instruction alone (never the world state). Greedy decoding is used, and every exact decoding mode (SD, FSD, DSSD, TK-SLT, …) emits the verifier's greedy tokens, so
one greedy run gives the success rate of all of them; what differs between modes is the decision
latency, measured by ``edge-spec-ros bench`` (its prompts are decisions of this loop).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive
from edge_spec_ros.extras import require
from edge_spec_ros.models.prompt import PromptEncoder, decode_image, encode_image
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.sim.expert import Episode, run_episode
from edge_spec_ros.sim.samples import JPEG_QUALITY
from edge_spec_ros.sim.tasks import Task, episode_world
from edge_spec_ros.sim.world import World

MAX_DECISIONS = 20  # the drafter node's max_decisions


@dataclass
class ModelPolicy:
    """Greedy decoding of the verifier on (camera frame, "find the <target>"); the frame goes through
    the robot's JPEG round trip first (``jpeg_quality`` 0: raw), the encoder's pixel budget resizes it."""

    verifier: EarlyExitVerifier
    encoder: PromptEncoder
    max_new_tokens: int = 48
    instruction: str = "find the {target}"
    jpeg_quality: int = JPEG_QUALITY
    seconds: list[float] = field(default_factory=list)  # wall time per decision

    def __call__(self, world: World, target: str) -> str:
        image = world.render()
        if self.jpeg_quality:
            image = decode_image(encode_image(image, quality=self.jpeg_quality))
        return self.reply(image, self.instruction.format(target=target))

    def reply(self, image: np.ndarray, instruction: str) -> str:
        """The verifier's greedy "Reasoning: … Action: …" for one frame and instruction."""
        t0 = time.perf_counter()
        config = DecodeConfig(max_new_tokens=self.max_new_tokens, stop_tokens=(self.encoder.tokenizer.eos_token_id,))
        tokens = autoregressive(self.verifier, self.encoder.encode(instruction, image), config).tokens
        self.seconds.append(time.perf_counter() - t0)
        return self.encoder.decode(tokens)


@dataclass(frozen=True)
class EpisodeSummary:
    seed: int
    target: str
    distractors: int
    reached: bool
    decisions: int


@dataclass
class ClosedLoopReport:
    episodes: list[EpisodeSummary]

    @property
    def success_rate(self) -> float:
        return sum(e.reached for e in self.episodes) / len(self.episodes)

    def by(self, key) -> dict:
        """{key(summary): (reached, episodes)}, sorted by key."""
        out: dict = {}
        for e in self.episodes:
            reached, total = out.get(key(e), (0, 0))
            out[key(e)] = (reached + e.reached, total + 1)
        return dict(sorted(out.items()))


def evaluate(policy, seeds: list[int], max_decisions: int = MAX_DECISIONS, task: Task = Task(),
             on_episode=lambda summary, episode, world: None) -> ClosedLoopReport:
    """Run one episode per seed with ``policy``; ``on_episode`` sees each (summary, episode, world)."""
    summaries = []
    for seed in seeds:
        world, target = episode_world(seed, task)
        start = World(world.objects, world.pose, world.config)
        episode = run_episode(world, target, max_decisions=max_decisions, keep_images=False, policy=policy)
        summary = EpisodeSummary(seed, target, len(world.objects) - 1, episode.reached, len(episode.steps))
        summaries.append(summary)
        on_episode(summary, episode, start)
    return ClosedLoopReport(summaries)


def plot_trajectory(world: World, episode: Episode, path: str | Path, title: str = "") -> Path:
    """Top-down picture of the room: objects (target ringed), the robot's path, its decisions."""
    matplotlib = require("matplotlib", "all", "the trajectory pictures (sim/closed_loop.py)")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from edge_spec_ros.sim.world import COLOURS_RGB

    c = world.config
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.add_patch(plt.Rectangle((0, 0), c.width_m, c.depth_m, fill=False, lw=2, color="k"))
    for o in world.objects:
        colour = [v / 255 for v in COLOURS_RGB[o.colour]]
        ax.add_patch(plt.Circle((o.x, o.y), max(0.12, o.size[0] / 2), color=colour, ec="k"))
        ax.annotate(o.name, (o.x, o.y), textcoords="offset points", xytext=(8, 8), fontsize=8)
        if o.name == episode.target:
            ax.add_patch(plt.Circle((o.x, o.y), c.reach_m + o.size[0] / 2, fill=False, ls="--", color="g"))
    xs, ys = [p.x for p in episode.poses], [p.y for p in episode.poses]
    ax.plot(xs, ys, "-", color="#333", lw=1.5)
    for p in episode.poses[:-1]:
        ax.arrow(p.x, p.y, 0.25 * math.cos(p.theta), 0.25 * math.sin(p.theta),
                 head_width=0.08, color="#c33", length_includes_head=True)
    ax.plot(xs[0], ys[0], "o", color="#33c", label="start")
    ax.set_xlim(-0.2, c.width_m + 0.2)
    ax.set_ylim(-0.2, c.depth_m + 0.2)
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    outcome = "reached" if episode.reached else "not reached"
    ax.set_title(title or f"find the {episode.target}: {len(episode.steps)} decisions, {outcome}", fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
