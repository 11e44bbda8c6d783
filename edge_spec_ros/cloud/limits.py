"""What the verifier accepts: server limits and the checks every request passes before any work.

Everything here is cheap and runs on the I/O thread, before a job is queued: sizes, ranges and the
image's header (its pixel count, read without decoding a pixel). A request that fails a check is
answered with an ``Error`` carrying a code (``ErrorCode``) and a reason naming the field; nothing a
client sends can raise anything else. Decoding the image and prefill run later, on a worker.

Legend: γ — draft length; V — the verifier's vocabulary size; K — kept entries of a sparse q.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from edge_spec_ros.config_cli import doc
from edge_spec_ros.models.grammar import MAX_GRAMMAR_BYTES, GrammarError, source
from edge_spec_ros.spec.queues import POLICIES
from edge_spec_ros.wire.codec import HEADER, MAX_META_BYTES, DecodeLimits
from edge_spec_ros.wire.messages import DraftBlock, ErrorCode, Generate, Open

MAX_GAMMA = 64  # draft tokens per block (the protocol's cap)
MAX_STOP_TOKENS = 64
MAX_SEED = 2**64  # seeds are unsigned 64-bit (ROS DecisionRequest.seed is uint64)
MAX_TEMPERATURE = 1e4
MAX_ROUND = 2**31 - 1
MAX_EMULATED_DELAY_S = 10.0  # an emulated downlink's delay and jitter, each
MAX_PRIORITY = 3  # Open.priority: 0 (default: a robot standing still), 1 (in motion), 2-3 (more urgent)
MIN_EMULATED_BANDWIDTH_BPS = 8_000.0  # below this a reply would sit in the server for minutes
IMAGE_FORMATS = ("JPEG", "PNG")

# Defaults of the serve options (docs/verifier_security.md explains each).
DEFAULT_MAX_PROMPT_TOKENS = 4096
DEFAULT_MAX_NEW_TOKENS = 1024
DEFAULT_MAX_IMAGE_PIXELS = 2048 * 1024  # 2.1 MP: a 1920 x 1080 frame fits, decoded it is 6 MB of RGB
DEFAULT_MAX_IMAGE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_SESSIONS_PER_CLIENT = 8
DEFAULT_MAX_GAMMA = MAX_GAMMA  # a PicoSpec chained block is γ + 1 tokens; lower it for a large V


class RequestError(ValueError):
    """A request that decodes but cannot be served; ``code`` is the ErrorCode of the reply."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.BAD_REQUEST) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Limits:
    """Server limits (serve options). max_prompt_tokens: ids in an Open; max_new_tokens: one Generate;
    max_image_pixels: width x height from the image header; max_image_bytes: the image file;
    max_gamma: draft tokens per block (at most the protocol's MAX_GAMMA)."""

    max_prompt_tokens: int = field(default=DEFAULT_MAX_PROMPT_TOKENS, metadata=doc(
        "longest prompt, image tokens included", 1, 2**31 - 1))
    max_new_tokens: int = field(default=DEFAULT_MAX_NEW_TOKENS, metadata=doc(
        "most tokens one cloud-only Generate may ask for", 1, 2**31 - 1))
    max_image_pixels: int = field(default=DEFAULT_MAX_IMAGE_PIXELS, metadata=doc(
        "largest image, width x height read from its header before decoding", 1, 2**31 - 1))
    max_image_bytes: int = field(default=DEFAULT_MAX_IMAGE_BYTES, metadata=doc("largest image file", 1, 2**31 - 1))
    max_gamma: int = field(default=DEFAULT_MAX_GAMMA, metadata=doc("most draft tokens in one block", 1, MAX_GAMMA))

    def __post_init__(self) -> None:
        for name in ("max_prompt_tokens", "max_new_tokens", "max_image_pixels", "max_image_bytes", "max_gamma"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_gamma > MAX_GAMMA:
            raise ValueError(f"max_gamma must be <= {MAX_GAMMA}")

    def decode_limits(self, vocab: int) -> DecodeLimits:
        """Per-field byte caps for the codec, checked before any decompression. DRAGON's ``probs``
        (dragon/wire.py: one side's p^s_t, (V,) float32, or its (1,) value at a token) is at most one
        distribution over the session's vocabulary."""
        block = self.max_gamma * vocab * 4  # a dense (γ, V) float32 q
        fields = {"input_ids": self.max_prompt_tokens * 4, "image": self.max_image_bytes,
                  "tokens": self.max_gamma * 4, "q": block, "q_ids": block, "q_values": block,
                  "q_draft": self.max_gamma * 4, "probs": vocab * 4}
        total = fields["input_ids"] + fields["image"] + max(block * 2, fields["tokens"])
        return DecodeLimits(field_bytes=fields, max_total_bytes=total)

    def max_message_bytes(self, vocab: int) -> int:
        """ZeroMQ's maximum size of one received frame (larger: the peer is disconnected)."""
        return max(max(self.decode_limits(vocab).field_bytes.values()), HEADER.size + MAX_META_BYTES)


def _int_in(owner: str, name: str, value: int, lo: int, hi: int) -> None:
    """lo <= value < hi, else BAD_REQUEST."""
    if not lo <= value < hi:
        raise RequestError(f"{owner}.{name} must be in [{lo}, {hi}), got {value}")


def _ids_in_vocab(owner: str, name: str, ids: np.ndarray, vocab: int) -> None:
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise RequestError(f"{owner}.{name}: ids must be in [0, {vocab}), the verifier's vocabulary")


def image_size(data: bytes, limits: Limits) -> tuple[int, int]:
    """(width, height) from the file's header, without decoding pixels; RequestError when the file is
    not a JPEG/PNG or is larger than the limits."""
    if len(data) > limits.max_image_bytes:
        raise RequestError(f"Open.image: {len(data)} bytes exceeds the limit of {limits.max_image_bytes}",
                           ErrorCode.TOO_LARGE)
    try:
        with Image.open(io.BytesIO(data), formats=IMAGE_FORMATS) as img:  # lazy: the header only
            width, height = img.size
    except Image.DecompressionBombError as exc:  # PIL's own bound, far above ours
        raise RequestError(f"Open.image: pixels exceeds the limit of {limits.max_image_pixels}: {str(exc)[:200]}",
                           ErrorCode.TOO_LARGE) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise RequestError(f"Open.image: not a JPEG/PNG image ({len(data)} bytes): {str(exc)[:200]}") from None
    if width < 1 or height < 1:
        raise RequestError(f"Open.image: empty image {width}x{height}")
    if width * height > limits.max_image_pixels:
        raise RequestError(f"Open.image: {width}x{height} = {width * height} pixels exceeds the limit of "
                           f"{limits.max_image_pixels}", ErrorCode.TOO_LARGE)
    return width, height


def check_open(msg: Open, limits: Limits, vocab: int) -> None:
    """Every field of an Open, before any work."""
    ids = msg.input_ids
    if ids.ndim != 1 or ids.size < 2:
        raise RequestError(f"Open.input_ids must be 1-D with at least 2 ids, got shape {ids.shape}")
    if ids.size > limits.max_prompt_tokens:
        raise RequestError(f"Open.input_ids: {ids.size} ids exceeds the limit of {limits.max_prompt_tokens}",
                           ErrorCode.TOO_LARGE)
    _ids_in_vocab("Open", "input_ids", ids, vocab)
    if msg.image:
        image_size(msg.image, limits)
    if not (math.isfinite(msg.temperature) and 0 <= msg.temperature <= MAX_TEMPERATURE):
        raise RequestError(f"Open.temperature must be finite and in [0, {MAX_TEMPERATURE:g}], got {msg.temperature}")
    _int_in("Open", "seed", msg.seed, 0, MAX_SEED)
    if msg.queue_policy not in POLICIES:
        raise RequestError(f"Open.queue_policy must be one of {POLICIES}, got {msg.queue_policy[:40]!r}")
    if msg.compute_tq_s:
        raise RequestError("Open.compute_tq_s: compute emulation is server configuration "
                           "(edge-spec-ros serve --emulate-tq-s), not a request field")
    _int_in("Open", "p_top_k", msg.p_top_k, 0, vocab + 1)
    _int_in("Open", "priority", msg.priority, 0, MAX_PRIORITY + 1)
    for name in ("down_delay_s", "down_jitter_s"):
        value = getattr(msg, name)
        if not (math.isfinite(value) and 0 <= value <= MAX_EMULATED_DELAY_S):
            raise RequestError(f"Open.{name} must be in [0, {MAX_EMULATED_DELAY_S}] s, got {value}")
    bandwidth = msg.down_bandwidth_bps
    if not (math.isfinite(bandwidth) and (bandwidth == 0 or bandwidth >= MIN_EMULATED_BANDWIDTH_BPS)):
        raise RequestError(f"Open.down_bandwidth_bps must be 0 (unlimited) or >= {MIN_EMULATED_BANDWIDTH_BPS:g}, "
                           f"got {bandwidth}")
    if not (math.isfinite(msg.down_loss) and 0 <= msg.down_loss < 1):
        raise RequestError(f"Open.down_loss must be in [0, 1), got {msg.down_loss}")
    if msg.grammar:
        check_grammar(msg.grammar)


def check_grammar(grammar: str) -> None:
    """Open.grammar before any work: a grammar id the verifier knows, or a grammar's text within
    ``MAX_GRAMMAR_BYTES`` (TOO_LARGE otherwise); whether the text compiles is the session's to find out
    (GRAMMAR), once per text (``models.grammar.GrammarBook``)."""
    size = len(grammar.encode("utf-8", "surrogatepass"))
    if size > MAX_GRAMMAR_BYTES:
        raise RequestError(f"Open.grammar: {size} bytes of grammar text exceed the limit of {MAX_GRAMMAR_BYTES}",
                           ErrorCode.TOO_LARGE)
    try:
        source(grammar)
    except GrammarError as exc:
        raise RequestError(f"Open.grammar: {exc}", ErrorCode.GRAMMAR) from None


def check_draft(draft: DraftBlock, opened: Open, limits: Limits, vocab: int) -> None:
    """Every field of a draft block, given the Open of its session."""
    _int_in("DraftBlock", "round", draft.round, 0, MAX_ROUND + 1)
    _int_in("DraftBlock", "position", draft.position, 0, limits.max_prompt_tokens + 64 * limits.max_new_tokens)
    tokens = draft.tokens
    if tokens.ndim != 1 or not 1 <= tokens.size <= limits.max_gamma:
        raise RequestError(f"DraftBlock.tokens: a draft has 1..{limits.max_gamma} tokens, got shape {tokens.shape}")
    _ids_in_vocab("DraftBlock", "tokens", tokens, vocab)
    _int_in("DraftBlock", "resampled", draft.resampled, -1, vocab)
    gamma = tokens.size
    forms = [draft.q is not None, draft.q_ids is not None or draft.q_values is not None, draft.q_draft is not None]
    if sum(forms) > 1:
        raise RequestError("DraftBlock: at most one of q, (q_ids, q_values) or q_draft")
    if opened.temperature == 0:
        return  # greedy verification reads no q
    if sum(forms) != 1:
        raise RequestError("DraftBlock: sampled verification needs exactly one of q, (q_ids, q_values) or q_draft")
    if draft.q is not None:
        if draft.q.ndim != 2 or draft.q.shape[0] != gamma or draft.q.shape[1] < 1 or draft.q.dtype != np.float32:
            raise RequestError(f"DraftBlock.q: sampled verification needs q of shape ({gamma}, V_q) float32, "
                               f"V_q <= {vocab}, got {draft.q.shape} {draft.q.dtype}")
        if draft.q.shape[1] > vocab:  # V_q < V_p is fine: spec.vocab pads q with zeros
            raise RequestError(f"DraftBlock.q: the drafter's vocabulary ({draft.q.shape[1]} ids) is larger than "
                               f"the verifier's ({vocab})")
        values = draft.q
    elif draft.q_draft is not None:
        if draft.q_draft.shape != (gamma,):
            raise RequestError(f"DraftBlock.q_draft must have shape ({gamma},), got {draft.q_draft.shape}")
        if opened.want_exits:
            raise RequestError("DraftBlock.q_draft: split verification runs on the final exit only: "
                               "open with want_exits=False")
        values = draft.q_draft
    else:
        q_ids, q_values = draft.q_ids, draft.q_values
        if q_ids is None or q_values is None or q_ids.shape != q_values.shape or q_ids.ndim != 2 \
                or q_ids.shape[0] != gamma or not 1 <= q_ids.shape[1] <= vocab:
            raise RequestError(f"DraftBlock.q_ids/q_values: sparse q needs both, of the same shape ({gamma}, K), "
                               f"1 <= K <= {vocab}")
        if q_values.dtype not in (np.float32, np.float16):
            raise RequestError(f"DraftBlock.q_values must be float32 or float16, got {q_values.dtype}")
        _ids_in_vocab("DraftBlock", "q_ids", q_ids, vocab)
        values = q_values
    if values.dtype.kind != "f":
        raise RequestError(f"DraftBlock: q values must be floating point, got {values.dtype}")
    if not np.isfinite(values).all() or (values < 0).any():
        raise RequestError("DraftBlock: q must be finite and non-negative")


def check_generate(msg: Generate, limits: Limits, vocab: int) -> None:
    if msg.max_new_tokens > limits.max_new_tokens:
        raise RequestError(f"Generate.max_new_tokens: {msg.max_new_tokens} exceeds the limit of "
                           f"{limits.max_new_tokens}", ErrorCode.TOO_LARGE)
    _int_in("Generate", "max_new_tokens", msg.max_new_tokens, 1, limits.max_new_tokens + 1)
    if len(msg.stop_tokens) > MAX_STOP_TOKENS:
        raise RequestError(f"Generate.stop_tokens: at most {MAX_STOP_TOKENS}, got {len(msg.stop_tokens)}")
    for token in msg.stop_tokens:
        _int_in("Generate", "stop_tokens", token, 0, vocab)
    _int_in("Generate", "resampled", msg.resampled, -1, vocab)
