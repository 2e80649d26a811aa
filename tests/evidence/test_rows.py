"""Epochs, cohorts, accepted rows and denominators across run roots (ledgers written directly)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.errors import UserInputError
from ray_bench.evidence.rows import build_evidence, declare_cohort, default_cohort, load_epochs
from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.store import load_plan_file


def _record(root: Path, outcomes: list[tuple[str, str, int, float, float | None]]) -> str:
    """(task, arm, rep, started_at, reward or None for an invalid attempt) -> the epoch."""
    plan, identity = load_plan_file(root / "launch-plan.json")
    cells = {(c.task, c.arm, c.rep): c for c in plan.cells}
    sums = {t.id: t.checksum for t in plan.tasks}
    ledger = Ledger.create(root, run_id=plan.run_id, plan_identity=identity)
    for task, arm, rep, t, reward in outcomes:
        row = ledger.start_attempt(
            cell_id=cells[(task, arm, rep)].id,
            task=task,
            task_checksum=sums[task],
            arm=arm,
            rep=rep,
            account="a",
            backend="local",
            epoch=identity,
            preflight=False,
            now=t,
        )
        ledger.finish_attempt(
            row.attempt_id,
            status="finished",
            valid=reward is not None,
            reward=reward,
            failure_class=None if reward is not None else "task",
            fingerprint=None if reward is not None else "fp",
            counts=True,
            cost_usd=0.0,
            summary=AttemptSummary(),
            now=t + 1,
        )
    ledger.close()
    return identity


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, str, str]:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "sum-list"], reps=1)
    runs = tmp_path / "runs"
    a = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="a").run_root
    b = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="b").run_root
    ea = _record(
        a,
        [
            ("hello-world", "baseline", 1, 50.0, 0.0),
            ("hello-world", "mcp", 1, 10.0, None),
            ("sum-list", "baseline", 1, 11.0, 1.0),
        ],
    )
    eb = _record(
        b, [("hello-world", "baseline", 1, 20.0, 1.0), ("hello-world", "mcp", 1, 30.0, 1.0)]
    )
    return runs, ea, eb


def test_same_cell_ids_across_run_roots_form_one_cohort(two_runs: tuple[Path, str, str]) -> None:
    runs, ea, eb = two_runs
    epochs = load_epochs([runs])
    assert {e.run_id for e in epochs} == {"a", "b"}
    evidence = build_evidence(epochs)
    assert evidence.cohort.epochs == {ea, eb}
    assert len(evidence.planned) == 4  # both plans name the same four cells
    by_key = {(r.task, r.arm): r for r in evidence.rows.values()}
    # the earliest *started* valid attempt wins across run roots:
    # b's reward 1 (t=20), not a's 0 (t=50)
    assert by_key[("hello-world", "baseline")].epoch == eb
    assert by_key[("hello-world", "baseline")].reward == 1.0
    assert by_key[("hello-world", "mcp")].epoch == eb  # a's attempt was invalid
    assert ("sum-list", "mcp") not in by_key
    d = {x.arm: x for x in evidence.denominators()}
    assert (d["baseline"].planned, d["baseline"].valid, d["baseline"].solved) == (2, 2, 2)
    assert (d["mcp"].planned, d["mcp"].valid, d["mcp"].missing) == (2, 1, 1)
    assert d["mcp"].strict_rate == pytest.approx(0.5) and d["mcp"].headline_rate == pytest.approx(
        1.0
    )
    assert [c.task for c in evidence.missing()] == ["sum-list"]


def test_a_declared_cohort_excludes_other_epochs(two_runs: tuple[Path, str, str]) -> None:
    runs, ea, _ = two_runs
    epochs = load_epochs([runs])
    evidence = build_evidence(epochs, declare_cohort("only-a", [ea]))
    assert {r.epoch for r in evidence.rows.values()} == {ea}
    by_key = {(r.task, r.arm): r for r in evidence.rows.values()}
    assert by_key[("hello-world", "baseline")].reward == 0.0
    assert len(evidence.epochs) == 2  # still listed


def test_edited_task_is_a_new_cell_and_other_suites_are_other_cohorts(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], reps=1)
    runs = tmp_path / "runs"
    old = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="old").run_root
    _record(old, [("hello-world", "baseline", 1, 1.0, 1.0)])
    test_sh = tmp_path / "s" / "tasks" / "hello-world" / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text() + "# stricter\n")
    plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id="new")
    evidence = build_evidence(load_epochs([runs]))
    assert len(evidence.planned) == 4  # two arms x old and new content: never merged
    assert len(evidence.rows) == 1
    other, other_acc = make_suite(tmp_path / "o", tasks=["hello-world"], name="other")
    plan_run(suite=other, accounts=other_acc, runs_dir=runs, run_id="x")
    epochs = load_epochs([runs])
    with pytest.raises(UserInputError, match="several suites"):
        default_cohort(epochs)
    assert len(default_cohort(epochs, "t").epochs) == 2
