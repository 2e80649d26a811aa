"""`ledger rebuild`: a lost ledger recreated from the attempt directories, never over one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli import app
from ray_bench.errors import UserInputError
from ray_bench.evidence.rebuild import rebuild_ledger
from ray_bench.ledger.store import Ledger
from ray_bench.plan.store import load_plan_file
from ray_bench.runroot import RunPaths, attempt_dir_name
from ray_bench.scheduler.runstate import RunState


def _result(attempt_dir: Path, **kw: Any) -> None:
    """The runner's terminal summary, in the shape it writes."""
    doc: dict[str, Any] = {"attempt_id": attempt_dir.name, "agent": {"exit_code": 0, "timed_out": False},
                           "verifier": {"exit_code": 0}, "reward": 1.0, "account": "acct-a",
                           "started_at": 1000.0, "finished_at": 1010.0}
    doc.update(kw)
    attempt_dir.mkdir(parents=True)
    (attempt_dir / "result.json").write_text(json.dumps(doc))


def _planned(tmp_path: Path) -> tuple[Path, list[str]]:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "sum-list"])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="lost")
    plan, _ = load_plan_file(planned.run_root / "launch-plan.json")
    return planned.run_root, [c.id for c in plan.cells]


def test_rebuild_keeps_finished_cells_and_leaves_the_open_one_for_stale_recovery(tmp_path: Path) -> None:
    root, cells = _planned(tmp_path)
    attempts = root / "attempts"
    _result(attempts / f"{cells[0]}-a1")                              # solved: a valid row
    _result(attempts / f"{cells[1]}-a1", reward=None)                 # no reward: not a row
    (attempts / f"{cells[1]}-a2").mkdir()                             # in flight when it ended
    (attempts / "not-an-attempt").mkdir()

    result = rebuild_ledger(root)
    assert (result.finished, result.valid, result.open) == (2, 1, 1)
    assert result.skipped == ["not-an-attempt: not an attempt of this plan's cells"]
    with Ledger.reading(root) as ledger:
        rows = {a.attempt_id: a for a in ledger.attempts()}
        rebuilt = ledger.events("ledger_rebuilt")
    assert rows[f"{cells[0]}-a1"].valid and rows[f"{cells[0]}-a1"].account == "acct-a"
    assert rows[f"{cells[1]}-a1"].status == "finished" and not rows[f"{cells[1]}-a1"].valid
    assert not rows[f"{cells[1]}-a2"].terminal and rows[f"{cells[1]}-a2"].seq == 2
    assert rows[f"{cells[1]}-a2"].account == ""  # unknown, never some account
    assert len(rebuilt) == 1
    # what a resume sees: the solved cell is done, the others wait
    plan, _ = load_plan_file(root / "launch-plan.json")
    state = RunState(plan, list(rows.values()))
    assert state.cells[cells[0]].valid and state.counts()["valid"] == 1


def test_rebuild_refuses_a_run_root_with_a_ledger_and_writes_nothing(tmp_path: Path) -> None:
    root, cells = _planned(tmp_path)
    _result(root / "attempts" / f"{cells[0]}-a1")
    rebuild_ledger(root)
    before = (root / "ledger.sqlite").read_bytes()
    result = CliRunner().invoke(app, ["ledger", "rebuild", str(root)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{root / 'ledger.sqlite'} exists" in lines[0]
    assert (root / "ledger.sqlite").read_bytes() == before


def test_rebuild_of_a_run_that_never_started_is_refused(tmp_path: Path) -> None:
    root, _ = _planned(tmp_path)
    with pytest.raises(UserInputError, match="no attempt directories"):
        rebuild_ledger(root)
    assert not (root / "ledger.sqlite").exists()


def test_a_new_attempt_never_takes_an_existing_directory(tmp_path: Path) -> None:
    root, cells = _planned(tmp_path)
    (root / "attempts" / f"{cells[0]}-a1").mkdir(parents=True)  # from a ledger that is gone
    ledger = Ledger.create(root, run_id="lost", plan_identity="sha256:x")
    try:
        row = ledger.start_attempt(cell_id=cells[0], task="t", task_checksum="c", arm="baseline", rep=1,
                                   account="acct-a", backend="local", epoch="e", preflight=False,
                                   taken=lambda seq: RunPaths(root).attempt_of("t", "baseline", 1, seq,
                                                                               cells[0]).exists())
        (root / "attempts" / attempt_dir_name("t", "baseline", 1, 2, cells[0])).mkdir()  # and a new-named one
        again = ledger.start_attempt(cell_id=cells[0], task="t", task_checksum="c", arm="baseline", rep=1,
                                     account="acct-a", backend="local", epoch="e", preflight=False,
                                     taken=lambda seq: RunPaths(root).attempt_of("t", "baseline", 1, seq,
                                                                                 cells[0]).exists())
    finally:
        ledger.close()
    assert row.attempt_id == f"{cells[0]}-a2" and again.attempt_id == f"{cells[0]}-a3"


def test_rebuild_reads_directories_named_by_task_arm_and_rep_and_old_ones_alike(tmp_path: Path) -> None:
    """Issue 56: a run root may hold both layouts (a run made before, resumed after)."""
    root, _ = _planned(tmp_path)
    plan, _ = load_plan_file(root / "launch-plan.json")
    first, second = plan.cells[:2]
    _result(root / "attempts" / f"{first.id}-a1", reward=None)  # the old layout: failed, superseded
    _result(RunPaths(root).attempt_of(first.task, first.arm, first.rep, 2, first.id),  # the new: solved
            attempt_id=f"{first.id}-a2")  # the runner writes the ledger's id, not the directory's name
    (RunPaths(root).attempt_of(second.task, second.arm, second.rep, 1, second.id)).mkdir()  # in flight
    result = rebuild_ledger(root)
    assert (result.finished, result.valid, result.open, result.stale, result.skipped) == (1, 1, 1, 1, [])
    rows = {a.attempt_id: a for a in Ledger.read_attempts(root)}
    assert rows[f"{first.id}-a2"].valid and rows[f"{first.id}-a2"].seq == 2
    assert not rows[f"{first.id}-a1"].valid and not rows[f"{second.id}-a1"].terminal
    # every reader finds each row's directory under whichever name it has
    assert {RunPaths(root).attempt(r).name for r in rows.values()} == {p.name for p in RunPaths(root).attempt_dirs()}


def test_status_of_a_rebuilt_ledger_is_stopped_with_its_rows_and_a_resume(tmp_path: Path) -> None:
    """A rebuilt ledger has attempts but no run start: status reads it as stopped (never as
    `planned` with 0 attempts), with its counts and the resume that recovers the open attempt."""
    from ray_bench.status.read import read_status

    root, cells = _planned(tmp_path)
    attempts = root / "attempts"
    _result(attempts / f"{cells[0]}-a1")
    (attempts / f"{cells[1]}-a1").mkdir()
    rebuild_ledger(root)
    status = read_status(root)
    assert status.state == "stopped" and status.attempts == 2, status
    assert status.counts["valid"] == 1 and status.counts["running"] == 0
    assert status.counts["pending"] == len(cells) - 1
    assert status.reason is not None and "rebuilt from the attempt directories" in status.reason
    assert status.next_action is not None and status.next_action.startswith("ray-bench execute --plan")
    assert status.next_action_why is not None and "recovers 1 attempt left in flight" in status.next_action_why


def _record(root: Path) -> tuple[dict[str, tuple[Any, ...]], set[str], tuple[float, int]]:
    """What a ledger says of its attempts: status, validity, reward, class, cost, whether it
    counts; the accepted rows; the known spend and the attempts of unknown cost."""
    from ray_bench.ledger.rows import accepted_rows, known_spend

    with Ledger.reading(root) as ledger:
        attempts = ledger.attempts()
    return ({a.attempt_id: (a.status, a.valid, a.reward, a.failure_class, a.cost_usd, a.counts) for a in attempts},
            {r.attempt_id for r in accepted_rows(attempts).values()}, known_spend(attempts))


@pytest.mark.slow
def test_a_rebuilt_ledger_of_a_finished_run_is_the_ledger_it_replaces(tmp_path: Path) -> None:
    """Issue 58: the same rows, validity, spend and state (`finished`, so `export` takes it as
    `promote` does) as the driver's own ledger."""
    from support.runs import plan_and_run_here

    from ray_bench.exports.source import export_roots
    from ray_bench.status.read import read_status

    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "sum-list"], preflight_cells=0,
                                 backends={"local": {"max_sandboxes": 4, "options": {"root": str(tmp_path / "sbx")}}})
    outcome, root = plan_and_run_here(suite, accounts, tmp_path / "runs")
    assert outcome.stopped is None and read_status(root).state == "finished"
    before = _record(root)
    aside = tmp_path / "aside"
    aside.mkdir()
    for made in root.glob("ledger.sqlite*"):
        made.rename(aside / made.name)
    rebuild_ledger(root)
    assert _record(root) == before
    assert read_status(root).state == "finished"
    assert export_roots([root]) == [root]


def test_an_attempt_a_later_one_superseded_is_stale_of_unknown_cost_as_the_resume_recorded(tmp_path: Path) -> None:
    """Issue 58: attempts in flight when their driver was killed, whose runners wrote result.json
    after the resume had marked them stale and started their cells again, were rebuilt as valid
    rows of known cost (28 valid rows for 24 cells, $1.40 where the ledger said at least $1.20
    with 4 unknown)."""
    root, cells = _planned(tmp_path)
    attempts = root / "attempts"
    usage = {"output_tokens": 9, "cost_usd": 0.05}
    _result(attempts / f"{cells[0]}-a1", started_at=1000.0, finished_at=1010.0, usage=usage)  # outlived its driver
    _result(attempts / f"{cells[0]}-a2", started_at=1005.0, finished_at=1020.0, usage=usage)
    (attempts / f"{cells[1]}-a1").mkdir()                                                    # no result: superseded
    _result(attempts / f"{cells[1]}-a2", started_at=1030.0, finished_at=1040.0, reward=None, usage=usage)
    _result(attempts / f"{cells[1]}-a3", started_at=1050.0, finished_at=1060.0, usage=usage)  # a2: a real retry
    result = rebuild_ledger(root)
    assert (result.finished, result.valid, result.stale, result.open) == (3, 2, 2, 0)
    attempts_of, rows, spend = _record(root)
    assert attempts_of[f"{cells[0]}-a1"] == ("stale", False, None, "executor", None, False)
    assert attempts_of[f"{cells[1]}-a1"] == ("stale", False, None, "executor", None, False)
    assert attempts_of[f"{cells[1]}-a2"][:2] == ("finished", False) and attempts_of[f"{cells[1]}-a2"][4] == 0.05
    assert rows == {f"{cells[0]}-a2", f"{cells[1]}-a3"}
    assert spend == (pytest.approx(0.15), 2)


def test_a_rebuilt_ledger_of_a_paused_run_reads_paused(tmp_path: Path) -> None:
    """Issue 58: a paused run's ledger rebuilt read `stopped`. Its pause request survives in the
    run root (``pause`` writes it; the next session archives it), so the rebuilt run reads
    `paused` with the operator's reason and the same resume; without cells left it is finished."""
    from ray_bench.runroot import RunPaths
    from ray_bench.status.read import read_status

    root, cells = _planned(tmp_path)
    _result(root / "attempts" / f"{cells[0]}-a1")
    RunPaths(root).pause.write_text(json.dumps({"requested_at": 1005.0, "now": False, "reason": "lunch",
                                                "resume_action": "ray-bench execute"}))
    rebuild_ledger(root)
    status = read_status(root)
    assert status.state == "paused", status
    assert status.reason is not None and status.reason.startswith("paused by the operator")
    assert "(lunch)" in status.reason
    assert status.counts["valid"] == 1 and status.counts["pending"] == len(cells) - 1
    assert status.next_action is not None and status.next_action.startswith("ray-bench execute --plan")
