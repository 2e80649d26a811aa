from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support.older_ledgers import OLDER_THAN_CELLS

from ray_bench.errors import LedgerError, PlanError
from ray_bench.ledger import Ledger, accepted_rows, known_spend
from ray_bench.ledger.store import SCHEMA_VERSION
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


def test_an_unknown_cost_is_stored_as_unknown_with_what_admission_charged(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    a, b = _start(ledger, "cell", 1.0), _start(ledger, "other", 1.0)
    ledger.finish_attempt(a.attempt_id, status="finished", valid=True, reward=1.0, failure_class=None,
                          fingerprint=None, counts=True, cost_usd=None, charged_usd=0.6,
                          summary=AttemptSummary(reward=1.0), now=2.0)
    _finish(ledger, b.attempt_id, True, 1.0, 2.0)
    rows = {r.cell_id: r for r in ledger.attempts()}
    assert (rows["cell"].cost_usd, rows["cell"].charged_usd) == (None, 0.6)
    assert (rows["other"].cost_usd, rows["other"].charged_usd) == (0.5, None)  # a known cost is its own charge
    assert known_spend(rows.values()) == (0.5, 1)


#: A version-1 ledger's ``results`` table as it was: an unknown cost stored as 0.
_V1_RESULTS = """CREATE TABLE results (
    attempt_id TEXT PRIMARY KEY REFERENCES attempts (attempt_id), status TEXT NOT NULL,
    finished_at REAL NOT NULL, valid INTEGER NOT NULL, reward REAL, failure_class TEXT, fingerprint TEXT,
    counts INTEGER NOT NULL, cost_usd REAL NOT NULL DEFAULT 0, summary TEXT NOT NULL)"""


def _v1_ledger(root: Path) -> None:
    ledger = Ledger.create(root, run_id="r", plan_identity="sha256:p")
    for cell in ("known", "unknown", "cancelled", "silent"):
        _start(ledger, cell, 1.0)
    ledger.close()
    conn = sqlite3.connect(root / "ledger.sqlite")
    with conn:
        conn.execute("DROP TABLE results")
        conn.execute(_V1_RESULTS)
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema'")
        tokens_no_cost = AttemptSummary.parse({"usage": {"output_tokens": 40}}).dumps()
        conn.executemany("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?)", [
            ("known-a1", "finished", 2.0, 1, 1.0, None, None, 1, 0.25,
             AttemptSummary.parse({"usage": {"output_tokens": 40, "cost_usd": 0.25}}).dumps()),
            ("unknown-a1", "finished", 2.0, 1, 1.0, None, None, 1, 0.0, tokens_no_cost),
            ("cancelled-a1", "cancelled", 2.0, 0, None, None, None, 0, 0.0, tokens_no_cost),
            ("silent-a1", "finished", 2.0, 1, 1.0, None, None, 1, 0.0, AttemptSummary().dumps())])
        conn.execute("INSERT INTO events (ts, kind, data) VALUES (1.0, 'note', '{}')")
    conn.close()


def _costs(ledger: Ledger) -> dict[str, float | None]:
    return {r.cell_id: r.cost_usd for r in ledger.attempts()}


#: What a version-1 ledger's costs are: its 0 for tokens without a cost is unknown, a cancelled
#: attempt's too (it spent what its usage says: issue 25); one with no usage record (a command
#: agent's old contract) costs $0.
_V1_COSTS = {"known": 0.25, "unknown": None, "cancelled": None, "silent": 0.0}


def test_a_version_1_ledger_is_read_as_it_is_and_migrated_by_execute_keeping_its_rows(tmp_path: Path) -> None:
    _v1_ledger(tmp_path)
    with Ledger.reading(tmp_path) as readonly:
        assert _costs(readonly) == _V1_COSTS
        assert readonly.meta()["schema"] == "1"  # a reader changes nothing
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    assert ledger.meta()["schema"] == SCHEMA_VERSION
    assert _costs(ledger) == _V1_COSTS
    assert len(list(ledger.summaries())) == 4 and [e.kind for e in ledger.events()] == ["note"]
    ledger.finish_attempt(_start(ledger, "new", 3.0).attempt_id, status="finished", valid=True, reward=1.0,
                          failure_class=None, fingerprint=None, counts=True, cost_usd=None, charged_usd=0.6,
                          summary=AttemptSummary(), now=4.0)
    assert {r.cell_id: r.charged_usd for r in ledger.attempts()}["new"] == 0.6
    ledger.close()
    again = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")  # migrated once
    assert _costs(again) == {**_V1_COSTS, "new": None}
    again.close()


def test_a_ledger_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p").close()
    conn = sqlite3.connect(tmp_path / "ledger.sqlite")
    with conn:
        conn.execute("UPDATE meta SET value = '9' WHERE key = 'schema'")
    conn.close()
    with pytest.raises(LedgerError, match="schema '9' is newer"):
        Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")


def _v2_ledger(root: Path) -> None:
    """A version-2 ledger: ``attempts`` without ``kind`` and ``source_attempt``."""
    ledger = Ledger.create(root, run_id="r", plan_identity="sha256:p")
    _finish(ledger, _start(ledger, "cell", 1.0).attempt_id, True, 0.0, 2.0)
    ledger.close()
    conn = sqlite3.connect(root / "ledger.sqlite")
    with conn:
        conn.executescript(OLDER_THAN_CELLS)  # which came after version 3
        conn.execute("ALTER TABLE attempts DROP COLUMN kind")
        conn.execute("ALTER TABLE attempts DROP COLUMN source_attempt")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema'")
    conn.close()


def test_a_version_2_ledger_reads_as_runs_and_is_migrated_to_take_a_regrade(tmp_path: Path) -> None:
    _v2_ledger(tmp_path)
    with Ledger.reading(tmp_path) as readonly:
        assert [(r.attempt_id, r.kind, r.source_attempt, r.reward) for r in readonly.attempts()] == [
            ("cell-a1", "run", None, 0.0)]
        assert readonly.meta()["schema"] == "2"  # a reader changes nothing
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    assert ledger.meta()["schema"] == SCHEMA_VERSION == "3"
    regrade = ledger.start_attempt(cell_id="cell", task="t", task_checksum="c2", arm="a", rep=1, account="acc",
                                   backend="local", epoch="sha256:e", preflight=False, now=3.0, kind="regrade",
                                   source_attempt="cell-a1")
    _finish(ledger, regrade.attempt_id, True, 1.0, 4.0)
    attempts = ledger.attempts()
    assert [(r.attempt_id, r.kind, r.source_attempt) for r in attempts] == [
        ("cell-a1", "run", None), ("cell-a2", "regrade", "cell-a1")]
    (row,) = accepted_rows(attempts).values()  # the regrade re-scores the row; it is not one of its own
    assert (row.attempt_id, row.reward, row.task_checksum, row.regraded_by) == ("cell-a1", 1.0, "c2", "cell-a2")
    ledger.close()


def test_an_invalid_regrade_leaves_the_row_its_own_reward_and_the_latest_valid_one_wins(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    _finish(ledger, _start(ledger, "cell", 1.0).attempt_id, True, 0.0, 2.0)
    for now, valid, reward in ((3.0, True, 1.0), (5.0, False, None)):
        row = ledger.start_attempt(cell_id="cell", task="t", task_checksum="c2", arm="a", rep=1, account="acc",
                                   backend="local", epoch="sha256:e", preflight=False, now=now, kind="regrade",
                                   source_attempt="cell-a1")
        _finish(ledger, row.attempt_id, valid, reward, now + 1)
    (row,) = accepted_rows(ledger.attempts()).values()
    assert (row.reward, row.regraded_by) == (1.0, "cell-a2")
    ledger.close()


def test_numbers_an_older_ray_bench_stored_that_are_not_finite_are_refused_when_read(tmp_path: Path) -> None:
    """Issue 58: a ledger written before the fix holds `cost_usd` inf (the run stopped at
    "run spend $inf", and every resume would again) and -100 (credited), and a valid row with a
    reward of inf (counted as solved). Read now: costs unknown, that row no row."""
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:x")
    rows = [_start(ledger, f"c{i}", 10.0 + i) for i in range(3)]
    poisoned = [(float("inf"), '{"cost_usd": Infinity, "output_tokens": 3}', 1.0),
                (-100.0, '{"cost_usd": -100, "output_tokens": 3}', 0.0),
                (0.25, '{"cost_usd": 0.25, "output_tokens": 3}', float("inf"))]
    for row, (cost, usage, reward) in zip(rows, poisoned, strict=True):
        ledger.finish_attempt(row.attempt_id, status="finished", valid=True, reward=reward, failure_class=None,
                              fingerprint=None, counts=True, cost_usd=cost, now=20.0,
                              summary=AttemptSummary.loads(f'{{"attempt_id": "{row.attempt_id}", "usage": {usage}}}'))
    read = {a.cell_id: a for a in ledger.attempts()}
    ledger.close()
    assert (read["c0"].cost_usd, read["c1"].cost_usd, read["c2"].cost_usd) == (None, None, 0.25)
    assert read["c2"].reward is None and not read["c2"].valid
    assert set(accepted_rows(read.values())) == {read["c0"].cell_id, read["c1"].cell_id}
    assert known_spend(read.values()) == (0.25, 2)
