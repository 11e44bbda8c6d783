"""Which early exits earn their compute: ExitPlanner and its chain selection (spec.exits)."""

from __future__ import annotations

import math

import pytest

from edge_spec_ros.spec.exits import ExitPlanner, best_chain

FINAL = (7, 8)
WRONG = (7, 9)


def run_rounds(planner: ExitPlanner, rounds: int, right: dict[int, bool], head_s: float, t_q_s: float) -> list:
    """``rounds`` rounds in which exit l matches the final verdict iff right[l]; returns the plans."""
    plans = []
    for _ in range(rounds):
        plan = planner.plan()
        plans.append(plan)
        outputs = {l: FINAL if right[l] else WRONG for l in plan}
        planner.observe(outputs, FINAL, {l: head_s for l in plan}, t_q_s)
    return plans


def test_chain_value_by_hand():
    # exits (layer, r, h); saving of a hit = 1.0 everywhere
    exits = [(1, 0.5, 0.1), (2, 0.5, 0.1), (3, 0.9, 0.1)]
    # {1}: 0.5 - 0.1 = 0.4; {1, 3}: 0.5 + 0.4 - 0.2 = 0.7; {3}: 0.9 - 0.1 = 0.8 (best); {1, 2, 3}: 0.6
    assert best_chain(exits, lambda l: 1.0) == [3]
    # an earlier hit is worth more: {1, 3} = 0.5·1 + 0.4·0.5 − 0.2 = 0.5 > {1} = 0.4 > {3} = 0.9·0.5 − 0.1
    assert best_chain(exits, lambda l: 1.0 if l == 1 else 0.5) == [1, 3]
    assert best_chain(exits, lambda l: 1.0 if l == 1 else 0.2) == [1]  # {1, 3}: 0.5 + 0.08 − 0.2 = 0.38
    assert best_chain(exits, lambda l: 0.05) == []  # no exit pays: plain SD
    assert best_chain([], lambda l: 1.0) == []


def test_duplicates_of_an_earlier_exit_are_switched_off():
    planner = ExitPlanner([1, 2, 3, 4], num_layers=5, warmup_rounds=2, probe_every=10)
    plans = run_rounds(planner, 30, {1: True, 2: True, 3: True, 4: True}, head_s=0.001, t_q_s=0.05)
    assert plans[0] == {1, 2, 3, 4}  # warm-up: every exit
    learned = [p for i, p in enumerate(plans, 1) if i > 2 and i % 10]
    assert learned and all(p == {1} for p in learned)  # exit 1 already gives every hit; the rest only cost
    assert all(plans[i - 1] == {1, 2, 3, 4} for i in (10, 20, 30))  # probes keep the others measured
    assert planner.plan(probe=True) == {1}  # a decision's first round right after a probe plans like the others
    assert ExitPlanner([1], num_layers=2).probe_every == 0  # by default only first rounds probe


def test_exits_that_cost_more_than_they_save_are_off():
    planner = ExitPlanner([1, 2, 3], num_layers=4, warmup_rounds=1, probe_every=1000)
    plans = run_rounds(planner, 20, {1: False, 2: False, 3: True}, head_s=0.030, t_q_s=0.100)
    # exit 3 saves at most (1 − 3/4)·100 ms = 25 ms on a hit but costs 30 ms: nothing pays
    assert plans[-1] == frozenset()
    cheap = ExitPlanner([1, 2, 3], num_layers=4, warmup_rounds=1, probe_every=1000)
    plans = run_rounds(cheap, 20, {1: False, 2: False, 3: True}, head_s=0.001, t_q_s=0.100)
    assert plans[-1] == {3}


def test_the_robots_measured_saving_caps_the_head_start():
    planner = ExitPlanner([1], num_layers=10, warmup_rounds=1, probe_every=1000)
    run_rounds(planner, 5, {1: True}, head_s=0.010, t_q_s=0.600)
    assert planner.hit_saving_s == math.inf
    assert planner.plan() == {1}  # a hit could save up to 0.9 × 600 ms
    planner.observe_gap(0.250, after_right_exit=True)
    planner.observe_gap(0.255, after_right_exit=False)  # the robot gains 5 ms from a hit
    assert planner.hit_saving_s == pytest.approx(0.005)
    assert planner.plan() == frozenset()  # 5 ms saved < 10 ms of head
    planner.observe_gap(-1.0, True)  # ignored
    planner.observe_gap(math.nan, False)
    assert planner.hit_saving_s == pytest.approx(0.005)


def test_summary_and_validation():
    planner = ExitPlanner([2, 1], num_layers=3, warmup_rounds=3)
    assert planner.layers == (1, 2)
    run_rounds(planner, 3, {1: True, 2: True}, 0.001, 0.01)
    assert "1: 100% computed" in planner.summary()
    assert [s.rounds for s in planner.stats()] == [3, 3]
    with pytest.raises(ValueError):
        ExitPlanner([3], num_layers=3)
    with pytest.raises(ValueError):
        ExitPlanner([1], num_layers=3, probe_every=-1)


def test_a_chain_that_slows_the_cycle_is_turned_off_and_tried_again_now_and_then():
    from edge_spec_ros.spec.exits import EXPLORE_EVERY, MIN_ARM_ROUNDS

    planner = ExitPlanner([1, 2], num_layers=3, warmup_rounds=0)
    run_rounds(planner, 2, {1: True, 2: True}, head_s=0.0001, t_q_s=0.05)  # every exit measured once
    arms = []
    for _ in range(4 * EXPLORE_EVERY):
        plan = planner.plan()
        arms.append(bool(plan))
        # the robot pays more with exits on (its threads take the cores): 30 ms cycles against 20 ms
        planner.observe_cycle(0.030 if plan else 0.020, with_chain=bool(plan))
    assert arms[:2 * MIN_ARM_ROUNDS].count(True) == MIN_ARM_ROUNDS  # both arms measured first
    later = arms[2 * MIN_ARM_ROUNDS:]
    assert 0 < later.count(True) <= len(later) // EXPLORE_EVERY + 1  # the chain only when exploring
    assert planner.cycle_s(True) == pytest.approx(0.030) and planner.cycle_s(False) == pytest.approx(0.020)
    # conditions change: now the chain makes cycles shorter, and the exploring rounds notice it
    for _ in range(8 * EXPLORE_EVERY):
        plan = planner.plan()
        planner.observe_cycle(0.010 if plan else 0.020, with_chain=bool(plan))
    chains = sum(bool(planner.plan()) for _ in range(2 * EXPLORE_EVERY))
    assert chains >= 2 * EXPLORE_EVERY - 2  # the chain now, no exit only when exploring
    planner.observe_cycle(math.inf, True)  # ignored
    assert planner.cycle_s(True) < 0.02


def test_a_far_slower_arm_is_tried_only_within_its_budget():
    from edge_spec_ros.spec.exits import EXPLORE_BUDGET, EXPLORE_EVERY, MIN_ARM_ROUNDS

    planner = ExitPlanner([1, 2], num_layers=3, warmup_rounds=0)
    run_rounds(planner, 2, {1: True, 2: True}, head_s=0.0001, t_q_s=0.05)
    arms = []
    for _ in range(2 * MIN_ARM_ROUNDS + 400):
        plan = planner.plan()
        arms.append(bool(plan))
        # exits make the cycle almost three times longer (rounds of a few ms, threads on shared cores)
        planner.observe_cycle(0.0175 if plan else 0.0063, with_chain=bool(plan))
    tries = [i for i, arm in enumerate(arms[2 * MIN_ARM_ROUNDS:]) if arm]
    spacing = math.ceil((0.0175 - 0.0063) / (EXPLORE_BUDGET * 0.0063))  # rounds whose budget pays for a try
    assert spacing > EXPLORE_EVERY
    assert tries == list(range(spacing - 1, 400, spacing))  # each try's loss within the budget of the rounds before


def test_a_probe_whose_rounds_slow_the_cycle_waits_for_its_budget():
    from edge_spec_ros.spec.exits import MIN_ARM_ROUNDS, PROBE_BUDGET

    planner = ExitPlanner([1, 2], num_layers=3, warmup_rounds=0)
    run_rounds(planner, 2, {1: True, 2: True}, head_s=1e-6, t_q_s=0.005)  # heads cost nearly nothing
    for _ in range(MIN_ARM_ROUNDS):
        planner.observe_cycle(0.0175, with_chain=True)
        planner.observe_cycle(0.0063, with_chain=False)
    assert planner.plan(probe=True) == {1, 2}  # by its heads alone a probe is cheap
    planner.observe_cycle(0.0175, with_chain=None)  # but a probe round's cycle is 11 ms longer than no exit's
    assert planner.cycle_s(None) == pytest.approx(0.0175)
    spacing = math.ceil((0.0175 - 0.0063) / (PROBE_BUDGET * (0.005 - 2e-6)))  # T_q without the heads
    firsts = [planner.plan(probe=True) for _ in range(spacing + 1)]
    assert [i for i, p in enumerate(firsts) if p == {1, 2}] == [spacing]


def test_a_decisions_first_round_computes_every_exit_while_probes_are_cheap():
    from edge_spec_ros.spec.exits import MIN_ARM_ROUNDS

    planner = ExitPlanner([1, 2], num_layers=3, warmup_rounds=0)
    run_rounds(planner, 2, {1: True, 2: True}, head_s=0.0001, t_q_s=0.05)
    for _ in range(MIN_ARM_ROUNDS):
        planner.observe_cycle(0.030, with_chain=True)
        planner.observe_cycle(0.020, with_chain=False)
    assert planner.plan() == frozenset()  # no exit is faster
    assert planner.plan(probe=True) == {1, 2}  # two decisions' first rounds stream the same early results


def test_the_joint_choice_keeps_an_exit_right_where_an_earlier_one_is_wrong():
    from edge_spec_ros.spec.exits import best_set

    # exit 1 right in 3 rounds of 4, exit 3 right in the 4th only (not nested: r_3 < r_1)
    history = [frozenset({1}), frozenset({1}), frozenset({1}), frozenset({3})]
    assert best_set(history, {1: 0.01, 2: 0.01, 3: 0.01}, lambda l: 1.0, prior_rounds=0) == [1, 3]
    assert best_chain([(1, 0.75, 0.01), (2, 0.0, 0.01), (3, 0.25, 0.01)], lambda l: 1.0) == [1]  # nested model
    assert best_set(history, {1: 0.5, 3: 0.5}, lambda l: 1.0, prior_rounds=0) == [1]  # exit 3 earns 0.25 for 0.5
    assert best_set(history, {1: 1.0, 3: 1.0}, lambda l: 1.0, prior_rounds=0) == []
    # with the prior's two rounds without a hit, the four rounds count as six: exit 1 earns 0.5, exit 3 1/6
    assert best_set(history, {1: 0.01, 2: 0.01, 3: 0.01}, lambda l: 1.0) == [1, 3]
    assert best_set(history, {1: 0.3, 3: 0.3}, lambda l: 1.0) == [1]
    assert best_set(history, {1: 0.6, 3: 0.6}, lambda l: 1.0) == []  # 0.6 > 0.5: one probe-sized history
    assert best_set([frozenset({1})], {1: 0.25}, lambda l: 0.5) == []  # right once: 0.5 / 3 < 0.25
    assert best_set([frozenset({1})] * 20, {1: 0.25}, lambda l: 0.5) == [1]  # right 20 times in 20
    planner = ExitPlanner([1, 2, 3], num_layers=4, warmup_rounds=4)
    for right in ({1: True, 2: False, 3: False},) * 3 + ({1: False, 2: False, 3: True},):
        run_rounds(planner, 1, right, head_s=0.0, t_q_s=1.0)
    assert planner.plan() == {1, 3}


def test_a_decisions_first_round_probes_only_within_its_budget():
    from edge_spec_ros.spec.exits import PROBE_BUDGET

    layers = [3, 6, 9, 12, 15, 18, 21, 24, 27]
    every = frozenset(layers)
    planner = ExitPlanner(layers, num_layers=30, warmup_rounds=1)
    # nine 25 ms heads beside a 120 ms verification (SmolLM2-135M on a CPU), no exit ever right
    run_rounds(planner, 1, dict.fromkeys(layers, False), head_s=0.025, t_q_s=0.120 + 9 * 0.025)
    spacing = math.ceil(9 * 0.025 / (PROBE_BUDGET * 0.120))  # rounds of verification a probe's heads may take
    assert spacing > 50
    assert not planner.probe_due
    # decisions of one round each: their first rounds plan like the others (no exit pays) until a probe is due
    firsts = [planner.plan(probe=True) for _ in range(2 * spacing + 2)]
    assert [i for i, p in enumerate(firsts) if p == every] == [spacing, 2 * spacing + 1]
    assert all(p == frozenset() for p in firsts if p != every)
    # the probes' heads stay within the budget of the verification time between them
    assert 9 * 0.025 <= PROBE_BUDGET * spacing * 0.120 + 1e-12

    # heads that cost little beside the verification (a GPU; an emulated T_q hides them): every first round
    cheap = ExitPlanner(layers, num_layers=30, warmup_rounds=1)
    run_rounds(cheap, 1, dict.fromkeys(layers, False), head_s=0.00001, t_q_s=0.120)
    for _ in range(5):  # decisions of two rounds: the second plans (no exit pays), the next first round probes
        assert cheap.plan() == frozenset()
        assert cheap.plan(probe=True) == every
    hidden = ExitPlanner(layers, num_layers=30, warmup_rounds=1)
    run_rounds(hidden, 1, dict.fromkeys(layers, False), head_s=0.0, t_q_s=0.600)
    assert hidden.plan(probe=True) == every and hidden.plan(probe=True) == every


def test_in_a_pipelined_session_only_exits_right_after_a_rejection_earn():
    """PicoSpec's robot has the next block after a fully accepted one, so an exit that agrees with such a
    verdict earns nothing there: exit 1 (right only in covered rounds) is dropped, exit 3 (right in the
    rejected rounds, where the pre-draft is used) kept. Without ``covered`` exit 1 alone would do."""
    def rounds(covered_flags: bool) -> ExitPlanner:
        planner = ExitPlanner([1, 2, 3], num_layers=4, warmup_rounds=8)
        for i in range(8):
            rejected = i % 4 == 3  # a rejection in one round of four
            outputs = {1: WRONG if rejected else FINAL, 2: WRONG, 3: FINAL}
            assert planner.plan() == {1, 2, 3}
            used = planner.observe(outputs, FINAL, {1: 0.001, 2: 0.001, 3: 0.001}, 1.0,
                                   covered=covered_flags and not rejected)
            assert used == (rejected or not covered_flags)
        return planner

    assert rounds(covered_flags=True).plan() == {3}
    assert rounds(covered_flags=False).plan() == {1, 3}
