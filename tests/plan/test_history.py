"""``plan --history``: durations of the same task content from earlier ledgers order the cells."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.earlier_runs import earlier_rows
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.errors import UserInputError
from ray_bench.ledger.store import LEDGER_FILE
from ray_bench.plan.history import durations_from_runs
from ray_bench.plan.store import load_plan_file


def test_history_from_earlier_ledgers_reaches_the_plan_and_the_receipt(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "sum-list", "fizzbuzz"])
    runs = tmp_path / "runs"
    first = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="first")
    # hello-world: baseline 100 s, mcp 300 s (mean per arm, then over arms: 200); a failed
    # attempt does not count; sum-list: 50 s; fizzbuzz never ran
    earlier_rows(first.run_root, {("hello-world", "baseline"): [100.0, None],
                                  ("hello-world", "mcp"): [200.0, 400.0],
                                  ("sum-list", "baseline"): [50.0]})
    history = durations_from_runs([runs])
    # one mean per (task content, arm configuration): the plan averages its own arms' means
    assert sorted(history.values()) == [50.0, 100.0, 300.0]
    second = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="second", history=history)
    plan, _ = load_plan_file(second.run_root / "launch-plan.json")
    expected = {t.id: t.expected_sec for t in plan.tasks}
    assert expected == {"hello-world": 200.0, "sum-list": 50.0, "fizzbuzz": None}
    receipt = (second.run_root / "receipt.md").read_text()
    arms = len(plan.arms)
    assert f"cells with history (expected duration from earlier runs): {2 * arms}" in receipt


def test_history_path_that_is_not_a_run_root(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="not a run root"):
        durations_from_runs([tmp_path / "nope"])


def test_history_with_an_unreadable_ledger_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / LEDGER_FILE).write_text("not a database, whatever its name says\n" * 4)
    with pytest.raises(UserInputError, match="cannot be read") as info:
        durations_from_runs([tmp_path])
    assert len(info.value.line().splitlines()) == 1 and "r1" in info.value.line()
