"""DRAGON on the robot with real (small) language models: dragon/robot.RobotDragon over a RobotMemory
against dragon/session.DragonSession over a DocumentStore, every message encoded and decoded.

Greedy and sampled output equal DRDG/TW token for token (threads, in-process link); sampled two-token
sequences fit Π_t (η^l p^l + η^r p^r) by chi-square and an aggregator that uses stale drafts fails;
no frame of a session holds document text, a document id or a retrieval score.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest
from scipy.stats import chisquare

from edge_spec_ros.dragon.aggregation import CLOUD, ROBOT, drdg_tw
from edge_spec_ros.dragon.document_lm import build_side
from edge_spec_ros.dragon.peer import DragonPeer, PeerConfig, run_interleaved, wire_precision
from edge_spec_ros.dragon.robot import DragonConfig, RobotDragon
from edge_spec_ros.dragon.session import DragonServeConfig, DragonSession, LocalDragonLink
from edge_spec_ros.dragon.stores import DocumentStore, RobotMemory
from edge_spec_ros.dragon.wire import DRAGON_PROTOCOL, DragonOpen, DragonOpened
from edge_spec_ros.models.stack import DecoderStack
from edge_spec_ros.models.tiny import build_tiny_qwen2vl
from edge_spec_ros.models.tokenizer import tokenizer_fingerprint
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.wire.codec import HEADER

from dragon_controls import StaleDraftsAggregator
from small_vocab import SMALL, VOCAB, aggregated_two_token_joint

SPEC = dataclasses.replace(SMALL, init_std=0.5)  # peakier, more context-dependent next-token distributions
WORDS = ("chair", "red", "kitchen", "door", "bottle", "table", "window", "lamp")  # id → word, V = 8
QUERY = "where did you see the red chair"
MEMORY = [("observation", "I saw a red chair in the kitchen beside the fridge", (1.0, 2.0, 0.5)),
          ("instruction", "go to the door near the window", (0.0, 0.0, 0.0)),
          ("note", "the lamp on the table is broken since Tuesday", (3.0, 1.0, 1.5)),
          ("observation", "a silver bottle stands on the red chair", (1.2, 2.1, 0.4))]
DOCUMENTS = {"furniture.md": "Chairs are furniture for sitting; a red chair is easy to spot.\n\n"
                             "A kitchen usually has a table, a chair and a lamp.",
             "house/doors.txt": "Doors and windows open to let people and light in."}


def decode_text(ids):
    return " ".join(WORDS[i] for i in ids)


class WordVocabulary:
    """The id → word mapping of ``decode_text`` as a tokenizer for ``tokenizer_fingerprint``."""

    def __init__(self, words):
        self.words = tuple(words)

    def get_vocab(self):
        return {w: i for i, w in enumerate(self.words)}

    def __len__(self):
        return len(self.words)


FINGERPRINT = tokenizer_fingerprint(WordVocabulary(WORDS))  # both sides of this world


def robot_dragon(world, config, memory=None, stack=None, fingerprint=FINGERPRINT):
    return RobotDragon(world["robot"] if stack is None else stack, world["memory"] if memory is None else memory,
                       world["prompt_ids"], decode_text, config, tokenizer_fingerprint=fingerprint)


def local_link(world, stack=None, fingerprint=FINGERPRINT, **kw):
    return LocalDragonLink(world["cloud"] if stack is None else stack, world["store"], world["prompt_ids"],
                           decode_text, tokenizer_fingerprint=fingerprint, **kw)


@pytest.fixture(scope="module")
def world(tokenizer, tmp_path_factory):
    """The robot's and the cloud's small LMs (V = 8, different weights), a memory and a folder."""
    root = tmp_path_factory.mktemp("dragon")
    memory = RobotMemory(root / "memory")
    for i, (kind, text, pose) in enumerate(MEMORY):
        memory.add(kind, text, pose, time=10.0 * i)
    for name, text in DOCUMENTS.items():
        (root / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "docs" / name).write_text(text)

    def prompt_ids(document, query):  # the shipped tokenizer's ids folded into V = 8
        return [t % VOCAB for t in tokenizer(f"{document} | {query}").input_ids][:14]

    return {"robot": DecoderStack(build_tiny_qwen2vl(SPEC, tokenizer, seed=5)),
            "cloud": DecoderStack(build_tiny_qwen2vl(SPEC, tokenizer, seed=3)),
            "memory": memory, "store": DocumentStore(root / "docs"), "prompt_ids": prompt_ids}


def reference(world, n, temperature, seed, k=2):
    """DRDG/TW over fresh copies of both sides (same documents, models and relevance)."""
    s = SamplingConfig(temperature)
    mem, store = world["memory"], world["store"]
    rs = build_side(world["robot"], mem, mem.top_k(QUERY, k), QUERY, world["prompt_ids"], decode_text, s)
    cs = build_side(world["cloud"], store, store.top_k(QUERY, k), QUERY, world["prompt_ids"], decode_text, s)
    return drdg_tw(wire_precision(rs.next_distribution), wire_precision(cs.next_distribution), [], n,
                   PositionalRNG(seed), s)


def decide(world, config):
    robot = robot_dragon(world, config)
    link = local_link(world, timeout_s=30.0)
    return robot, link, robot.decode(QUERY, link)


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_robot_and_cloud_over_encoded_messages_equal_drdg_tw(world, temperature):
    """Six decisions per mode (24 tokens, payload full / on_demand, either first aggregator, eq. 8
    scheduler or a fixed aggregator), both sides in their own thread: the robot's and the cloud's
    tokens equal DRDG/TW's, S^l and S^r too; the robot's KV caches end at prompt + committed tokens."""
    n = 24
    rollbacks = 0
    for case in range(6):
        config = DragonConfig(max_new_tokens=n, temperature=temperature, seed=case,
                              payload=("full", "on_demand")[case % 2], aggregator=(ROBOT, CLOUD)[(case // 2) % 2],
                              policy=("dragon", "robot", "cloud")[case % 3], max_queue=1 + case % 3)
        robot, link, out = decide(world, config)
        ref = reference(world, n, temperature, case)
        assert out.tokens == ref.tokens, case
        assert out.trace.accept_robot == ref.accept_robot and out.trace.accept_cloud == ref.accept_cloud
        assert tuple(link.cloud.peer.tokens) == ref.tokens
        assert out.memory_entries == 2
        lm = robot.last_side.lm
        assert lm.cached_lengths() <= [len(p) + n for p in lm.prompts]
        rollbacks += out.trace.rollbacks
    assert rollbacks > 10  # the two models disagree: rejections and KV rollbacks happen


def test_no_document_text_id_or_score_crosses_the_link(world):
    """Every frame of a decision (both directions, both payloads): no 12-character piece of any memory
    entry or cloud document (pieces of the query excepted: the query travels), no document id, and
    neither side's retrieval scores, as float64/float32 vectors or as single JSON numbers. (The one
    retrieval-derived number that travels is the paper's log h̃^s_t = logsumexp_d R(d, x_<t), a scalar
    per draft; with two or more documents per side, as here, it equals no single score.)"""
    mem, store = world["memory"], world["store"]
    texts = [e.text for e in mem.entries] + [e.render() for e in mem.entries] + [store.text(d) for d in store.doc_ids]
    pieces = {t[i:i + 12] for t in texts for i in range(max(1, len(t) - 11))} - {
        QUERY[i:i + 12] for i in range(len(QUERY) - 11)}
    ids = [e.doc_id for e in mem.entries] + list(store.doc_ids)
    mem_scores, doc_scores = [h.score for h in mem.top_k(QUERY, 4)], [h.score for h in store.top_k(QUERY, 4)]
    assert len(mem_scores) >= 2 and len(doc_scores) >= 2
    scores = mem_scores + doc_scores
    vectors = [np.array(v[:2], dtype=dt).tobytes() for v in (mem_scores, doc_scores) for dt in (np.float64, np.float32)]
    frames_seen = 0
    for payload in ("full", "on_demand"):
        _, link, _ = decide(world, DragonConfig(max_new_tokens=16, temperature=1.0, payload=payload, seed=3))
        for _, frames in link.log.frames:
            frames_seen += 1
            blob = b"".join(frames)
            meta = json.loads(frames[0][HEADER.size:])
            for piece in pieces:
                assert piece.encode() not in blob, piece
            for doc_id in ids:
                assert doc_id.encode() not in blob, doc_id
            for vector in vectors:
                assert vector not in blob
            numbers = [v for k, v in meta.items() if isinstance(v, float)]
            for s in scores:
                assert all(abs(v - s) > 1e-12 for v in numbers), (meta, s)
        assert {"DragonOpen", "DragonOpened", "DragonDraft", "DragonTarget", "Close"} <= set(link.log.by_type)
    assert frames_seen > 40


def test_sampled_pairs_with_models_follow_the_aggregated_target_and_stale_drafts_fail(world):
    """(x_1, x_2) over 1000 seeds from the two small LMs over their documents (dynamic relevance),
    through encoded frames in random event orders, either side aggregating: fits Π_t p_t (p > 1e-3; 0.10);
    an aggregator using stale drafts does not (p < 1e-6; 1.4e-11, and 1.6e-19 over 1500 seeds, but 9e-6
    over 750). The side functions are memoised by context (the model's output is a function of it; the KV
    path is checked by the token-for-token test)."""
    s = SamplingConfig(1.0)
    mem, store = world["memory"], world["store"]
    rs = build_side(world["robot"], mem, mem.top_k(QUERY, 2), QUERY, world["prompt_ids"], decode_text, s)
    cs = build_side(world["cloud"], store, store.top_k(QUERY, 2), QUERY, world["prompt_ids"], decode_text, s)
    fr = functools.lru_cache(maxsize=None)(lambda ctx: wire_precision(rs.next_distribution)(list(ctx)))
    fc = functools.lru_cache(maxsize=None)(lambda ctx: wire_precision(cs.next_distribution)(list(ctx)))
    robot_fn, cloud_fn = (lambda ctx: fr(tuple(ctx))), (lambda ctx: fc(tuple(ctx)))
    n = 1000
    expected = aggregated_two_token_joint(robot_fn, cloud_fn, [], VOCAB) * n
    keep = expected >= 5

    def p_value(peer_class):
        counts = np.zeros(VOCAB * VOCAB)
        for seed in range(n):
            config = PeerConfig(2, s, seed=seed, first_aggregator=(ROBOT, CLOUD)[seed % 2], max_queue=2,
                                policy=(ROBOT, CLOUD)[seed % 2], payload=("full", "on_demand")[seed % 3 == 0]
                                if peer_class is DragonPeer else "full")
            robot = peer_class(ROBOT, robot_fn, config, VOCAB)
            cloud = peer_class(CLOUD, cloud_fn, config, VOCAB)
            run_interleaved(robot, cloud, seed)
            counts[robot.tokens[0] * VOCAB + robot.tokens[1]] += 1
        obs = np.append(counts[keep], counts[~keep].sum())
        exp = np.append(expected[keep], expected[~keep].sum())
        exp *= obs.sum() / exp.sum()  # the joint sums to 1 only up to float32 rounding; chisquare wants equal totals
        return chisquare(obs, exp)[1]

    p_ok, p_bad = p_value(DragonPeer), p_value(StaleDraftsAggregator)
    print(f"chi-square p: decoder {p_ok:.3g}, stale-draft aggregator {p_bad:.3g}")
    assert p_ok > 1e-3, p_ok
    assert p_bad < 1e-6, p_bad


def test_the_cloud_refuses_bad_requests_and_a_vocabulary_mismatch(world, tokenizer):
    stack, store = world["cloud"], world["store"]
    ok = DragonOpen(query="q", max_new_tokens=4, tokenizer_fingerprint=FINGERPRINT)
    DragonSession(stack, store, world["prompt_ids"], decode_text, ok, tokenizer_fingerprint=FINGERPRINT)
    for bad, reason in ((dataclasses.replace(ok, query=""), "query"),
                        (dataclasses.replace(ok, max_new_tokens=10_000), "max_new_tokens"),
                        (dataclasses.replace(ok, top_k=99), "top_k"),
                        (dataclasses.replace(ok, stop_tokens=(VOCAB,)), "DragonOpen.stop_tokens"),
                        (dataclasses.replace(ok, tokenizer_fingerprint=""), "tokenizer_fingerprint must be"),
                        (dataclasses.replace(ok, tokenizer_fingerprint="f" * 32), "the tokenizers differ")):
        with pytest.raises(ValueError, match=reason):
            DragonSession(stack, store, world["prompt_ids"], decode_text, bad, DragonServeConfig(),
                          tokenizer_fingerprint=FINGERPRINT)
    other = DecoderStack(build_tiny_qwen2vl(SMALL.__class__(**{**SMALL.__dict__, "vocab_size": VOCAB + 1}),
                                            tokenizer, seed=1))
    robot = robot_dragon(world, DragonConfig(max_new_tokens=2), stack=other)
    with pytest.raises(ValueError, match="vocabulary"):
        robot.decode(QUERY, local_link(world))


class ReplyLink:
    """A link whose cloud answers the open with ``opened`` (and nothing else)."""

    def __init__(self, opened):
        self.opened, self.requests, self.sent, self.closed = opened, [], [], 0

    def open(self, request, cancel=None):
        self.requests.append(request)
        return self.opened

    def send(self, msg):
        self.sent.append(msg)

    def receive(self, timeout_s):
        return None

    def close(self):
        self.closed += 1


def test_the_robot_refuses_another_tokenizer_of_the_same_size(world):
    """Same V, other words: the cloud (LocalDragonLink) refuses the open with both fingerprints named,
    and the robot refuses a DragonOpened naming another tokenizer, an empty fingerprint or protocol 1,
    closing the link before anything else is sent."""
    swapped = list(WORDS)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    other = tokenizer_fingerprint(WordVocabulary(swapped))
    assert other != FINGERPRINT
    robot = robot_dragon(world, DragonConfig(max_new_tokens=2))
    with pytest.raises(ValueError, match=f"the tokenizers differ: the robot's tokenizer fingerprint {FINGERPRINT} "
                                         f"is not the cloud's {other}"):
        robot.decode(QUERY, local_link(world, fingerprint=other))
    v = world["robot"].vocab_size
    for opened, reason in ((DragonOpened(vocab_size=v, tokenizer_fingerprint=other), "the tokenizers differ"),
                           (DragonOpened(vocab_size=v), "DragonOpened.tokenizer_fingerprint"),
                           (DragonOpened(vocab_size=v, protocol=1, tokenizer_fingerprint=FINGERPRINT),
                            "protocol 1")):
        link = ReplyLink(opened)
        with pytest.raises(ValueError, match=reason):
            robot.decode(QUERY, link)
        assert link.closed == 1 and not link.sent and link.requests[0].tokenizer_fingerprint == FINGERPRINT
        assert link.requests[0].protocol == DRAGON_PROTOCOL
    link = ReplyLink(DragonOpened(vocab_size=v, tokenizer_fingerprint=FINGERPRINT))
    with pytest.raises(TimeoutError):  # accepted: the robot drafts, and this cloud never answers
        robot_dragon(world, DragonConfig(max_new_tokens=2, timeout_s=0.2, aggregator=CLOUD, policy="cloud",
                                         max_queue=1)).decode(QUERY, link)
    assert link.closed == 1 and len(link.sent) == 1
    for bad in ("", "F" * 32, "0" * 31, FINGERPRINT + "\n"):
        with pytest.raises(ValueError, match="tokenizer_fingerprint must be 32 lowercase hex digits"):
            robot_dragon(world, DragonConfig(), fingerprint=bad)


def test_an_empty_memory_and_no_matching_document_still_decode(world, tmp_path):
    """Nothing retrieved on either side: each LM reads the query alone (one row, R = 0)."""
    robot = robot_dragon(world, DragonConfig(max_new_tokens=6), memory=RobotMemory(tmp_path / "empty"))
    link = local_link(world)
    out = robot.decode("zebra quantum", link)
    assert len(out.tokens) == 6 and out.memory_entries == 0 and link.cloud.side.documents == 0


def test_a_new_instruction_cancels_the_open_while_the_cloud_prefills(world):
    """The cloud (a bare ROUTER on 127.0.0.1 that reads the open and never answers, as a cloud busy
    retrieving and prefilling) keeps the open waiting; ``cancel()`` turning true ends the decision
    within a few CANCEL_POLL_S, not at the open's 30 s timeout, and the link's Close reaches the cloud
    (which drops the session)."""
    import time

    import zmq

    from edge_spec_ros.dragon.robot import CANCEL_POLL_S, ZmqDragonLink
    from edge_spec_ros.wire.codec import decode
    from edge_spec_ros.wire.messages import Close

    ctx = zmq.Context()
    cloud = ctx.socket(zmq.ROUTER)
    cloud.setsockopt(zmq.LINGER, 0)
    port = cloud.bind_to_random_port("tcp://127.0.0.1")
    try:
        link = ZmqDragonLink(f"tcp://127.0.0.1:{port}", open_timeout_s=30.0)
        start = time.monotonic()
        out = robot_dragon(world, DragonConfig(max_new_tokens=4)).decode(
            QUERY, link, cancel=lambda: time.monotonic() - start > 0.3)
        waited = time.monotonic() - start
        assert out.cancelled and out.tokens == () and 0.3 <= waited < 0.3 + 20 * CANCEL_POLL_S, waited
        received = []
        while cloud.poll(2000):
            received.append(type(decode(cloud.recv_multipart()[1:]).message))
            if received[-1] is Close:
                break
        assert received == [DragonOpen, Close]
    finally:
        cloud.close()
        ctx.term()


def test_delayed_pipe_keeps_order_and_delay():
    """dragon/session.DelayedPipe: every item arrives no earlier than its delay minus jitter after it was
    put, and in the order put (jitter never reorders)."""
    import time

    from edge_spec_ros.dragon.session import DelayedPipe

    pipe = DelayedPipe(0.03, 0.01, seed=1)
    sent = {}
    for i in range(6):
        sent[i] = time.monotonic()
        pipe.put([bytes([i])])
    assert pipe.get(0.0) is None  # nothing is due yet
    got = []
    while len(got) < 6:
        frames = pipe.get(1.0)
        assert frames is not None
        got.append((frames[0][0], time.monotonic()))
    assert [i for i, _ in got] == list(range(6))
    assert all(t - sent[i] >= 0.02 for i, t in got)


def test_an_emulated_network_delay_changes_no_token(world):
    """The same greedy decision with 10 ms ± 2 ms each way gives the tokens of the undelayed one; its
    first token (the cloud aggregates) waits for the robot's draft to go up and the target to come down."""
    config = DragonConfig(max_new_tokens=10, seed=4, aggregator=CLOUD, policy="dragon")
    plain = robot_dragon(world, config).decode(QUERY, local_link(world))
    slow = robot_dragon(world, config).decode(QUERY, local_link(world, one_way_s=0.01, jitter_s=0.002))
    assert slow.tokens == plain.tokens and slow.first_token_s >= 2 * 0.008


def test_schedule_bench_replays_sequences_from_the_shipped_pair(capsys):
    """bench dragon-schedule (2 sequences of 6 tokens): one result per c_dec setting, every policy."""
    from edge_spec_ros.cli import main

    assert main(["bench", "dragon-schedule", "--sequences", "2", "--tokens", "6", "--extra-ms", "0,100",
                 "--c-dec-ms", "measured;60,25"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["c_dec_ms"]["measured"] for r in rows] == [True, False]
    for r in rows:
        assert set(r["mean_total_s"]) == {"dragon", "robot", "cloud", "random"}
        assert all(len(v) == 2 and v[1] >= v[0] > 0 for v in r["mean_total_s"].values())


def test_the_robot_reads_entries_another_process_appended(world, tmp_path):
    """RobotDragon re-reads its memory file when another writer (nodes/memory_node) appended to it:
    the next decision retrieves the new entry."""
    directory = tmp_path / "shared_memory"
    RobotMemory(directory).add("note", "the lamp is broken", time=1.0)
    robot = robot_dragon(world, DragonConfig(max_new_tokens=2), memory=RobotMemory(directory))
    RobotMemory(directory).add("observation", "a red chair by the window", (2.0, 1.0, 0.0), time=2.0)  # the writer
    robot.decode(QUERY, local_link(world))
    assert len(robot.memory) == 2 and robot.last_side.documents == 1
    assert robot.memory.top_k(QUERY, 1)[0].doc_id == "mem-1"
