"""``status`` read from the plan's brief and the ledger's ``cells`` table (issue 57) says what the
whole read (every attempt row, the whole plan) says, in every state; an older run root (no
brief, no table) is read whole, and a writer gives its ledger the table."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from support.older_ledgers import OLDER_THAN_CELLS
from support.suites import make_suite

from ray_bench.api import pause_run, plan_run
from ray_bench.errors import UserInputError
from ray_bench.ledger.store import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.brief import PlanBrief, read_brief
from ray_bench.plan.store import PLAN_FILE, load_plan_file
from ray_bench.runroot import RunPaths
from ray_bench.status.read import RunStatus, read_status
from ray_bench.status.text import status_lines

LOWER = {"input_tokens": 300, "output_tokens": 2, "cost_usd": 0.0009, "cost_basis": "estimated",
         "source": "stream", "unfinished_messages": 2, "bound": "lower_bound"}
EXACT = {"input_tokens": 300, "output_tokens": 20, "cost_usd": 0.0012, "cost_basis": "estimated",
         "source": "session", "unfinished_messages": 0, "bound": "exact"}


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    suite, accounts = make_suite(tmp_path / "s", reps=2)  # 32 cells
    return plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1").run_root


def _history(run_root: Path, t0: float) -> Ledger:
    """A session with every kind of cell: valid at once, valid after a retry, failed by counted
    failures, failed by world failures (the absolute cap), superseded by a stale end and running
    again, cancelled of unknown cost, an infinite reward (no row), a cut usage (a lower bound),
    two valid rows (the first started is accepted), an unknown cost, world failures under the cap
    (pending), and cells never tried."""
    plan, identity = load_plan_file(run_root / PLAN_FILE)
    ledger = Ledger.create(run_root, run_id=plan.run_id, plan_identity=identity)
    ledger.event("run_started", {"identity": identity, "deadline": None}, now=t0)
    clock = iter(range(1, 1000))

    def attempt(i: int, *, end: str | None = "finished", valid: bool = False, reward: float | None = None,
                cls: str | None = None, counts: bool = True, cost: float | None = 0.01,
                usage: dict[str, Any] | None = None, summary: AttemptSummary | None = None) -> None:
        cell = plan.cells[i]
        row = ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum="x", arm=cell.arm, rep=cell.rep,
                                   account="acct-a", backend="local", epoch=identity, preflight=False,
                                   now=t0 + next(clock))
        if end is None:
            return
        made = summary or (AttemptSummary.parse({"usage": usage}) if usage else AttemptSummary())
        ledger.finish_attempt(row.attempt_id, status=end, valid=valid, reward=reward, failure_class=cls,
                              fingerprint=cls, counts=counts, cost_usd=cost, summary=made, now=t0 + next(clock))

    attempt(0, valid=True, reward=1.0)
    attempt(1, cls="agent_error")
    attempt(1, valid=True, reward=0.0)
    for _ in range(plan.max_attempts):
        attempt(2, cls="verifier_error")
    for _ in range(2 * plan.max_attempts):
        attempt(3, cls="provider", counts=False)
    attempt(4, end="stale", cls="executor", counts=False, cost=None)
    attempt(4, end=None)  # running again
    attempt(5, end="cancelled", cost=0.0, summary=AttemptSummary(cancelled=True))  # unknown: re-read
    attempt(6, valid=True, reward=float("inf"), cls="verifier_error")
    attempt(7, valid=True, reward=1.0, cost=0.0009, usage=LOWER)
    attempt(8, valid=True, reward=0.0, usage=EXACT, cost=0.0012)
    attempt(8, valid=True, reward=1.0)
    attempt(9, valid=True, reward=1.0, cost=None)
    attempt(10, cls="agent_error")
    attempt(11, end=None)
    for _ in range(plan.max_attempts):  # failures of the world, under the cap: pending still
        attempt(12, cls="provider", counts=False)
    return ledger


def _both(run_root: Path, now: float, monkeypatch: pytest.MonkeyPatch) -> tuple[RunStatus, RunStatus]:
    """(read from the brief and tally, read whole); the first must not read an attempt row."""
    with monkeypatch.context() as m:
        m.setattr(Ledger, "attempts", lambda self: pytest.fail("the tallied read read every attempt"))
        m.setattr("ray_bench.status.read.load_plan_file", lambda path: pytest.fail("it parsed the whole plan"))
        fast = read_status(run_root, now)
    return fast, read_status(run_root, now, whole=True)


def _same(fast: RunStatus, whole: RunStatus) -> None:
    assert json.dumps(fast.to_json(), default=str) == json.dumps(whole.to_json(), default=str)
    assert status_lines(fast) == status_lines(whole)


def test_the_tallied_status_says_what_the_whole_read_says_in_every_state(
        run_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.time() - 120
    ledger = _history(run_root, t0)
    now = t0 + 100
    # running: a library driver (no lock) with a fresh heartbeat
    ledger.event("heartbeat", {"pid": 1}, now=now - 1)
    fast, whole = _both(run_root, now, monkeypatch)
    _same(fast, whole)
    assert fast.state == "running"
    assert fast.counts == {"pending": 23, "running": 2, "valid": 5, "failed": 2}
    tries = load_plan_file(run_root / PLAN_FILE)[0].max_attempts
    assert (fast.solved, fast.attempts) == (3, 13 + 4 * tries)
    assert fast.failures == {"agent_error": 2, "provider": 3 * tries, "verifier_error": tries + 1}
    assert (fast.unknown_cost, fast.lower_bound_cost) == (3, 1)
    # the driver died: its end is its last sign of life (a heartbeat or an attempt's time)
    dead = now + 3600
    fast, whole = _both(run_root, dead, monkeypatch)
    _same(fast, whole)
    assert fast.state == "stopped" and fast.next_action and "recovers 2 attempts" in (fast.next_action_why or "")
    # paused, then finished
    ledger.event("paused", {"reason": "lunch", "now": False}, now=now + 1)
    ledger.event("run_finished", {"run_id": "r1", "stopped": "paused", "detail": ""}, now=now + 2)
    fast, whole = _both(run_root, now + 5, monkeypatch)
    _same(fast, whole)
    assert fast.state == "paused" and fast.counts["running"] == 0
    ledger.event("run_started", {"identity": fast.identity, "deadline": None}, now=now + 10)
    ledger.event("run_finished", {"run_id": "r1", "stopped": None, "detail": "4 cells failed"}, now=now + 20)
    ledger.close()
    fast, whole = _both(run_root, now + 30, monkeypatch)
    _same(fast, whole)
    assert fast.state == "finished"


def test_planned_and_refused_pause_read_the_brief_alone(run_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_brief(run_root) == PlanBrief.of(*load_plan_file(run_root / PLAN_FILE))  # plan wrote it
    fast, whole = _both(run_root, time.time(), monkeypatch)
    _same(fast, whole)
    monkeypatch.setattr("ray_bench.status.read.load_plan_file", lambda path: pytest.fail("it parsed the plan"))
    with pytest.raises(UserInputError, match="has not started"):
        pause_run(run_root)


def test_a_stale_or_missing_brief_is_not_trusted(run_root: Path) -> None:
    paths = RunPaths(run_root)
    brief = json.loads(paths.plan_brief.read_text())
    paths.plan_brief.write_text(json.dumps({**brief, "identity": "sha256:" + "0" * 64, "cell_count": 7}))
    assert read_brief(run_root) is None
    assert read_status(run_root).cells == 32  # read from the whole plan
    paths.plan_brief.unlink()
    assert read_brief(run_root) is None and read_status(run_root).cells == 32


def test_an_older_ledger_is_read_whole_and_a_writer_gives_it_the_table(
        run_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.time() - 120
    _history(run_root, t0).close()
    identity = load_plan_file(run_root / PLAN_FILE)[1]
    conn = sqlite3.connect(RunPaths(run_root).ledger)
    with conn:
        conn.executescript(OLDER_THAN_CELLS)
    conn.close()
    whole = read_status(run_root, t0 + 200, whole=True)
    assert read_status(run_root, t0 + 200) == whole  # no table: every row read
    Ledger.create(run_root, run_id="r1", plan_identity=identity).close()  # a resume: the table, filled
    fast, again = _both(run_root, t0 + 200, monkeypatch)
    _same(fast, again)
    _same(fast, whole)
