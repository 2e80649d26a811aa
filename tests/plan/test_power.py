"""The receipt's power: R's power.t.test figures, the spread of earlier paired rewards, and the
receipt's detectable delta with and without ``plan --history``."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.earlier_runs import earlier_rewards
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.evidence.gaps import find_gaps, write_selections
from ray_bench.models.plan import RewardSpread
from ray_bench.plan.arm_identity import run_arm_digests
from ray_bench.plan.history import paired_deltas, rewards_from_runs
from ray_bench.plan.power import (
    ASSUMED,
    POWER,
    Power,
    lineage_spread,
    mde,
    plan_power,
    reps_needed,
    reward_bounds,
    spread_of,
    t_n,
    t_power,
)
from ray_bench.plan.store import load_plan_file


def test_t_power_matches_r_power_t_test_examples() -> None:
    """R's ``?power.t.test`` examples (stats package): ``power.t.test(n = 20, delta = 1)`` gives
    power = 0.8689528 and ``power.t.test(power = .90, delta = 1)`` gives n = 22.02110 (two-sample,
    sd 1, sig.level 0.05, two-sided)."""
    assert t_power(20, 1.0, 1.0, samples=2) == pytest.approx(0.8689528, abs=1e-7)
    assert t_n(1.0, 1.0, power=0.9, samples=2) == pytest.approx(22.02110, abs=1e-5)


def test_paired_power_is_the_one_sample_test_of_the_deltas() -> None:
    """R: ``power.t.test(n = 20, delta = 1, type = "paired")`` is the one-sample test on 20
    deltas, ncp = sqrt(20) and df 19: more power than 20 per group in two samples."""
    paired = t_power(20, 1.0, 1.0)
    assert paired > t_power(20, 1.0, 1.0, samples=2)
    assert t_power(20, 1.0, 2.0) < paired  # a wider spread, less power
    assert t_power(1, 1.0, 1.0) != t_power(1, 1.0, 1.0)  # NaN: no degrees of freedom


def test_mde_is_the_delta_at_the_target_power() -> None:
    d = mde(8, 0.5)
    assert t_power(8, d, 0.5) == pytest.approx(POWER, abs=1e-9)
    assert mde(16, 0.5) < d  # more units, a smaller detectable delta
    assert mde(1, 0.5) != mde(1, 0.5)  # NaN: one task gives no test across tasks


def test_reps_needed_reaches_the_target_and_is_the_fewest() -> None:
    need = reps_needed(ASSUMED, 8, 0.2)
    assert need is not None and need > 1
    assert plan_power(ASSUMED, 8, need).mde <= 0.2 < plan_power(ASSUMED, 8, need - 1).mde
    # a spread between tasks no repetition can average away: the target needs more tasks
    wide = RewardSpread(within_var=0.5, between_var=0.25, tasks=8, pairs=16)
    assert reps_needed(wide, 8, 0.2) is None
    assert reps_needed(wide, 200, 0.2) is not None


def test_spread_separates_within_and_between_tasks() -> None:
    # task a's deltas all +1, task b's all -1: no spread within a task, all of it between
    s = spread_of([("a", 1.0), ("a", 1.0), ("b", -1.0), ("b", -1.0)])
    assert s is not None and s.within_var == 0.0 and s.between_var == pytest.approx(2.0)
    # same task means, spread within: nothing between
    s = spread_of([("a", 1.0), ("a", -1.0), ("b", 1.0), ("b", -1.0)])
    assert s is not None and s.within_var == pytest.approx(2.0) and s.between_var == 0.0
    assert spread_of([("a", 1.0)]) is None  # one pair: no spread to measure


def _power(receipt: str) -> str:
    return receipt.split("## Power", 1)[1].split("\n## ", 1)[0]


def test_receipt_power_without_and_with_history(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "sum-list", "fizzbuzz"], reps=2)
    runs = tmp_path / "runs"
    first = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="first")
    without = _power((first.run_root / "receipt.md").read_text())
    assert "basis: assumed" in without and "SD of a paired delta 0.707" in without
    # 3 tasks x 2 reps under the assumed spread would need 1.632 on 0/1 rewards: no such delta
    assert plan_power(ASSUMED, 3, 2).mde > 1.0
    assert "smallest detectable mean paired delta: not detectable with 6 pairs (3 tasks x 2 reps" in without
    # the variant solves every task the baseline fails: deltas +1 everywhere but one 0
    rewards = {(t, arm, rep): (1.0 if arm != "baseline" else 0.0) for t in ("hello-world", "sum-list", "fizzbuzz")
               for arm in ("baseline", "mcp") for rep in (1, 2)}
    rewards[("fizzbuzz", "baseline", 2)] = 1.0
    earlier_rewards(first.run_root, rewards)
    second = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="second",
                      rewards=rewards_from_runs([runs]))
    plan, _ = load_plan_file(second.run_root / "launch-plan.json")
    assert plan.reward_spread is not None and plan.reward_spread.pairs == 6 and plan.reward_spread.tasks == 3
    with_history = _power((second.run_root / "receipt.md").read_text())
    assert "basis: `plan --history`, 6 paired rows of 3 of these tasks" in with_history
    # a narrower spread than the assumed one: a delta the rewards allow is detected
    (line,) = [line for line in with_history.splitlines() if "smallest detectable" in line]
    assert 0 < float(line.split(": ")[1].split()[0]) <= 1.0 and "3 tasks x 2 reps" in line


def test_power_is_bounded_by_the_rewards_range() -> None:
    """A mean paired delta of 0/1 rewards lies within +-1: an MDE above 1 is no delta at all."""
    assert reward_bounds([]) == (0.0, 1.0) and reward_bounds([0.0, 1.0, 0.5]) == (0.0, 1.0)
    assert reward_bounds([0.0, 4.0]) == (0.0, 4.0) and reward_bounds([-1.0]) == (-1.0, 1.0)
    issue = plan_power(ASSUMED, 4, 1)  # issue 56's gap-fill receipt: 1.505 on 0/1 rewards
    assert issue.mde == pytest.approx(1.505, abs=5e-4) and not issue.detectable
    assert plan_power(ASSUMED, 4, 4).detectable  # the same four tasks over the lineage's four reps
    wide = ASSUMED.model_copy(update={"reward_high": 4.0})  # graded rewards up to 4: 1.505 is a delta
    assert plan_power(wide, 4, 1).detectable
    assert not Power(1, 3, 0.5, float("nan")).detectable  # one task: no test


def _gap_fill(tmp_path: Path, rewards: dict[tuple[str, str, int], float]) -> tuple[Path, Path, Path, Path]:
    """Issue 56's lineage: r1 ran 4 tasks x 2 arms x 3 reps; gaps to 4 reps writes one selection
    (rep 4 of every task in both arms). Returns the suite, accounts, r1 and the selection."""
    tasks = ["count-words", "fizzbuzz", "hello-world", "sum-list"]
    suite, accounts = make_suite(tmp_path / "s", tasks=tasks, reps=3)
    r1 = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1").run_root
    earlier_rewards(r1, rewards)
    (selection,) = write_selections(find_gaps(suite, [r1], 4), tmp_path / "sel" / "fill.json")
    return suite, accounts, r1, selection


def test_gap_fill_receipt_powers_the_lineage_not_the_one_rep_it_adds(tmp_path: Path) -> None:
    # the variant solves most of what the baseline fails, unevenly across repetitions
    rewards = {(t, arm, rep): float(arm == "mcp" and (rep + i) % 3 != 0)
               for i, t in enumerate(["count-words", "fizzbuzz", "hello-world", "sum-list"])
               for arm in ("baseline", "mcp") for rep in (1, 2, 3)}
    suite, accounts, r1, selection = _gap_fill(tmp_path, rewards)
    fill = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="fill", selection=selection,
                    rewards=rewards_from_runs([r1]))
    plan, _ = load_plan_file(fill.run_root / "launch-plan.json")
    assert {c.rep for c in plan.cells} == {4}  # the plan adds one repetition
    spread = plan.reward_spread
    assert spread is not None and spread.pairs == 12 and set(map(len, spread.paired_reps.values())) == {3}
    power = _power((fill.run_root / "receipt.md").read_text())
    assert "counted over the lineage: the 12 pairs earlier runs hold of these tasks with this plan's 1 reps per " \
           "task and arm: 16 pairs, at least 4 per task" in power
    figure = plan_power(spread, 4, 4)
    assert figure.detectable and f"smallest detectable mean paired delta: {figure.mde:.3f} with 4 tasks x 4 reps" \
        in power
    # without the lineage's rows (an explicit empty history: by default a gap-fill reads the runs
    # it tops up): the one repetition alone, which no delta of 0/1 rewards can pass
    alone = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="alone",
                     selection=selection, history_runs=[])
    text = _power((alone.run_root / "receipt.md").read_text())
    assert "not detectable with 4 pairs (4 tasks x 1 reps per arm)" in text and "1.505" not in text


def test_pairs_are_matched_across_the_lineages_runs(tmp_path: Path) -> None:
    """A one-arm top-up: r1 holds the baseline's rep 2 and the variant's rep 1 of each task, a later
    run the variant's rep 2. Pairing within one run found one pair per task; the lineage holds two."""
    tasks = ["hello-world", "sum-list"]
    suite, accounts = make_suite(tmp_path / "s", tasks=tasks, reps=2)
    runs = tmp_path / "runs"
    r1 = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="r1").run_root
    earlier_rewards(r1, {(t, arm, rep): float(arm == "mcp") for t in tasks for arm in ("baseline", "mcp")
                         for rep in (1, 2) if (arm, rep) != ("mcp", 2)})
    r2 = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="r2").run_root
    earlier_rewards(r2, {(t, "mcp", 2): 0.0 for t in tasks})
    rewards = rewards_from_runs([runs])
    plan, _ = load_plan_file(r1 / "launch-plan.json")
    digest = run_arm_digests(r1)
    pairs = paired_deltas(rewards, {t.checksum for t in plan.tasks}, digest["baseline"], [digest["mcp"]])
    assert sorted((rep, d) for _, rep, d in pairs) == [(1, 1.0), (1, 1.0), (2, 0.0), (2, 0.0)]
    spread = lineage_spread(pairs, rewards.values())
    assert spread is not None and spread.pairs == 4 and sorted(map(len, spread.paired_reps.values())) == [2, 2]
