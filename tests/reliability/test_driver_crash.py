"""The driver SIGKILLed at three points of a run, then resumed with the same command.

The agent leaves a detached background process with a recognisable command line
(``sleep 302.13N``): a normal sandbox deletion kills it with the sandbox's process group, but
after a driver crash it survives as an orphan until the resumed driver's stale-attempt
cleanup finds the sandbox by label and kills what it recorded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.driver_process import DriverProcess, ledger_query, pgrep, wait_for
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.ledger import Ledger

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TASKS = ["hello-world", "sum-list", "fizzbuzz"]
CELLS = len(TASKS) * 2 * 2  # tasks x arms x reps


def _open(root: Path) -> int:
    return len(ledger_query(root, "SELECT a.attempt_id FROM attempts a LEFT JOIN results r "
                                  "USING (attempt_id) WHERE r.attempt_id IS NULL"))


def _valid(root: Path) -> int:
    return len(ledger_query(root, "SELECT attempt_id FROM results WHERE valid = 1"))


def _cells_started(root: Path) -> int:
    return len(ledger_query(root, "SELECT DISTINCT cell_id FROM attempts"))


def _first_started(root: Path, marker: str) -> bool:
    return bool(ledger_query(root, "SELECT attempt_id FROM attempts"))


def _several_in_flight(root: Path, marker: str) -> bool:
    # in flight means agents running, not only attempts recorded (that comes first)
    return _valid(root) >= 1 and _open(root) >= 3 and len(pgrep(marker)) >= 2


def _last_started(root: Path, marker: str) -> bool:
    finished = ledger_query(root, "SELECT seq FROM events WHERE kind = 'run_finished'")
    return (_cells_started(root) == CELLS and _open(root) >= 1 and not finished
            and bool(pgrep(marker)))


POINTS: dict[str, Callable[[Path, str], bool]] = {
    "first-attempt-started": _first_started,
    "several-in-flight": _several_in_flight,
    "last-attempt-started": _last_started,
}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("point", list(POINTS), ids=list(POINTS))
def test_sigkilled_driver_resumes_cleanly(tmp_path: Path, point: str) -> None:
    marker = f"sleep 302.13{list(POINTS).index(point)}"
    agent = (f'{marker} >/dev/null 2>&1 & sleep 1.5; sh "$SOLUTION_DIR/solve.sh"')
    sandboxes = tmp_path / "sbx"
    arm = {"command": agent, "agent_dir": "agents", "expose_solution": True}
    suite, accounts = make_suite(
        tmp_path / "s", tasks=TASKS, reps=2, preflight_cells=1, max_attempts=2,
        backends={"local": {"max_sandboxes": 4, "options": {"root": str(sandboxes)}}},
        arms=[{"name": "baseline", "role": "baseline", **arm},
              {"name": "mcp", "role": "variant", **arm}])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="crash")
    root = planned.run_root
    assert planned.cells == CELLS

    plan, logs = root / "launch-plan.json", tmp_path / "logs"
    first = DriverProcess(plan, planned.identity, logs, name="first")
    second = DriverProcess(plan, planned.identity, logs, name="second")
    try:
        first.start()
        # generous: on a loaded 2-core host a local Ray alone took over 60 s to start
        wait_for(lambda: POINTS[point](root, marker), 300, point, alive=first)
        first.kill()
        ledger = Ledger.open_readonly(root)
        try:
            before = ledger.attempts()
        finally:
            ledger.close()
        first.reap()  # the Ray instance the dead driver started (its own process group)
        valid_before = {a.cell_id for a in before if a.valid}
        open_before = {a.attempt_id for a in before if not a.terminal}
        assert open_before, "the kill point must leave attempts in flight"
        if point != "first-attempt-started":
            # the crash really left work behind for the resume to clean up
            assert pgrep(marker), "the agents' stray processes should outlive the crashed driver"

        rc = second.start().wait(timeout=420)
        assert rc == 0, second.stderr[-3000:]
        assert "Traceback" not in second.stderr
    finally:
        first.reap()
        second.reap()

    ledger = Ledger.open_readonly(root)
    try:
        after = ledger.attempts()
        finished = ledger.events("run_finished")
    finally:
        ledger.close()
    by_id = {a.attempt_id: a for a in after}
    # every cell: exactly one valid attempt, which is its accepted row
    valid_per_cell: dict[str, int] = {}
    for a in after:
        valid_per_cell[a.cell_id] = valid_per_cell.get(a.cell_id, 0) + int(a.valid)
    assert len(valid_per_cell) == CELLS
    assert set(valid_per_cell.values()) == {1}
    # no cell that had a valid row got another attempt
    old_ids = {a.attempt_id for a in before}
    assert not [a for a in after if a.cell_id in valid_before and a.attempt_id not in old_ids]
    # what was in flight at the kill is stale, does not count, and its cell ran again
    for attempt_id in open_before:
        stale = by_id[attempt_id]
        assert stale.status == "stale"
        assert not stale.counts
        assert stale.failure_class == "executor"
    assert all(a.terminal for a in after)
    assert finished[-1].data["exit_code"] == 0
    assert finished[-1].data["stale_recovered"] == len(open_before)
    # no sandbox and no orphan agent process is left
    assert list(sandboxes.iterdir()) == []
    assert pgrep(marker) == []
