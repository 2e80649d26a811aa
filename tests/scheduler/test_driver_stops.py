"""The driver's own stops on a virtual clock: a stop signal ends the run like `pause --now`,
and a pause requested while `execute` was starting is honoured, not archived."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from support.virtual_run import CELLS, Run

from ray_bench.scheduler.driver import RunOutcome


def test_a_stop_signal_cancels_running_cells_records_a_stop_and_a_resume_finishes(tmp_path: Path) -> None:
    run = Run(tmp_path)
    # the signal comes once three attempts have started (cells are running then)
    driver = run.driver(stop_signal=lambda: "SIGTERM" if driver.attempts_run >= 3 else None)
    outcome = driver.run()
    assert outcome.stopped == "signal"
    assert outcome.exit_code == 143  # 128 + SIGTERM
    assert "SIGTERM received" in outcome.detail and "ray-bench execute --plan" in outcome.detail
    ledger = run.ledger()
    try:
        stops = [e.data for e in ledger.events("stop")]
        attempts = ledger.attempts()
    finally:
        ledger.close()
    assert stops == [{"reason": "signal", "signal": "SIGTERM", "detail": outcome.detail}]
    # the signal came with cells running: they were cancelled (not left open, not counted)
    assert {a.status for a in attempts} <= {"cancelled", "finished"}
    assert any(a.status == "cancelled" for a in attempts)
    assert not any(a.counts for a in attempts if a.status == "cancelled")
    assert outcome.attempts_run < CELLS  # nothing new started after the signal
    assert run.pool.count({}, "local", run.plan.run_id) == 0  # no sandbox left

    resumed = run.session()
    assert (resumed.stopped, resumed.exit_code, resumed.counts["valid"]) == (None, 0, CELLS)


def test_a_pause_requested_while_execute_started_is_honoured(tmp_path: Path) -> None:
    run = Run(tmp_path)
    started = run.clock.wall()
    request = {"requested_at": started + 5, "now": False, "reason": "", "resume_action": "ray-bench execute ..."}
    (run.root / "pause.json").write_text(json.dumps(request))
    outcome = run.session(session_started=started)
    assert outcome.stopped == "paused" and outcome.exit_code == 0
    assert outcome.attempts_run == 0  # no cell ran
    assert not (run.root / "pauses").exists()  # not archived as an old pause

    # the resume (a later session) archives it and runs every cell
    resumed = run.session(session_started=started + 60)
    assert (resumed.stopped, resumed.counts["valid"]) == (None, CELLS)
    assert len(list((run.root / "pauses").iterdir())) == 1 and not (run.root / "pause.json").exists()


def test_a_pause_older_than_the_session_is_the_one_resumed_from(tmp_path: Path) -> None:
    run = Run(tmp_path)
    started = run.clock.wall()
    (run.root / "pause.json").write_text(json.dumps({"requested_at": started - 60, "now": False}))
    outcome = run.session(session_started=started)
    assert (outcome.stopped, outcome.counts["valid"]) == (None, CELLS)
    assert [p.name.endswith("-pause.json") for p in (run.root / "pauses").iterdir()] == [True]



def _paused_by(tmp_path: Path, writes: dict[int, Callable[[Path], None]]) -> tuple[RunOutcome, list[str], list[bool]]:
    """A run whose pause file is written by ``writes[n]`` once ``n`` attempts have started: its
    outcome, its attempts' statuses and the ``now`` of each pause the ledger records."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    run = Run(tmp_path)
    pending = dict(writes)

    def hook() -> None:
        for n in sorted(pending):
            if driver.attempts_run >= n:
                pending.pop(n)(run.root / "pause.json")

    driver = run.driver(stop_signal=hook)
    outcome = driver.run()
    ledger = run.ledger()
    try:
        statuses = [a.status or "" for a in ledger.attempts()]
        nows = [bool(e.data.get("now")) for e in ledger.events("paused")]
    finally:
        ledger.close()
    return outcome, statuses, nows


def test_a_pause_file_being_written_is_read_again_not_taken_for_a_drain(tmp_path: Path) -> None:
    """A pause file that cannot be read yet (a shell's ``>`` truncates before it writes) is looked
    at again: read half-written, a ``pause --now`` was taken for a drain (seen in CI under load:
    the running agent, a ``sleep 600``, went on)."""
    now = json.dumps({"requested_at": 1.0, "now": True, "reason": "", "resume_action": "ray-bench execute ..."})
    outcome, statuses, nows = _paused_by(tmp_path, {
        3: lambda p: p.write_text(""),  # truncated, not yet written
        6: lambda p: p.write_text(now),
    })
    assert outcome.stopped == "paused" and nows == [True], (outcome, nows)
    assert "cancelled" in statuses  # `--now`: the running cells were cancelled


def test_a_pause_file_left_unreadable_is_a_drain(tmp_path: Path) -> None:
    """One still unreadable after the settling time pauses all the same (fail closed), as a drain:
    whether it said ``now`` cannot be known."""
    from ray_bench.scheduler.driver import PAUSE_SETTLE_SEC

    def half_written_long_ago(pause: Path) -> None:
        pause.write_text('{"now": tr')
        old = time.time() - 2 * PAUSE_SETTLE_SEC
        os.utime(pause, (old, old))

    def half_written_in_the_future(pause: Path) -> None:  # another host's clock, far ahead
        pause.write_text('{"now": tr')
        ahead = time.time() + 3600
        os.utime(pause, (ahead, ahead))

    for name, write in (("past", half_written_long_ago), ("future", half_written_in_the_future)):
        outcome, statuses, nows = _paused_by(tmp_path / name, {3: write})
        assert outcome.stopped == "paused" and nows == [False], (name, outcome, nows)
        assert "cancelled" not in statuses and outcome.attempts_run < CELLS
