"""The mode registry: every decoding mode the robot speaks, in one table.

Each mode names its paper, whether it is exact, what crosses the link per round in each direction,
and which mechanisms it combines. The decoder (``edge/modes.py``), the drafter node's parameter
check, the CLI, the bench and the README's modes table all read this table; nothing else lists modes.

Mechanisms: ``early_exits`` — every exit's verdict streamed down and pre-drafting from early results
(FSD); ``pipelined`` — the next block drafted while the cloud verifies (PicoSpec); ``split`` — accept
or reject in the cloud from q_i(x_i) only, p_δ down on a rejection and the robot resamples (DSSD);
``sparse_q`` — the drafter samples from its top K and sends exactly that q (TK-SLT); ``lossy_p`` —
p_δ pruned to its top K on the downlink (LOSSY: the output no longer follows the verifier's p).

Kinds: a ``verify`` mode decodes a decision (reasoning + action) with ``edge/modes.EdgeDecoder``:
drafts verified by the cloud's target model. An ``answer`` mode (``dragon``) answers a question from
the robot's memory and the cloud's documents (``dragon/robot.RobotDragon``, DRAGON's Speculative
Aggregation): nothing is verified and nothing moves. ``MODES`` lists the verify modes (what the
decoder, the bench, the payload table and Describe run); ``ALL_MODES`` every mode (the drafter
node's ``mode`` parameter); ``get_mode`` refuses an answer mode with a clear error, so no verifier
path can run one by mistake; ``find_mode`` returns any mode.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("verify", "answer")


@dataclass(frozen=True)
class Mode:
    name: str
    paper: str
    exact: bool
    up: str  # what travels up per round
    down: str  # what travels down per round
    speculative: bool = True  # the robot drafts (False: cloud-only decoding)
    early_exits: bool = False
    pipelined: bool = False
    split: bool = False
    sparse_q: str = ""  # EdgeConfig field holding K when the drafter samples from its top K
    lossy_p: bool = False
    kind: str = "verify"  # verify: a decision verified by the cloud | answer: a question answered from documents

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"mode {self.name}: kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def answers(self) -> bool:
        """True: the mode answers a question from the robot's memory and the cloud's documents (no
        drafts verified, no motion)."""
        return self.kind == "answer"

    @property
    def mechanisms(self) -> tuple[str, ...]:
        flags = {"pre-drafting from early exits": self.early_exits, "pipelining": self.pipelined,
                 "split verification": self.split, "sparse q": bool(self.sparse_q),
                 "top-K p_δ (lossy)": self.lossy_p}
        return tuple(name for name, on in flags.items() if on)


REGISTRY: tuple[Mode, ...] = (
    Mode("ar", "baseline", True, "– (prompt once)", "each token", speculative=False),
    Mode("sd", "FSD §3 (vanilla)", True, "γ ids + γ×V q", "the final verdict"),
    Mode("fsd", "FSD Alg. 1-2", True, "as `sd`", "every exit's verdict, by confidence", early_exits=True),
    Mode("dssd", "DSSD Alg. 2", True, "γ ids + γ values q_i(x_i)",
         "the verdict; on a rejection p_δ (V values), the robot resamples", split=True),
    Mode("tkslt", "TK-SLT Sol. 1", True, "γ ids + γ×K sparse q (the drafter samples from its top K)",
         "the verdict", sparse_q="tkslt_k"),
    Mode("lowpay", "–", True, "as `tkslt` at a small K (4)",
         "the verdict: the server forms norm(max(0, p − q)) from the sparse q", sparse_q="lowpay_k"),
    Mode("pico", "PicoSpec §3", True, "as `dssd`", "as `dssd`", pipelined=True, split=True),
    Mode("pico-fsd", "– (FSD inside the pipeline)", True, "as `sd`", "as `fsd`", early_exits=True,
         pipelined=True),
    Mode("dssd-topk-lossy", "PicoSpec §3.3 downlink", False, "as `dssd`", "the top K of p_δ only",
         split=True, lossy_p=True),
    Mode("dragon", "DRAGON Alg. 1 + §5", True,
         "the question once; per token a draft x^l_t, log h̃^l_t and p^l_t (V float32, or p^l_t(x^l_t) on demand)",
         "the same from the cloud's documents, or the target x_t: an answer from memory + documents, no motion",
         kind="answer"),
)

BY_NAME = {m.name: m for m in REGISTRY}
ALL_MODES = tuple(BY_NAME)  # every mode: the drafter node's `mode` parameter
MODES = tuple(m.name for m in REGISTRY if not m.answers)  # the verify modes: what EdgeDecoder runs
ANSWER_MODES = tuple(m.name for m in REGISTRY if m.answers)


def find_mode(name: str) -> Mode:
    """Any mode called ``name`` (verify or answer); a ValueError naming the choices otherwise."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown decoding mode {name!r}; choose one of {', '.join(ALL_MODES)}") from None


def get_mode(name: str) -> Mode:
    """The verify mode called ``name`` (what ``EdgeDecoder`` decodes); a ValueError naming the choices
    otherwise, and one saying why for an answer mode."""
    mode = find_mode(name)
    if mode.answers:
        raise ValueError(f"mode {name!r} answers questions from the robot's memory and the cloud's documents "
                         f"(dragon/robot.RobotDragon); it is not a decoding mode of EdgeDecoder (one of "
                         f"{', '.join(MODES)})")
    return mode


def modes_table() -> str:
    """The README's modes table (Markdown), generated from the registry."""
    rows = ["| mode | paper | per round, up | per round, down | exact |", "|---|---|---|---|---|"]
    for m in REGISTRY:
        exact = "yes" if m.exact else "**no**: its TV error is reported"
        rows.append(f"| `{m.name}` | {m.paper} | {m.up} | {m.down} | {exact} |")
    return "\n".join(rows)


# What a fresh draft is made of (``edge/draft_sources.py``), orthogonal to the mode: every verify mode
# drafts its fresh blocks from one of these. All are exact: a source only proposes, the verdict is the
# verifier's. ``fresh_drafter`` in ``edge/draft_sources.py`` builds the one named.


@dataclass(frozen=True)
class FreshSource:
    name: str
    paper: str
    proposes: str  # what drafts a fresh block
    sampling: str  # what happens at T > 0


FRESH_SOURCES: tuple[FreshSource, ...] = (
    FreshSource("model", "FSD §3 / SD", "the drafter model, γ steps", "the model samples and sends its q"),
    FreshSource("lookup", "prompt lookup (Saxena 2023; LLMA)",
                "the tokens after the latest earlier match of the context's last n tokens (2 ≤ n ≤ 3), then the model "
                "for the rest of the block", "the model alone (a lookup token's q is a point mass)"),
    FreshSource("retrieval", "REST (He et al. 2023), then prompt lookup",
                "the likeliest continuation, in a datastore of the verifier's earlier answers, of the context's "
                "longest suffix found there (2-4 tokens; edge/retrieval.py); else prompt lookup; the model for "
                "the rest of the block", "the model alone"),
)
FRESH_SOURCE_NAMES = tuple(s.name for s in FRESH_SOURCES)


def get_fresh_source(name: str) -> FreshSource:
    """The fresh-draft source called ``name``; a ValueError naming the choices otherwise."""
    for source in FRESH_SOURCES:
        if source.name == name:
            return source
    raise ValueError(f"unknown draft source {name!r}; choose one of {', '.join(FRESH_SOURCE_NAMES)}")


def check_fresh_source(name: str, datastore: str = "") -> FreshSource:
    """The fresh-draft source called ``name``, checked against ``datastore``: ``retrieval`` needs one,
    and no other source reads one; a ValueError saying which otherwise."""
    source = get_fresh_source(name)
    if source.name == "retrieval" and not datastore:
        raise ValueError("draft source 'retrieval' needs a datastore file (distill-drafter's distill_data.json)")
    if datastore and source.name != "retrieval":
        raise ValueError(f"a datastore is read by draft source 'retrieval' only, not {source.name!r}")
    return source


def fresh_sources_table() -> str:
    """The draft sources as a Markdown table."""
    rows = ["| draft source | paper | proposes | at T > 0 |", "|---|---|---|---|"]
    rows += [f"| `{s.name}` | {s.paper} | {s.proposes} | {s.sampling} |" for s in FRESH_SOURCES]
    return "\n".join(rows)
