"""The driver SIGKILLed at three points of a run, then resumed with the same command.

The agent leaves a detached background process with a recognisable command line
(``sleep 302.1377``): a normal sandbox deletion kills it with the sandbox's process group, but
after a driver crash it survives as an orphan until the resumed driver's stale-attempt
cleanup finds the sandbox by label and kills what it recorded.

The three kill points come one after another in one run: the run is killed when its first
attempt starts, its resume when several attempts are in flight, that resume's resume when the
last cell has started, and a fourth driver finishes it. Four driver starts where a run of its
own per point took six; the second and third crashes so also hit a resumed run, whose own stale
recovery had just run. The first driver starts a local Ray of its own; the others join the
session's shared Ray (``--address``): a driver SIGKILLed on a cluster leaves its runner actors
to Ray's owner-death cleanup and its orphans to the resume, and three local starts are saved."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.driver_process import DriverProcess, ledger_query, pgrep, wait_for
from support.ray_local import shared_address
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


#: The agents' sleep, found in the host's process table: its digits are this pytest process's
#: pid, because the table is the machine's. With one fixed marker, two suites on one machine (an
#: xdist run and a serial one, 3 Dec) each saw the other's agents: `pgrep(MARKER) == []` failed
#: in both.
MARKER = f"sleep 302.{os.getpid():07d}"  # fixed width: no pid is a prefix of another


@dataclass
class Crash:
    """What the ledger held when a driver was killed."""

    point: str
    ids: set[str]
    valid: set[str]
    open: set[str]


def _runs_started(root: Path) -> int:
    return len(ledger_query(root, "SELECT seq FROM events WHERE kind = 'run_started'"))


def _crash_at(point: str, driver: DriverProcess, root: Path, nth: int) -> Crash:
    driver.start()
    # generous: on a loaded 2-core host a local Ray alone took over 60 s to start. The point is
    # looked for once this driver has started its run: its stale recovery (of the driver killed
    # before it) is done by then, so what is open and running is this driver's.
    wait_for(lambda: _runs_started(root) >= nth and POINTS[point](root, MARKER), 300, point, alive=driver)
    driver.kill()
    with Ledger.reading(root) as ledger:
        before = ledger.attempts()
    driver.reap()  # the Ray instance the dead driver started (its own process group)
    crash = Crash(point, {a.attempt_id for a in before}, {a.cell_id for a in before if a.valid},
                  {a.attempt_id for a in before if not a.terminal})
    assert crash.open, f"the kill point ({point}) must leave attempts in flight"
    if point != "first-attempt-started":
        # the crash really left work behind for the resume to clean up
        assert pgrep(MARKER), f"the agents' stray processes should outlive the crashed driver ({point})"
    return crash


@pytest.mark.timeout(1500)
def test_sigkilled_driver_resumes_cleanly_at_every_point(tmp_path: Path) -> None:
    agent = (f'{MARKER} >/dev/null 2>&1 & sleep 1.5; sh "$SOLUTION_DIR/solve.sh"')
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
    joined = ("--address", shared_address())
    drivers = [DriverProcess(plan, planned.identity, logs, name=point, extra_args=() if nth == 0 else joined)
               for nth, point in enumerate(POINTS)]
    final = DriverProcess(plan, planned.identity, logs, name="final", extra_args=joined)
    crashes: list[Crash] = []
    try:
        for nth, (point, driver) in enumerate(zip(POINTS, drivers, strict=True), start=1):
            crashes.append(_crash_at(point, driver, root, nth))
        rc = final.start().wait(timeout=420)
        assert rc == 0, final.stderr[-3000:]
        assert "Traceback" not in final.stderr
    finally:
        for driver in (*drivers, final):
            driver.reap()

    with Ledger.reading(root) as ledger:
        after = ledger.attempts()
        started = ledger.events("run_started")
        finished = ledger.events("run_finished")
    by_id = {a.attempt_id: a for a in after}
    # every cell: exactly one valid attempt, which is its accepted row
    valid_per_cell: dict[str, int] = {}
    for a in after:
        valid_per_cell[a.cell_id] = valid_per_cell.get(a.cell_id, 0) + int(a.valid)
    assert len(valid_per_cell) == CELLS
    assert set(valid_per_cell.values()) == {1}
    for crash in crashes:
        # no cell that had a valid row at a crash got another attempt
        assert not [a for a in after if a.cell_id in crash.valid and a.attempt_id not in crash.ids], crash.point
        # what was in flight at the kill is stale, does not count, and its cell ran again
        for attempt_id in crash.open:
            stale = by_id[attempt_id]
            assert stale.status == "stale", crash.point
            assert not stale.counts
            assert stale.failure_class == "executor"
    # each resume recovered what the crash before it left open
    assert [e.data["resumed_stale"] for e in started[1:]] == [len(c.open) for c in crashes]
    assert all(a.terminal for a in after)
    assert len(finished) == 1 and finished[-1].data["exit_code"] == 0
    assert finished[-1].data["stale_recovered"] == len(crashes[-1].open)
    # no sandbox and no orphan agent process is left
    assert list(sandboxes.iterdir()) == []
    assert pgrep(MARKER) == []
