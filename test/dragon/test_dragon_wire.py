"""DRAGON's Speculative Aggregation over the wire protocol (dragon/wire.py, dragon/peer.py).

Two DragonPeers exchange encoded frames in random, seeded event orders (drafting, aggregating,
delivering): the output equals DRDG/TW token for token (greedy and sampled) for every payload,
queue depth, first aggregator and aggregator switching; sampled two-token sequences fit
Π_t (η^l p^l + η^r p^r) by chi-square, and an aggregator that keeps the other side's stale drafts
(no queue clear, no epoch check) fails the same test. Hand-built context-dependent sides, V = 4-6.
"""

from __future__ import annotations

import dataclasses
import typing

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from edge_spec_ros.dragon import wire as wd
from edge_spec_ros.dragon.aggregation import (
    CLOUD,
    ROBOT,
    LocalAggregate,
    drdg_tw,
    local_aggregate,
    speculative_aggregate,
)
from edge_spec_ros.dragon.peer import (
    DragonPeer,
    DragonProtocolError,
    FULL,
    FrameLog,
    PeerConfig,
    partial_aggregate,
    run_interleaved,
    wire_precision,
)
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.wire.codec import WireError, decode, encode
from edge_spec_ros.wire.messages import Envelope, ErrorCode

from dragon_controls import StaleDraftsAggregator
from small_vocab import aggregated_two_token_joint

GREEDY, SAMPLED = SamplingConfig(0.0), SamplingConfig(1.0)
SESSION = bytes(range(16))
FINGERPRINT = "0123456789abcdef" * 2  # a tokenizer fingerprint's form (models/tokenizer.tokenizer_fingerprint)


def table_side(seed: int, v: int, docs: int = 2):
    """p^s from a random table indexed by the last two tokens of (1, 2) + context, with relevance
    indexed by the last token (dynamic weights): context-dependent, so stale drafts matter."""
    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(v, v, docs, v, generator=gen, dtype=torch.float64) * 2.0
    bias = torch.randn(v, docs, generator=gen, dtype=torch.float64)

    def side(context):
        full = [1, 2, *context]
        return local_aggregate(torch.softmax(table[full[-2], full[-1]], -1), bias[full[-1]])

    return side


class KVCheck:
    """A side function with a fake KV cache: every call must extend the cached context by exactly one
    token (a missing or wrong rollback is caught); records the rollback positions."""

    def __init__(self, fn):
        self.fn, self.cached, self.rollbacks = fn, [], []

    def __call__(self, context):
        assert list(context[:-1]) == self.cached if context else not self.cached, "stale cache: rollback missing"
        self.cached = list(context)
        return self.fn(context)

    def rollback(self, n):
        self.rollbacks.append(n)
        del self.cached[n:]


def switch_every(k: int):
    return lambda t, result: ROBOT if (t // k) % 2 else CLOUD


def run_pair(robot_fn, cloud_fn, v, config, seed, placement=None, log=None, peer_class=DragonPeer):
    robot = peer_class(ROBOT, robot_fn, config, v, getattr(robot_fn, "rollback", None), placement=placement)
    cloud = peer_class(CLOUD, cloud_fn, config, v, getattr(cloud_fn, "rollback", None), placement=placement)
    run_interleaved(robot, cloud, seed, SESSION, log)
    return robot, cloud


# --------------------------------------------------------------------------- messages and codec


SAMPLES = [
    wd.DragonOpen(query="where did you see the red chair?", max_new_tokens=64, temperature=0.7, seed=2**63 + 5,
                  stop_tokens=(151_643, 151_645), top_k=3, aggregator="cloud", policy="robot",
                  payload="on_demand", max_queue=6, tokenizer_fingerprint=FINGERPRINT),
    wd.DragonOpened(vocab_size=151_657, prefill_s=0.25, tokenizer_fingerprint=FINGERPRINT),
    wd.DragonDraft(position=7, epoch=2, token=151_000, log_h=-1.25,
                   probs=np.random.default_rng(0).random(300).astype(np.float32), decode_s=0.01,
                   echo_stamp=12.5, echo_hold_s=0.002),
    wd.DragonDraft(position=0, epoch=0, token=3, log_h=0.5, p_token=0.375),
    wd.DragonTarget(position=7, token=42, accept_robot=True, accept_cloud=False, switch=True, stamp=99.5,
                    decode_s=0.02, rtt_s=0.1),
    wd.DragonDistRequest(position=9, epoch=1),
    wd.DragonDistRequest(position=9, epoch=1, token=42),
    wd.DragonDist(position=9, epoch=1, probs=np.full(300, 1 / 300, dtype=np.float32)),
    wd.DragonDist(position=9, epoch=1, probs=np.array([0.25], dtype=np.float32), token=42),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_dragon_message_round_trips_through_the_codec(msg):
    out = decode(encode(Envelope(SESSION, msg)))
    assert out.session == SESSION and type(out.message) is type(msg)
    for f in dataclasses.fields(msg):
        a, b = getattr(msg, f.name), getattr(out.message, f.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        else:
            assert type(a) is type(b) and a == b, f.name


def test_dragon_types_do_not_collide_with_the_verifier_protocol():
    from edge_spec_ros.wire.messages import MESSAGE_TYPES

    assert not set(int(t) for t in wd.DRAGON_TYPES) & set(int(t) for t in MESSAGE_TYPES)
    assert set(wd.DRAGON_TYPES.values()) == {type(m) for m in SAMPLES}


def test_importing_the_messages_registers_them_with_the_codec_and_nothing_else_can_take_their_numbers():
    """dragon/wire.py registers its six types and the float32 ``probs`` with the codec (wire/codec.py
    imports nothing of DRAGON); registering them again (a reloaded module) changes nothing; another
    class on one of their numbers, on the compact draft's, or another dtype for a fixed field is
    refused."""
    from edge_spec_ros.wire import codec

    assert all(codec.FRAME_TYPES[int(t)] is cls for t, cls in wd.DRAGON_TYPES.items())
    assert codec.FIELD_DTYPES["probs"] == "float32"
    before = (dict(codec.FRAME_TYPES), dict(codec.FIELD_DTYPES))
    codec.register(wd.DRAGON_TYPES, wd.DRAGON_FIELD_DTYPES)
    assert (codec.FRAME_TYPES, codec.FIELD_DTYPES) == before

    @dataclasses.dataclass(frozen=True)
    class Intruder:
        position: int
        TYPE = 32

    with pytest.raises(ValueError, match="message type 32 is taken"):
        codec.register({32: Intruder}, {})
    with pytest.raises(ValueError, match="message type 11 is taken"):
        codec.register({11: Intruder}, {})
    with pytest.raises(ValueError, match="'tokens'"):
        codec.register({}, {"tokens": "float32"})
    assert (codec.FRAME_TYPES, codec.FIELD_DTYPES) == before


def test_a_process_that_does_not_import_dragon_answers_its_messages_as_unknown():
    """The verifier server imports nothing of DRAGON; without dragon/wire.py a DragonOpen is MALFORMED,
    "unknown message type 32", as from a verifier that predates DRAGON (serve imports it: its DRAGON
    sessions)."""
    import subprocess
    import sys

    code = ("import sys\nimport edge_spec_ros.cloud.server\nfrom edge_spec_ros.wire.codec import HEADER, MAGIC, "
            "VERSION, WireError, decode\nassert not [m for m in sys.modules if m.startswith('edge_spec_ros.dragon')]\n"
            "try:\n    decode([HEADER.pack(MAGIC, VERSION, 32, bytes(16)) + b'{\"arrays\":[]}'])\n"
            "except WireError as exc:\n    print(exc.code.name, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "MALFORMED unknown message type 32"


def test_probs_must_be_float32_and_fields_are_validated():
    frames = encode(Envelope(SESSION, wd.DragonDist(0, 0, np.ones(4, dtype=np.float32))))
    bad = encode(Envelope(SESSION, wd.DragonDist(0, 0, np.ones(4, dtype=np.float16))))
    assert decode(frames).message.probs.dtype == np.float32
    with pytest.raises(WireError, match="must be float32"):
        decode(bad)
    import json

    from edge_spec_ros.wire.codec import HEADER
    head = frames[0][:HEADER.size]
    with pytest.raises(WireError, match="does not fit"):
        decode([head + json.dumps({"arrays": [], "position": "x", "epoch": 0}).encode()])
    with pytest.raises(WireError, match="unknown fields") as info:
        decode([head + json.dumps({"arrays": [], "position": 0, "epoch": 0, "text": "doc"}).encode()])
    assert info.value.code == ErrorCode.MALFORMED


def test_no_message_has_a_field_for_documents_or_scores():
    """Structurally: no DRAGON message has a field that could carry document text, ids, KV or a
    retrieval-score vector; the only arrays are p^s_t (V,)."""
    for name, fields in wd.field_names().items():
        for f in fields:
            assert not any(word in f.lower() for word in wd.FORBIDDEN_FIELD_WORDS), (name, f)
    for cls in wd.DRAGON_TYPES.values():
        hints = typing.get_type_hints(cls)
        arrays = [f.name for f in dataclasses.fields(cls) if "ndarray" in str(hints[f.name])]
        assert arrays in ([], ["probs"]), (cls.__name__, arrays)


def test_check_open_refuses_bad_requests():
    ok = wd.DragonOpen(query="q", max_new_tokens=4, tokenizer_fingerprint=FINGERPRINT)
    wd.check_open(ok, vocab_size=10, max_new_tokens=8, tokenizer_fingerprint=FINGERPRINT)
    for bad, reason in ((dataclasses.replace(ok, query=" "), "query"),
                        (dataclasses.replace(ok, max_new_tokens=9), "max_new_tokens"),
                        (dataclasses.replace(ok, temperature=-1.0), "temperature"),
                        (dataclasses.replace(ok, stop_tokens=(10,)), "DragonOpen.stop_tokens"),
                        (dataclasses.replace(ok, aggregator="moon"), "aggregator"),
                        (dataclasses.replace(ok, payload="zip"), "payload"),
                        (dataclasses.replace(ok, policy="x"), "policy"),
                        (dataclasses.replace(ok, protocol=wd.DRAGON_PROTOCOL + 1), "DRAGON protocol"),
                        (dataclasses.replace(ok, top_k=99), "top_k"),
                        (dataclasses.replace(ok, max_queue=0), "max_queue"),
                        (dataclasses.replace(ok, down_delay_s=-1.0), "emulated downlink"),
                        (dataclasses.replace(ok, down_delay_s=60.0), "emulated downlink"),
                        (dataclasses.replace(ok, down_bandwidth_bps=float("nan")), "emulated downlink"),
                        (dataclasses.replace(ok, tokenizer_fingerprint=""), "DragonOpen.tokenizer_fingerprint must"),
                        (dataclasses.replace(ok, tokenizer_fingerprint=FINGERPRINT.upper()), "lowercase hex"),
                        (dataclasses.replace(ok, tokenizer_fingerprint=FINGERPRINT[:-1]), "32 lowercase hex"),
                        (dataclasses.replace(ok, tokenizer_fingerprint=FINGERPRINT + "0"), "32 lowercase hex"),
                        (dataclasses.replace(ok, tokenizer_fingerprint=FINGERPRINT[::-1]), "the tokenizers differ")):
        with pytest.raises(ValueError, match=reason):
            wd.check_open(bad, vocab_size=10, max_new_tokens=8, tokenizer_fingerprint=FINGERPRINT)


def test_the_fingerprint_came_with_protocol_2_and_an_old_open_gets_the_protocol_refusal():
    """A protocol-1 robot's open (no fingerprint field: encoded as it would encode it) decodes and is
    refused for its protocol, not for the missing fingerprint; a protocol-2 open must carry one."""
    assert wd.DRAGON_PROTOCOL == 2
    old = wd.DragonOpen(query="q", max_new_tokens=4, protocol=1)
    frames = encode(Envelope(SESSION, old))
    assert b"tokenizer_fingerprint" not in frames[0]
    decoded = decode(frames).message
    assert decoded.tokenizer_fingerprint == "" and decoded.protocol == 1
    with pytest.raises(ValueError, match=r"DRAGON protocol 1 \(this side speaks 2\)"):
        wd.check_open(decoded, vocab_size=10, max_new_tokens=8, tokenizer_fingerprint=FINGERPRINT)
    with pytest.raises(ValueError, match="DragonOpen.tokenizer_fingerprint must be 32 lowercase hex digits"):
        wd.check_open(dataclasses.replace(decoded, protocol=2), vocab_size=10, max_new_tokens=8,
                      tokenizer_fingerprint=FINGERPRINT)


def test_check_tokenizer_names_both_fingerprints():
    wd.check_tokenizer(FINGERPRINT, FINGERPRINT)
    other = "f" * 32
    with pytest.raises(ValueError, match=f"the tokenizers differ: the robot's tokenizer fingerprint {FINGERPRINT} "
                                         f"is not the cloud's {other}"):
        wd.check_tokenizer(FINGERPRINT, other)
    with pytest.raises(ValueError, match="DragonOpened.tokenizer_fingerprint must be"):
        wd.check_tokenizer(FINGERPRINT, "")
    with pytest.raises(ValueError, match="DragonOpen.tokenizer_fingerprint must be"):
        wd.check_tokenizer(None, FINGERPRINT)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", [wd.DragonOpen, wd.DragonOpened], ids=lambda c: c.__name__)
def test_the_fingerprint_field_is_type_checked_by_the_codec(cls):
    """tokenizer_fingerprint is a string on the wire: a number, list or null is MALFORMED naming it."""
    import json

    from edge_spec_ros.wire.codec import HEADER
    msg = next(m for m in SAMPLES if type(m) is cls)
    frames = encode(Envelope(SESSION, msg))
    for value in (12345, ["ab"], None, True):
        meta = json.loads(frames[0][HEADER.size:])
        meta["tokenizer_fingerprint"] = value
        with pytest.raises(WireError, match=f"{cls.__name__}.tokenizer_fingerprint: .* does not fit") as info:
            decode([frames[0][:HEADER.size] + json.dumps(meta).encode(), *frames[1:]])
        assert info.value.code == ErrorCode.MALFORMED


# --------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_equals_drdg_tw_token_for_token_over_the_wire(sampling):
    """48 cases per mode (V = 5, 20 tokens): random event orders, queue depth 1-4, payload full and
    on_demand, either first aggregator, fixed / eq. 8 / forced switching every 1-3 tokens: identical
    tokens and S^l, S^r on both sides; every rejection rolled the side's cache back to the committed
    prefix; the decision exercised rejections, stale drafts and switches."""
    v, n = 5, 20
    totals = {"rollbacks": 0, "dropped": 0, "switches": 0, "requests": 0}
    for case in range(48):
        fr, fc = table_side(case, v), table_side(case + 500, v)
        ref = drdg_tw(wire_precision(fr), wire_precision(fc), [], n, PositionalRNG(case), sampling)
        config = PeerConfig(n, sampling, seed=case, payload=("full", "on_demand")[case % 2],
                            first_aggregator=(ROBOT, CLOUD)[(case // 2) % 2], max_queue=1 + case % 4,
                            policy=("dragon", "robot", "cloud")[case % 3])
        placement = switch_every(1 + case % 3) if case % 4 == 3 else None
        kr, kc = KVCheck(fr), KVCheck(fc)
        robot, cloud = run_pair(kr, kc, v, config, seed=1000 + case, placement=placement)
        for peer in (robot, cloud):
            assert tuple(peer.tokens) == ref.tokens, case
            assert tuple(peer.accept_robot) == ref.accept_robot and tuple(peer.accept_cloud) == ref.accept_cloud
        assert robot.where == cloud.where
        for kv, flags in ((kr, ref.accept_robot), (kc, ref.accept_cloud)):
            assert kv.rollbacks == [t for t, ok in enumerate(flags) if not ok]
        totals["rollbacks"] += robot.side.rollbacks + cloud.side.rollbacks
        totals["dropped"] += robot.dropped + cloud.dropped
        totals["switches"] += sum(a != b for a, b in zip(robot.where, robot.where[1:]))
        totals["requests"] += robot.requests + cloud.requests
    assert totals["rollbacks"] > 200 and totals["dropped"] > 10 and totals["switches"] > 30, totals
    assert totals["requests"] > 20, totals


def test_partial_aggregate_equals_algorithm1_whenever_it_decides():
    """payload on_demand: whenever x^o, log h̃^o and the p^o values at hand suffice, the token is
    Algorithm 1's; otherwise it names what is missing (one value, then all of p^o only if needed)."""
    gen = np.random.default_rng(0)
    outcomes = {"at once": 0, "one value": 0, "full": 0}
    for trial in range(3000):
        v = 2 + trial % 5
        p_l = torch.from_numpy(gen.dirichlet(np.full(v, 0.5))).float().double()
        p_r = torch.from_numpy(gen.dirichlet(np.full(v, 0.5))).float().double()
        lh_l, lh_r = (float(h) for h in gen.normal(size=2))
        sampling = (GREEDY, SAMPLED)[trial % 2]
        rng = PositionalRNG(trial)
        x_l = int(p_l.argmax()) if sampling.greedy else int(gen.choice(v, p=(p_l / p_l.sum()).numpy()))
        x_r = int(p_r.argmax()) if sampling.greedy else int(gen.choice(v, p=(p_r / p_r.sum()).numpy()))
        full = speculative_aggregate(x_l, LocalAggregate(p_l, lh_l), x_r, LocalAggregate(p_r, lh_r), rng, 3,
                                     sampling).token
        for known in (ROBOT, CLOUD):
            p_known, p_other, x_other = (p_l, p_r, x_r) if known == ROBOT else (p_r, p_l, x_l)
            values = {x_other: float(p_other[x_other])}
            got, need = partial_aggregate(x_l, x_r, lh_l, lh_r, known, p_known, values, rng, 3, sampling)
            kind = "at once"
            if got is None and need != FULL:
                assert need not in values and not sampling.greedy
                values[need] = float(p_other[need])
                got, need = partial_aggregate(x_l, x_r, lh_l, lh_r, known, p_known, values, rng, 3, sampling)
                kind = "one value"
            if got is None:
                assert need == FULL
                kind = "full"
            else:
                assert got == full, trial
            outcomes[kind] += 1
    assert min(outcomes.values()) > 300, outcomes


def _two_token_counts(fr, fc, v, n, peer_class=DragonPeer, payload="full"):
    counts = np.zeros(v * v)
    for seed in range(n):
        config = PeerConfig(2, SAMPLED, seed=seed, payload=payload, first_aggregator=(ROBOT, CLOUD)[seed % 2],
                            max_queue=2, policy="robot" if seed % 2 == 0 else "cloud")
        robot, _ = run_pair(fr, fc, v, config, seed=seed, peer_class=peer_class)
        counts[robot.tokens[0] * v + robot.tokens[1]] += 1
    return counts


@pytest.mark.parametrize("payload", ["full", "on_demand"])
def test_sampled_pairs_follow_the_aggregated_target(payload):
    """(x_1, x_2) over 1500 seeds through encoded frames, V = 4, sides that disagree, either side
    aggregating: the decoder fits Π_t (η^l p^l + η^r p^r) (p > 1e-3)."""
    v, n = 4, 1500
    fr, fc = wire_precision(table_side(20, v)), wire_precision(table_side(21, v))
    expected = aggregated_two_token_joint(fr, fc, [], v) * n
    p_ok = chisquare(_two_token_counts(fr, fc, v, n, payload=payload), expected)[1]
    print(f"chi-square p ({payload}): {p_ok:.3g}")
    assert p_ok > 1e-3, p_ok


def test_negative_control_an_aggregator_using_stale_drafts_fails():
    """The same test with an aggregator that keeps the other side's drafts decoded before their
    rejection, same 1500 seeds: p < 1e-6."""
    v, n = 4, 1500
    fr, fc = wire_precision(table_side(20, v)), wire_precision(table_side(21, v))
    expected = aggregated_two_token_joint(fr, fc, [], v) * n
    p_bad = chisquare(_two_token_counts(fr, fc, v, n, StaleDraftsAggregator), expected)[1]
    print(f"chi-square p (stale drafts): {p_bad:.3g}")
    assert p_bad < 1e-6, p_bad


def test_on_demand_sends_fewer_bytes_for_the_same_tokens():
    """The same decisions with payload full and on_demand (V = 256, sides that mostly agree): identical
    tokens; on_demand's drafts carry no distribution and p^o travels only when Algorithm 1 needs it
    (greedy: when the drafts differ; sampled: for the selected draft's check or a residual)."""
    v, n = 256, 30
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(v, v, generator=gen, dtype=torch.float64) * 3.0
    near = base + 0.3 * torch.randn(v, v, generator=gen, dtype=torch.float64)
    fr = lambda ctx: LocalAggregate(torch.softmax(base[([1] + list(ctx))[-1]], -1), 0.0)  # noqa: E731
    fc = lambda ctx: LocalAggregate(torch.softmax(near[([1] + list(ctx))[-1]], -1), 0.5)  # noqa: E731
    for sampling in (GREEDY, SAMPLED):
        seen = {}
        for payload in ("full", "on_demand"):
            log = FrameLog()
            robot, _ = run_pair(fr, fc, v, PeerConfig(n, sampling, seed=1, payload=payload, policy="robot"), 5,
                                log=log)
            seen[payload] = (tuple(robot.tokens), log.bytes["up"] + log.bytes["down"], robot.requests)
        assert seen["full"][0] == seen["on_demand"][0]
        assert seen["on_demand"][2] < n // 2 and seen["full"][2] == 0
        assert seen["on_demand"][1] * 2 < seen["full"][1], seen


# --------------------------------------------------------------------------- protocol errors


def test_protocol_violations_are_refused():
    v = 4
    f = table_side(0, v)
    config = PeerConfig(3, GREEDY)
    robot = DragonPeer(ROBOT, f, config, v)  # aggregator
    cloud = DragonPeer(CLOUD, f, config, v)
    with pytest.raises(DragonProtocolError, match="sent to the aggregator"):
        robot.receive(wd.DragonTarget(0, 1, True, True))
    with pytest.raises(DragonProtocolError, match="position 3, expected 0"):
        robot.receive(wd.DragonDraft(3, 0, 1, 0.0, probs=np.full(v, 0.25, dtype=np.float32)))
    with pytest.raises(DragonProtocolError, match="shape"):
        robot.receive(wd.DragonDraft(0, 0, 1, 0.0, probs=np.full(v + 1, 0.2, dtype=np.float32)))
    with pytest.raises(DragonProtocolError, match="vocabulary"):
        robot.receive(wd.DragonDraft(0, 0, v, 0.0, probs=np.full(v, 0.25, dtype=np.float32)))
    with pytest.raises(DragonProtocolError, match="nobody asked"):
        robot.receive(wd.DragonDist(0, 0, np.full(v, 0.25, dtype=np.float32)))
    with pytest.raises(DragonProtocolError, match="expected 0 with this side's draft"):
        cloud.receive(wd.DragonTarget(0, 1, True, True))
    cloud.draft()
    wrong = 1 - cloud.side.queue[0].token if cloud.side.queue[0].token < 2 else 0
    with pytest.raises(DragonProtocolError, match="disagrees"):
        cloud.receive(wd.DragonTarget(0, wrong, True, True))
    for epoch in (5, -1):  # the cloud has had no rejection yet: no draft of another epoch can be honest
        with pytest.raises(DragonProtocolError, match=f"DragonDraft.epoch {epoch}|DragonDraft.epoch must be >= 0"):
            robot.receive(wd.DragonDraft(0, epoch, 1, 0.0, probs=np.full(v, 0.25, dtype=np.float32)))
    assert robot.dropped == 0 and not robot.remote


def test_wire_cost_bench_small_vocabulary():
    """dragon/bench/wire at V = 2000: a full draft carries 4 V bytes of p^s_t plus a small header,
    an on_demand draft and a target fit in 250 bytes; on_demand moves fewer bytes per token."""
    from edge_spec_ros.dragon.bench.wire import message_sizes, run

    v = 2000
    sizes = message_sizes(v)
    assert 4 * v < sizes["DragonDraft (full)"] < 4 * v + 300 and 4 * v < sizes["DragonDist"] < 4 * v + 300
    assert max(sizes["DragonDraft (on_demand)"], sizes["DragonTarget"], sizes["DragonDistRequest"]) < 250
    full, lean = run(v, "full", greedy=False, n=10), run(v, "on_demand", greedy=False, n=10)
    assert full.tokens == lean.tokens == 10
    assert lean.down_bytes_per_token < full.down_bytes_per_token and full.requests_per_token == 0


def test_a_peer_bounds_what_the_other_side_can_make_it_hold_or_send():
    """Drafts beyond max_queue ahead are refused (memory), and a distribution request is answered
    once, for the next position only (no V floats per small request, again and again)."""
    v = 4
    f = table_side(0, v)
    config = PeerConfig(10, SAMPLED, payload="on_demand", max_queue=2)
    robot = DragonPeer(ROBOT, f, config, v)  # aggregator
    for t in range(2):
        robot.receive(wd.DragonDraft(t, 0, 1, 0.0, p_token=0.5))
    with pytest.raises(DragonProtocolError, match="max_queue"):
        robot.receive(wd.DragonDraft(2, 0, 1, 0.0, p_token=0.5))
    cloud = DragonPeer(CLOUD, f, config, v)
    cloud.draft()
    cloud.draft()
    assert cloud.receive(wd.DragonDistRequest(0, 0, 1))[0].probs.shape == (1,)
    assert cloud.receive(wd.DragonDistRequest(0, 0))[0].probs.shape == (v,)
    for bad, reason in ((wd.DragonDistRequest(0, 0), "twice"),
                        (wd.DragonDistRequest(1, 0), "position 1, the next is 0")):
        with pytest.raises(DragonProtocolError, match=reason):
            cloud.receive(bad)
