"""Draft sources only propose: prompt lookup, the lookup → model chain and a distilled drafter leave
the verifier's greedy output unchanged token for token; the agreement bench's replay counts rounds
exactly as the speculative decoder does."""

from __future__ import annotations

import pytest
import torch

from edge_spec_ros.bench.drafter_agreement import model_proposer, replay, replay_hits, teacher_forced_hits, token_macs
from edge_spec_ros.decoding.reference import DecodeConfig, autoregressive, speculative
from edge_spec_ros.edge.draft_sources import LookupDrafter, PromptLookup
from edge_spec_ros.models.distilled_drafter import (
    DistilledConfig,
    DistilledDrafter,
    PrunedHead,
    build_student,
    head_ids,
    load_student,
    save_student,
)
from edge_spec_ros.models.drafter import Drafter
from edge_spec_ros.models.tiny import truncated_copy
from edge_spec_ros.models.verifier import EarlyExitVerifier
from edge_spec_ros.spec.sampling import PositionalRNG, SamplingConfig
from edge_spec_ros.training.drafter_distill import (
    DistillConfig,
    Sample,
    batch_loss,
    distill,
    generate_samples,
    head_rows_of,
    load_samples,
    sample_loss,
    save_samples,
    split_stream,
    step_batch,
)

INSTRUCTIONS = ("find the silver bottle", "go to the red chair", "turn left at the door", "stop")


@pytest.fixture(scope="module")
def verifier(target_model):
    return EarlyExitVerifier(target_model)


@pytest.fixture(scope="module")
def drafter(target_model):
    return Drafter(truncated_copy(target_model, 2))


def test_prompt_lookup_proposes_what_followed_the_latest_longest_match():
    assert PromptLookup().min_ngram == 2  # one token alone is too often followed by something else
    lookup = PromptLookup(max_ngram=3, min_ngram=1)
    #          0  1  2  3  4  5  6  7  8  9 10
    context = [5, 6, 7, 8, 9, 1, 6, 7, 2, 5, 6]
    # suffix (5, 6) occurs at 0 only for n = 2 ... n = 3 (2, 5, 6) does not occur earlier
    assert lookup.propose(context, 3) == (7, 8, 9)
    assert lookup.propose(context, 1) == (7,)
    # n = 1: the most recent earlier 7 is at 7, followed by 2, 5, 6
    assert lookup.propose([3, 7, 4, 7, 2, 5, 6, 7], 3) == (2, 5, 6)
    assert lookup.propose([1, 2, 3], 4) == ()  # nothing repeats
    assert lookup.propose([4, 4], 4) == (4,)  # a continuation stops at the end of the context
    with pytest.raises(ValueError):
        PromptLookup(max_ngram=1, min_ngram=2)
    with pytest.raises(ValueError):
        lookup.propose([1, 1], 0)


@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_output_with_the_lookup_chain_is_the_verifiers_own(verifier, drafter, prompts, encoder, tokenizer,
                                                                  gamma):

    one = PromptLookup(min_ngram=1)  # the tiny model repeats single tokens: lookup fires often
    chain = LookupDrafter(drafter, one)
    lookup_only = LookupDrafter(None, one)
    accepted_from_lookup = 0
    for prompt in [*prompts, *(encoder.encode(text) for text in INSTRUCTIONS)]:
        config = DecodeConfig(max_new_tokens=60, gamma=gamma, stop_tokens=(tokenizer.eos_token_id,))
        target = autoregressive(verifier, prompt, config)
        for source in (chain, lookup_only):
            assert speculative(source, verifier, prompt, config).tokens == target.tokens
        accepted_from_lookup += replay(one.propose, prompt.input_ids.tolist(), target.tokens, gamma).accepted
    # both sources drafted, and some lookup drafts were right (the verdicts were not all rejections)
    assert chain.lookup_tokens > 0 and chain.model_tokens > 0 and accepted_from_lookup > 0


def test_a_stop_token_ends_a_lookup_draft_and_the_model_drafts_nothing_after_it(drafter, prompts):
    """The chain's lookup tokens are cut after a stop token (``Drafter.draft``'s ``stop``), and the model
    then drafts nothing more."""
    prompt = prompts[0]
    chain = LookupDrafter(drafter, PromptLookup(min_ngram=1))
    prefix = [5, 6, 7, 8, 9, 1, 6, 7, 2, 5, 6]  # the lookup proposes 7, 8, 9, 1, ...
    kv = drafter.start(prompt)
    whole = chain.draft(kv, prefix, 6, SamplingConfig(), PositionalRNG())
    assert whole.tokens[:4] == (7, 8, 9, 1)
    before = chain.model_tokens
    assert chain.draft(kv, prefix, 6, SamplingConfig(), PositionalRNG(), stop=(8,)).tokens == (7, 8)
    assert chain.model_tokens == before  # nothing drafted by the model after the stop token


def test_with_sampling_the_chain_defers_to_the_model(drafter, prompts):
    sampling = SamplingConfig(temperature=0.8)
    prompt = prompts[0]
    prefix = prompt.input_ids.tolist()
    chain = LookupDrafter(drafter)
    got = chain.draft(drafter.start(prompt), prefix, 3, sampling, PositionalRNG(5))
    want = drafter.draft(drafter.start(prompt), prefix, 3, sampling, PositionalRNG(5))
    assert got.tokens == want.tokens and torch.equal(got.q, want.q) and chain.lookup_tokens == 0


def test_replay_counts_rounds_and_acceptances_as_the_decoder_does(verifier, drafter, prompts, tokenizer):
    for prompt in prompts[:2]:
        config = DecodeConfig(max_new_tokens=32, gamma=3, stop_tokens=(tokenizer.eos_token_id,))
        answer = autoregressive(verifier, prompt, config).tokens
        spec = speculative(drafter, verifier, prompt, config)
        r = replay(model_proposer(drafter, prompt), prompt.input_ids.tolist(), answer, config.gamma)
        assert (r.rounds, r.committed) == (spec.stats.rounds, len(answer))
        assert r.drafted == spec.stats.drafted
        # the decoder's last round may accept draft tokens past the token budget; the replay stops there
        assert 1 <= r.accepted <= spec.stats.accepted <= r.accepted + config.gamma


def test_pruned_head_is_the_full_head_on_its_ids_and_minus_infinity_elsewhere(target_model):
    vocab = target_model.config.text_config.vocab_size
    ids = head_ids(vocab, 16, seen=[vocab - 1], always=(vocab - 2,))
    assert ids.numel() == 16 and {vocab - 1, vocab - 2} <= set(ids.tolist()) and 0 in ids.tolist()
    head = PrunedHead(target_model.lm_head.weight.detach()[ids], ids, vocab)
    h = torch.randn(3, target_model.config.text_config.hidden_size)
    full = target_model.lm_head(h)
    got = head(h)
    torch.testing.assert_close(got[:, ids], full[:, ids])
    outside = torch.ones(vocab, dtype=torch.bool)
    outside[ids] = False
    assert torch.isneginf(got[:, outside]).all()
    with pytest.raises(ValueError, match="2 distinct ids but the head has 1 rows.*--head-rows"):
        head_ids(vocab, 1, seen=[1, 2])


def test_a_distilled_drafter_trains_saves_loads_and_keeps_the_output_exact(target_model, verifier, prompts,
                                                                            tokenizer, tmp_path):
    prompt = prompts[1]
    config = DecodeConfig(max_new_tokens=24, gamma=4, stop_tokens=(tokenizer.eos_token_id,))
    answer = autoregressive(verifier, prompt, config).tokens
    ids = prompt.input_ids.tolist()
    # a text-only training sample from the verifier's answer (the vision part is not trained)
    text_prompt = [t for t in ids if t != target_model.config.image_token_id][-12:]
    samples = [Sample(text_prompt + answer, len(text_prompt))]
    assert split_stream(samples[0].ids, [text_prompt], 24, -1) == samples
    dconf = DistillConfig(layers=2, head_rows=64, steps=6, lr=1e-3, checkpoint_every=3)
    student = build_student(target_model, 2, head_ids(target_model.config.text_config.vocab_size, 64, answer))
    before = float(sample_loss(student, samples[0]).detach())
    trained, step = distill(target_model, samples, dconf, tmp_path, "tiny")
    assert step == 6 and float(sample_loss(trained, samples[0]).detach()) < before
    # resumable: a rerun with more steps continues from the checkpoint at step 6
    resumed, step = distill(target_model, samples, DistillConfig(**{**dconf.__dict__, "steps": 7}), tmp_path, "tiny")
    assert step == 7
    loaded, saved = load_student(target_model, tmp_path)
    assert saved == DistilledConfig("tiny", 2, 64, 7)
    with pytest.raises(ValueError, match="another configuration"):
        other = DistillConfig(**{**dconf.__dict__, "steps": 8, "batch_size": 2})
        distill(target_model, samples, other, tmp_path, "tiny")
    # batched, bf16 matmuls: trains too
    bconf = DistillConfig(**{**dconf.__dict__, "batch_size": 2, "autocast": "bfloat16"})
    batched, _ = distill(target_model, samples * 2, bconf, tmp_path / "bf16", "tiny")
    assert float(sample_loss(batched, samples[0])) < before
    h = torch.randn(1, 5, target_model.config.text_config.hidden_size)
    torch.testing.assert_close(loaded.lm_head(h), resumed.lm_head(h))
    distilled = DistilledDrafter(loaded, saved)
    assert 0 < distilled.token_macs() < token_macs(target_model)
    for source in (distilled, LookupDrafter(distilled)):
        assert speculative(source, verifier, prompt, config).tokens == answer
    save_student(loaded, saved, tmp_path / "copy")
    again, _ = load_student(target_model, tmp_path / "copy")
    torch.testing.assert_close(again.lm_head.weight, loaded.lm_head.weight)


def full_vocabulary_loss(student, sample: Sample) -> torch.Tensor:
    """The distillation loss from the student's own logits over the whole vocabulary (−∞ outside its
    head), one sample at a time: the reference ``batch_loss`` must equal."""
    logits = student(input_ids=torch.tensor([sample.ids])).logits[0]  # (T, V)
    first = sample.answer_start - 1
    logq = torch.log_softmax(logits[first:len(sample.ids) - 1].float(), -1)  # (n, V)
    if sample.top_ids is None:
        target = torch.tensor(sample.ids[first + 1:])
        said = torch.isin(target, student.lm_head.ids)
        return -logq[said].gather(-1, target[said, None]).sum(), int(said.sum())
    top, teacher = torch.tensor(sample.top_ids), torch.tensor(sample.top_logits)
    teacher = teacher.masked_fill(~torch.isin(top, student.lm_head.ids), float("-inf"))
    keep = torch.isfinite(teacher).any(-1)
    p = torch.softmax(teacher[keep], -1)
    return -(p * logq[keep].gather(-1, top[keep]).masked_fill(p == 0, 0.0)).sum(), int(keep.sum())


def test_the_batched_loss_is_the_full_vocabulary_loss_over_all_answer_positions(target_model):
    vocab = target_model.config.text_config.vocab_size
    g = torch.Generator().manual_seed(0)
    student = build_student(target_model, 2, head_ids(vocab, 48, list(range(100, 140))))
    soft = Sample(torch.randint(1, 100, (12,), generator=g).tolist(), 7,
                  torch.randint(90, 150, (5, 3), generator=g).tolist(), torch.randn(5, 3, generator=g).tolist())
    long_soft = Sample(torch.randint(1, 100, (20,), generator=g).tolist(), 9,
                       torch.randint(90, 150, (11, 3), generator=g).tolist(), torch.randn(11, 3, generator=g).tolist())
    hard = Sample([5, 6, 7, 110, 200, 120, 130], 3)  # 200: a token the head cannot say, left out
    batch = [soft, hard, long_soft]  # padded to the longest; k = 3 beside hard labels' k = 1
    with torch.no_grad():
        parts = [full_vocabulary_loss(student, s) for s in batch]
        expected = sum(loss for loss, _ in parts) / sum(n for _, n in parts)
        torch.testing.assert_close(batch_loss(student, batch, head_rows_of(student)), expected)
        torch.testing.assert_close(sample_loss(student, hard), parts[1][0] / parts[1][1])
        assert parts[1][1] == 3  # 110, 120, 130 (after 7, 110 and 200)


def test_training_steps_take_windows_of_similar_length_seeded_by_step():
    samples = [Sample([1] * n, 1) for n in (9, 2, 5, 7, 3, 8, 4, 6)]
    by_length = sorted(range(len(samples)), key=lambda i: len(samples[i].ids))
    batches = [step_batch(samples, by_length, 0, step, 3) for step in range(200)]
    assert batches == [step_batch(samples, by_length, 0, step, 3) for step in range(200)]  # a function of the step
    assert batches != [step_batch(samples, by_length, 1, step, 3) for step in range(200)]  # control: another seed
    for batch in batches:
        lengths = sorted(len(s.ids) for s in batch)
        assert lengths[-1] - lengths[0] == 2 or lengths in ([2, 8, 9], [2, 3, 9])  # neighbours, or the wrap
    seen = [sum(any(s is x for s in b) for b in batches) for x in samples]
    assert min(seen) > 40  # every sample is drawn (3 of 8 per step: 75 expected)


def test_distillation_data_are_the_verifiers_greedy_answers_with_its_top_k(target_model, verifier, encoder, tokenizer,
                                                                             tmp_path):

    prompts = [encoder.encode(text) for text in INSTRUCTIONS[:3]]
    ids = [p.input_ids.tolist() for p in prompts]
    stop = tokenizer.eos_token_id
    saved: list[int] = []
    first = generate_samples(target_model, ids[:2], stop, stop, 12, 4, batch_size=2,
                             checkpoint=lambda s: saved.append(len(s)))
    samples = generate_samples(target_model, ids, stop, stop, 12, 4, batch_size=2, done=first,
                               checkpoint=lambda s: saved.append(len(s)))
    assert saved == [2, 3] and samples[:2] == first  # a rerun continues after the samples it is given
    for prompt, s in zip(prompts, samples):
        answer = autoregressive(verifier, prompt, DecodeConfig(max_new_tokens=12, stop_tokens=(stop,))).tokens
        assert s.ids[:s.answer_start] == prompt.input_ids.tolist() and s.ids[s.answer_start:] == answer
        assert len(s.top_ids) == len(answer) and all(len(r) == 4 for r in s.top_ids)
        assert [r[0] for r in s.top_ids] == answer  # greedy: the top logit is the token chosen
    save_samples(samples, tmp_path / "data.json")
    assert load_samples(tmp_path / "data.json") == samples
    # the soft loss trains: it falls on the sample it steps on
    student = build_student(target_model, 2, head_ids(target_model.config.text_config.vocab_size, 64,
                                                      [t for r in samples[0].top_ids for t in r]))
    optimiser = torch.optim.SGD([student.lm_head.weight], lr=0.5)
    losses = []
    for _ in range(3):
        loss = sample_loss(student, samples[0])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]


def test_sampled_distillation_answers_are_seeded_resumable_and_carry_the_verifiers_targets(target_model, encoder,
                                                                                          tokenizer):
    ids = [encoder.encode(text).input_ids.tolist() for text in INSTRUCTIONS[:2]]
    prompts = [ids[0], ids[1], ids[1], ids[0]]  # one greedy answer each, then two sampled ones
    stop = tokenizer.eos_token_id
    sizes: list[int] = []
    samples = generate_samples(target_model, prompts, stop, stop, 10, 4, batch_size=3, sampled_from=2, seed=5,
                               checkpoint=lambda s: sizes.append(len(s)))
    assert sizes == [2, 4]  # no batch straddles the greedy / sampled boundary
    resumed = generate_samples(target_model, prompts, stop, stop, 10, 4, batch_size=3, done=samples[:2],
                               sampled_from=2, seed=5)
    assert resumed == samples  # seeded by (seed, batch start): a resumed run draws the same answers
    other = generate_samples(target_model, prompts, stop, stop, 10, 4, batch_size=3, done=samples[:2],
                             sampled_from=2, seed=6)
    assert [s.ids for s in other[2:]] != [s.ids for s in samples[2:]]  # control: another seed, other answers
    assert any(s.ids[s.answer_start:] != [r[0] for r in s.top_ids] for s in samples[2:])  # not the argmax path
    for s in samples[2:]:  # each target is the verifier's own top-k at the sampled context
        with torch.no_grad():
            logits = target_model(input_ids=torch.tensor([s.ids])).logits[0, s.answer_start - 1:-1]
        assert [r[0] for r in s.top_ids] == logits.argmax(-1).tolist()


def test_the_teacher_forced_replay_equals_drafting_round_by_round(verifier, drafter, prompts, encoder, tokenizer):

    accepted = 0
    for prompt in [*prompts[:2], *(encoder.encode(text) for text in INSTRUCTIONS[1:3])]:
        config = DecodeConfig(max_new_tokens=48, gamma=4, stop_tokens=(tokenizer.eos_token_id,))
        answer = autoregressive(verifier, prompt, config).tokens
        ids = prompt.input_ids.tolist()
        hits = teacher_forced_hits(drafter, prompt, answer)
        for lookup in (None, PromptLookup()):
            source = drafter if lookup is None else LookupDrafter(drafter, lookup)
            real = replay(model_proposer(source, prompt), ids, answer, 4)
            if lookup is not None:
                real.lookup = source.lookup_tokens
            fast = replay_hits(ids, answer, 4, hits, lookup)
            assert (fast.rounds, fast.committed, fast.drafted, fast.accepted, fast.lookup) == \
                (real.rounds, real.committed, real.drafted, real.accepted, real.lookup)
            accepted += fast.accepted
        only = replay_hits(ids, answer, 4, None, PromptLookup())
        assert (only.rounds, only.accepted) == (lambda r: (r.rounds, r.accepted))(
            replay(PromptLookup().propose, ids, answer, 4))
    assert accepted > 0
