"""Every DRAGON refusal is an Error reply with a code and a reason naming the field, for every field of
every DRAGON message a verifier receives, from a real ``serve --documents`` process (the shipped
pair). The table must cover every field of DragonOpen, DragonDraft, DragonTarget, DragonDistRequest
and DragonDist (a new field without a refusal case fails ``test_the_table_covers_every_field``).

A case is sent in the state where the field matters: the test plays the robot's side by hand
(dragon/wire.py's flow) — with the cloud aggregating (it receives drafts and, payload ``on_demand``,
asks for distributions), or the robot aggregating (the cloud sends its drafts and receives targets
and distribution requests). One fresh decision per case, closed afterwards.

What is dropped rather than refused, because an honest side sends it (``dragon/peer.py``): a
draft of an earlier epoch (decoded before its side learned of a rejection), or one that reaches a
side no longer aggregating (sent before a switch). ``test_a_stale_draft_is_dropped_and_the_next_is_aggregated``
shows one. The other side's acceptance flag in a DragonTarget concerns the aggregator's own draft,
which the receiver never saw: only its type is checked.
"""

from __future__ import annotations

import dataclasses
import json
import math
import uuid
from collections.abc import Callable

import numpy as np
import pytest

from edge_spec_ros.dragon.wire import (
    MAX_EMULATED_DELAY_S, MAX_QUEUE, DragonDist, DragonDistRequest, DragonDraft, DragonOpen, DragonOpened,
    DragonTarget,
)
from edge_spec_ros.models.pairs import load_pair
from edge_spec_ros.models.tokenizer import tokenizer_fingerprint
from edge_spec_ros.server_process import verifier_server
from edge_spec_ros.wire.codec import HEADER, decode, encode
from edge_spec_ros.wire.messages import Close, Envelope, Error, ErrorCode, Stats, StatsReply

from raw_peer import RawPeer

QUERY = "where is the red chair"
N = 4  # tokens per decision
B, M, T = ErrorCode.BAD_REQUEST, ErrorCode.MALFORMED, ErrorCode.TOO_LARGE
REPLIES = 20  # the most messages read while waiting for a given one (the cloud's drafts come first)


@dataclasses.dataclass(frozen=True)
class Case:
    message: str  # the class whose field is refused
    field: str
    state: str  # a key of STATES: the decision's set-up before the case is sent
    make: Callable[["Ctx"], object]  # the refused message, from the decision's context
    code: ErrorCode
    reason: str  # a regular expression the Error's text must contain a match of
    raw: dict | None = None  # header metadata to overwrite (values no dataclass would hold)


@dataclasses.dataclass
class Ctx:
    """What the case's message is built from: the vocabulary size, the cloud's greedy first token and
    the cloud's first draft in this decision (robot aggregating)."""

    vocab: int
    cloud_token: int
    open: DragonOpen  # a valid DragonOpen (greedy, N tokens, the cloud's tokenizer)
    cloud_draft: DragonDraft | None = None
    request: DragonDistRequest | None = None


# The decision's set-up per state: DragonOpen arguments; "draft_first": the cloud's first draft
# arrives before the case; "asked": the robot's first draft differs from the cloud's and the cloud asks
# for all of p^robot_0 before the case.
STATES = {
    "open": {},
    "cloud_aggregates": dict(aggregator="cloud", policy="cloud"),
    "cloud_aggregates_on_demand": dict(aggregator="cloud", policy="cloud", payload="on_demand"),
    "robot_aggregates": dict(aggregator="robot", policy="robot", draft_first=True),
    "robot_aggregates_on_demand": dict(aggregator="robot", policy="robot", payload="on_demand", draft_first=True),
    "asked": dict(aggregator="cloud", policy="cloud", payload="on_demand", asked=True),
}


def probs(v: int, token: int) -> np.ndarray:
    p = np.full(v, 1e-6, np.float32)
    p[token] = 1.0
    return p


def draft(c: Ctx, **kw) -> DragonDraft:
    """A valid robot draft of position 0 (payload full), with ``kw`` replaced."""
    token = kw.pop("token", (c.cloud_token + 1) % c.vocab)
    base = dict(position=0, epoch=0, token=token, log_h=0.0, probs=probs(c.vocab, token % c.vocab))
    return DragonDraft(**{**base, **kw})


def lean(c: Ctx, **kw) -> DragonDraft:
    """A valid robot draft of position 0 for payload on_demand."""
    return draft(c, **{"probs": None, "p_token": 0.9, **kw})


def target(c: Ctx, **kw) -> DragonTarget:
    """A valid target for the cloud's first draft (accepted)."""
    return DragonTarget(**{**dict(position=0, token=c.cloud_draft.token, accept_robot=True, accept_cloud=True,
                                   stamp=1.0), **kw})


def answer(c: Ctx, **kw) -> DragonDist:
    """A valid answer to the cloud's request for all of p^robot_0."""
    return DragonDist(**{**dict(position=c.request.position, epoch=c.request.epoch,
                                probs=probs(c.vocab, (c.cloud_token + 1) % c.vocab)), **kw})


def opening(c: Ctx, **kw) -> DragonOpen:
    return dataclasses.replace(c.open, **kw)


NAN, INF = float("nan"), float("inf")


def cases(v: int) -> list[Case]:
    """(message, field, state, message maker, code, reason): every field of every DRAGON request."""
    o, d, t, dr, ds = "DragonOpen", "DragonDraft", "DragonTarget", "DragonDistRequest", "DragonDist"
    ca, cod = "cloud_aggregates", "cloud_aggregates_on_demand"
    ra, rod = "robot_aggregates", "robot_aggregates_on_demand"
    return [
        Case(o, "query", "open", lambda c: opening(c, query="  "), B, "DragonOpen.query"),
        Case(o, "query", "open", lambda c: opening(c, query="x" * 5000), B, "DragonOpen.query"),
        Case(o, "query", "open", lambda c: opening(c), M, "DragonOpen.query", raw={"query": 7}),
        Case(o, "max_new_tokens", "open", lambda c: opening(c, max_new_tokens=0), B, "DragonOpen.max_new_tokens"),
        Case(o, "max_new_tokens", "open", lambda c: opening(c, max_new_tokens=10**6), B, "DragonOpen.max_new_tokens"),
        Case(o, "max_new_tokens", "open", lambda c: opening(c), M, "DragonOpen.max_new_tokens",
             raw={"max_new_tokens": 2.5}),
        Case(o, "temperature", "open", lambda c: opening(c, temperature=-1.0), B, "DragonOpen.temperature"),
        Case(o, "temperature", "open", lambda c: opening(c, temperature=NAN), B, "DragonOpen.temperature"),
        Case(o, "temperature", "open", lambda c: opening(c, temperature=INF), B, "DragonOpen.temperature"),
        Case(o, "seed", "open", lambda c: opening(c, seed=-1), B, "DragonOpen.seed"),
        Case(o, "seed", "open", lambda c: opening(c, seed=2**64), B, "DragonOpen.seed"),
        Case(o, "stop_tokens", "open", lambda c: opening(c, stop_tokens=(v,)), B, "DragonOpen.stop_tokens"),
        Case(o, "stop_tokens", "open", lambda c: opening(c, stop_tokens=tuple(range(65))), B, "DragonOpen.stop_tokens"),
        Case(o, "stop_tokens", "open", lambda c: opening(c), M, "DragonOpen.stop_tokens", raw={"stop_tokens": [1.5]}),
        Case(o, "top_k", "open", lambda c: opening(c, top_k=-1), B, "DragonOpen.top_k"),
        Case(o, "top_k", "open", lambda c: opening(c, top_k=1000), B, "DragonOpen.top_k"),
        Case(o, "aggregator", "open", lambda c: opening(c, aggregator="moon"), B, "DragonOpen.aggregator"),
        Case(o, "policy", "open", lambda c: opening(c, policy="random"), B, "DragonOpen.policy"),
        Case(o, "payload", "open", lambda c: opening(c, payload="zip"), B, "DragonOpen.payload"),
        Case(o, "max_queue", "open", lambda c: opening(c, max_queue=0), B, "DragonOpen.max_queue"),
        Case(o, "max_queue", "open", lambda c: opening(c, max_queue=MAX_QUEUE + 1), B, "DragonOpen.max_queue"),
        Case(o, "protocol", "open", lambda c: opening(c, protocol=1), B, r"DRAGON protocol 1 \(this side speaks 2\)"),
        Case(o, "protocol", "open", lambda c: opening(c, protocol=99), B, "DRAGON protocol 99"),
        Case(o, "tokenizer_fingerprint", "open", lambda c: opening(c, tokenizer_fingerprint=""), B,
             "DragonOpen.tokenizer_fingerprint must be 32 lowercase hex digits"),
        Case(o, "tokenizer_fingerprint", "open", lambda c: opening(c, tokenizer_fingerprint="f" * 32), B,
             "the tokenizers differ"),
        Case(o, "down_delay_s", "open", lambda c: opening(c, down_delay_s=-0.1), B, "DragonOpen.down_delay_s"),
        Case(o, "down_delay_s", "open", lambda c: opening(c, down_delay_s=MAX_EMULATED_DELAY_S + 1), B,
             "DragonOpen.down_delay_s \\+ down_jitter_s"),
        Case(o, "down_jitter_s", "open", lambda c: opening(c, down_jitter_s=NAN), B, "DragonOpen.down_jitter_s"),
        Case(o, "down_bandwidth_bps", "open", lambda c: opening(c, down_bandwidth_bps=-1.0), B,
             "DragonOpen.down_bandwidth_bps"),
        Case(o, "down_bandwidth_bps", "open", lambda c: opening(c, down_bandwidth_bps=INF), B,
             "DragonOpen.down_bandwidth_bps"),

        Case(d, "position", ca, lambda c: draft(c, position=3), B, "DragonDraft.position: draft for position 3"),
        Case(d, "position", ca, lambda c: draft(c, position=-1), B, "DragonDraft.position"),
        Case(d, "epoch", ca, lambda c: draft(c, epoch=1), B, "DragonDraft.epoch 1: the sender has had only 0"),
        Case(d, "epoch", ca, lambda c: draft(c, epoch=-1), B, "DragonDraft.epoch must be >= 0"),
        Case(d, "token", ca, lambda c: draft(c, token=v), B, "DragonDraft.token"),
        Case(d, "token", ca, lambda c: draft(c, token=-1), B, "DragonDraft.token"),
        Case(d, "log_h", ca, lambda c: draft(c, log_h=NAN), B, "DragonDraft.log_h"),
        Case(d, "log_h", ca, lambda c: draft(c, log_h=-INF), B, "DragonDraft.log_h"),
        Case(d, "log_h", ca, lambda c: draft(c), M, "DragonDraft.log_h", raw={"log_h": "0"}),
        Case(d, "probs", ca, lambda c: draft(c, probs=None), B, "DragonDraft.probs: p\\^s_t missing"),
        Case(d, "probs", ca, lambda c: draft(c, probs=np.full(v - 1, 0.1, np.float32)), B, "DragonDraft.probs"),
        Case(d, "probs", ca, lambda c: draft(c, probs=np.full(v, np.nan, np.float32)), B, "DragonDraft.probs"),
        Case(d, "probs", ca, lambda c: draft(c, probs=np.zeros(v, np.float32)), B, "DragonDraft.probs"),
        Case(d, "probs", ca, lambda c: draft(c, probs=-probs(v, 1)), B, "DragonDraft.probs"),
        Case(d, "probs", ca, lambda c: draft(c, probs=np.zeros(v + 1, np.float32)), T, "'probs'"),
        Case(d, "probs", ca, lambda c: draft(c, probs=np.zeros(v, np.float16)), M, "must be float32"),
        Case(d, "probs", cod, lambda c: lean(c, probs=probs(v, 1)), B, "DragonDraft.probs: payload on_demand"),
        Case(d, "p_token", ca, lambda c: draft(c, p_token=0.5), B, "DragonDraft.p_token: payload full"),
        Case(d, "p_token", cod, lambda c: lean(c, p_token=0.0), B, "DragonDraft.p_token"),
        Case(d, "p_token", cod, lambda c: lean(c, p_token=1.5), B, "DragonDraft.p_token"),
        Case(d, "p_token", cod, lambda c: lean(c, p_token=NAN), B, "DragonDraft.p_token"),
        Case(d, "decode_s", ca, lambda c: draft(c, decode_s=-1.0), B, "DragonDraft.decode_s"),
        Case(d, "decode_s", ca, lambda c: draft(c, decode_s=NAN), B, "DragonDraft.decode_s"),
        Case(d, "decode_s", ca, lambda c: draft(c, decode_s=1e9), B, "DragonDraft.decode_s"),
        Case(d, "echo_stamp", ca, lambda c: draft(c, echo_stamp=INF), B, "DragonDraft.echo_stamp"),
        Case(d, "echo_stamp", ca, lambda c: draft(c, echo_stamp=-5.0), B, "DragonDraft.echo_stamp"),
        Case(d, "echo_hold_s", ca, lambda c: draft(c, echo_hold_s=-1.0), B, "DragonDraft.echo_hold_s"),
        Case(d, "echo_hold_s", ca, lambda c: draft(c, echo_hold_s=NAN), B, "DragonDraft.echo_hold_s"),

        Case(t, "position", ra, lambda c: target(c, position=1), B, "DragonTarget.position"),
        Case(t, "position", "cloud_aggregates", lambda c: DragonTarget(0, 1, True, True), B,
             "a target token sent to the aggregator"),
        Case(t, "token", ra, lambda c: target(c, token=v), B, "DragonTarget.token"),
        Case(t, "accept_cloud", ra, lambda c: target(c, accept_cloud=False), B,
             "DragonTarget.accept_cloud: the acceptance flag disagrees"),
        Case(t, "accept_cloud", ra, lambda c: target(c, token=(c.cloud_draft.token + 1) % v), B,
             "DragonTarget.accept_cloud: the acceptance flag disagrees"),
        Case(t, "accept_robot", ra, lambda c: target(c), M, "DragonTarget.accept_robot", raw={"accept_robot": 1}),
        Case(t, "switch", ra, lambda c: target(c), M, "DragonTarget.switch", raw={"switch": "yes"}),
        Case(t, "stamp", ra, lambda c: target(c, stamp=NAN), B, "DragonTarget.stamp"),
        Case(t, "stamp", ra, lambda c: target(c, stamp=-1.0), B, "DragonTarget.stamp"),
        Case(t, "decode_s", ra, lambda c: target(c, decode_s=-0.5), B, "DragonTarget.decode_s"),
        Case(t, "rtt_s", ra, lambda c: target(c, rtt_s=INF), B, "DragonTarget.rtt_s"),

        Case(dr, "position", rod, lambda c: DragonDistRequest(2, 0), B, "DragonDistRequest.position"),
        Case(dr, "epoch", rod, lambda c: DragonDistRequest(0, 3), B, "DragonDistRequest.epoch 3"),
        Case(dr, "token", rod, lambda c: DragonDistRequest(0, 0, v), B, "DragonDistRequest.token"),
        Case(dr, "token", rod, lambda c: DragonDistRequest(0, 0, -2), B, "DragonDistRequest.token"),

        Case(ds, "position", "asked", lambda c: answer(c, position=1), B, "DragonDist.position 1"),
        Case(ds, "epoch", "asked", lambda c: answer(c, epoch=1), B, "DragonDist.epoch 1"),
        Case(ds, "token", "asked", lambda c: answer(c, token=3, probs=np.ones(1, np.float32)), B, "DragonDist.token 3"),
        Case(ds, "probs", "asked", lambda c: answer(c, probs=np.full(v, -1.0, np.float32)), B, "DragonDist.probs"),
        Case(ds, "probs", "asked", lambda c: answer(c, probs=np.ones(3, np.float32)), B, "DragonDist.probs"),
        Case(ds, "probs", "asked", lambda c: answer(c, probs=np.zeros(v + 1, np.float32)), T, "'probs'"),
        Case(ds, "probs", cod, lambda c: DragonDist(0, 0, probs(v, 1)), B, "DragonDist: a distribution nobody asked"),
    ]


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    docs = tmp_path_factory.mktemp("dragon_refusals") / "docs"
    docs.mkdir()
    (docs / "room.md").write_text("The red chair stands by the window.\n\nThe door is on the left of the chair.")
    pair = load_pair("embedded")
    fingerprint = tokenizer_fingerprint(pair.tokenizer)
    ctx = Ctx(pair.verifier.stack.vocab_size, -1, DragonOpen(query=QUERY, max_new_tokens=N,
                                                            tokenizer_fingerprint=fingerprint))
    with verifier_server("--threads", "1", "--documents", str(docs), "--max-requests", "5000") as server:
        yield server, ctx


class Peer(RawPeer):
    def send(self, sid: bytes, msg, raw: dict | None = None) -> None:
        frames = encode(Envelope(sid, msg))
        if raw:
            meta = json.loads(frames[0][HEADER.size:])
            meta.update(raw)
            frames[0] = frames[0][:HEADER.size] + json.dumps(meta).encode()
        self.send_raw(frames)

    def wait_for(self, sid: bytes, kind: type):
        """The next message of ``kind``, or Error, for session ``sid`` (the cloud's drafts and targets,
        and late messages of earlier decisions, are passed over)."""
        for _ in range(REPLIES):
            env = decode(self.sock.recv_multipart())
            if env.session == sid and isinstance(env.message, (kind, Error)):
                return env.message
        raise AssertionError(f"no {kind.__name__} among {REPLIES} messages")


@pytest.fixture
def peer(cloud):
    p = Peer(cloud[0].endpoint, linger_ms=1000)
    yield p
    p.close()


def start(peer: Peer, base: Ctx, state: str) -> tuple[bytes, Ctx]:
    """Open a decision in ``state`` and bring it to where the case applies."""
    options = dict(STATES[state])
    draft_first, asked = options.pop("draft_first", False), options.pop("asked", False)
    sid, ctx = uuid.uuid4().bytes, dataclasses.replace(base)
    peer.send(sid, opening(ctx, **options))
    assert isinstance(peer.wait_for(sid, DragonOpened), DragonOpened)
    if draft_first:
        ctx.cloud_draft = peer.wait_for(sid, DragonDraft)
        assert isinstance(ctx.cloud_draft, DragonDraft) and ctx.cloud_draft.position == 0
    if asked:
        peer.send(sid, lean(ctx))  # differs from the cloud's greedy draft: p^robot_0 is needed in full
        ctx.request = peer.wait_for(sid, DragonDistRequest)
        assert isinstance(ctx.request, DragonDistRequest) and ctx.request.token == -1, ctx.request
    return sid, ctx


@pytest.fixture(scope="module")
def cloud_token(cloud):
    """The cloud's greedy draft at position 0 for the query (the same in every decision)."""
    server, base = cloud
    p = Peer(server.endpoint, linger_ms=1000)
    try:
        sid, ctx = start(p, base, "robot_aggregates")
        p.send(sid, Close())
        return ctx.cloud_draft.token
    finally:
        p.close()


def test_the_table_covers_every_field():
    covered = {(c.message, c.field) for c in cases(640)}
    every = {(cls.__name__, f.name) for cls in (DragonOpen, DragonDraft, DragonTarget, DragonDistRequest, DragonDist)
             for f in dataclasses.fields(cls)}
    assert every - covered == set()


def test_every_dragon_field_is_refused_with_a_code_and_a_reason(cloud, cloud_token, peer):
    import re

    base = dataclasses.replace(cloud[1], cloud_token=cloud_token)
    for case in cases(base.vocab):
        if case.state == "open":
            sid, ctx = uuid.uuid4().bytes, base
        else:
            sid, ctx = start(peer, base, case.state)
        peer.send(sid, case.make(ctx), case.raw)
        reply = peer.wait_for(sid, Error)
        assert isinstance(reply, Error) and reply.code == case.code and re.search(case.reason, reply.message), \
            (case.message, case.field, case.state, reply)
        if case.state != "open":  # a refused open leaves no decision to close
            peer.send(sid, Close())
    peer.send(bytes(16), Stats())
    stats = peer.wait_for(bytes(16), StatsReply)
    assert json.loads(stats.counters).get("internal_error", 0) == 0  # every refusal was a refusal


def test_a_dragon_opened_sent_to_the_server_is_refused(peer):
    peer.send(uuid.uuid4().bytes, DragonOpened(vocab_size=640))
    reply = peer.receive()
    assert isinstance(reply, Error) and reply.code == B and "is not a request" in reply.message


def test_a_stale_draft_is_dropped_and_the_next_is_aggregated(cloud, cloud_token, peer):
    """The robot's draft at 0 differs from the cloud's greedy token: rejected, the robot's epoch becomes 1.
    A draft of position 1 decoded before the robot learned of it (epoch 0) is dropped without an error;
    the one of epoch 1 is aggregated (its target comes back)."""
    base = dataclasses.replace(cloud[1], cloud_token=cloud_token)
    vocab = base.vocab
    sid, ctx = start(peer, base, "cloud_aggregates")
    peer.send(sid, draft(ctx))
    first = peer.wait_for(sid, DragonTarget)
    assert isinstance(first, DragonTarget) and first.token == cloud_token and not first.accept_robot
    peer.send(sid, draft(ctx, position=1, epoch=0))  # stale: dropped
    peer.send(sid, draft(ctx, position=1, epoch=1, token=3, probs=probs(vocab, 3)))
    second = peer.wait_for(sid, DragonTarget)
    assert isinstance(second, DragonTarget) and second.position == 1 and math.isfinite(second.stamp), second
    peer.send(sid, Close())
