from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ray_bench.errors import LedgerError, PlanError
from ray_bench.ledger import Ledger, accepted_rows
from ray_bench.models.attempt import AttemptSummary


def _start(ledger: Ledger, cell: str, now: float, arm: str = "a"):  # type: ignore[no-untyped-def]
    return ledger.start_attempt(cell_id=cell, task="t", task_checksum="c", arm=arm, rep=1, account="acc",
                                backend="local", epoch="sha256:e", preflight=False, now=now)


def _finish(ledger: Ledger, attempt_id: str, valid: bool, reward: float | None, now: float) -> None:
    ledger.finish_attempt(attempt_id, status="finished", valid=valid, reward=reward,
                          failure_class=None if valid else "stack", fingerprint=None if valid else "fp",
                          counts=False, cost_usd=0.5, summary=AttemptSummary(reward=reward), now=now)


def test_attempts_are_numbered_per_cell_and_never_reused(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    a1 = _start(ledger, "cell", 1.0)
    a2 = _start(ledger, "cell", 2.0)
    b1 = _start(ledger, "other", 3.0)
    assert (a1.attempt_id, a2.attempt_id, b1.attempt_id) == ("cell-a1", "cell-a2", "other-a1")


def test_a_terminal_record_is_written_once(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    a = _start(ledger, "cell", 1.0)
    _finish(ledger, a.attempt_id, True, 1.0, 2.0)
    with pytest.raises(LedgerError, match="already has a terminal record"):
        _finish(ledger, a.attempt_id, False, None, 3.0)


def test_started_without_result_is_not_terminal(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    _start(ledger, "cell", 1.0)
    (row,) = ledger.attempts()
    assert not row.terminal


def test_accepted_row_is_earliest_valid_not_best(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    first = _start(ledger, "cell", 1.0)
    second = _start(ledger, "cell", 2.0)
    third = _start(ledger, "cell", 3.0)
    _finish(ledger, first.attempt_id, False, None, 4.0)  # invalid
    _finish(ledger, third.attempt_id, True, 1.0, 5.0)  # best reward, started last
    _finish(ledger, second.attempt_id, True, 0.0, 6.0)  # earliest valid start
    rows = accepted_rows(ledger.attempts())
    assert rows["cell"].attempt_id == second.attempt_id
    assert rows["cell"].reward == 0.0


def test_cohort_excludes_other_epochs(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    a = _start(ledger, "cell", 1.0)
    _finish(ledger, a.attempt_id, True, 1.0, 2.0)
    assert accepted_rows(ledger.attempts(), cohort={"sha256:other"}) == {}
    assert "cell" in accepted_rows(ledger.attempts(), cohort={"sha256:e"})


def test_ledger_belongs_to_one_plan(tmp_path: Path) -> None:
    Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p").close()
    with pytest.raises(PlanError, match="belongs to plan sha256:p"):
        Ledger.create(tmp_path, run_id="r", plan_identity="sha256:q")


def test_readonly_ledger_refuses_writes(tmp_path: Path) -> None:
    Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p").close()
    ro = Ledger.open_readonly(tmp_path)
    with pytest.raises(sqlite3.OperationalError):
        ro.event("x")


def test_missing_ledger(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="has not started"):
        Ledger.open_readonly(tmp_path)


def test_events_append(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    ledger.event("drift", {"path": "x"})
    ledger.event("hypothesis", {"text": "y"})
    assert [e.kind for e in ledger.events()] == ["drift", "hypothesis"]
    assert ledger.events("hypothesis")[0].data == {"text": "y"}
