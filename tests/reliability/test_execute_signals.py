"""SIGTERM, Ctrl-C (SIGINT to the process group) and SIGHUP end a real `ray-bench execute` the
way `pause --now` does: the agents, which would otherwise run for five minutes, are gone
shortly after the exit, no sandbox directory is left, the ledger holds a `signal` stop, the
exit code is 128 + the signal's number, and a resume finishes the run.

The three signals stop one run in turn (a run, then its resume, then the resume's resume), and
a last resume finishes it: four driver starts where a run of its own per signal took six; the
second and third signals so also stop a resumed run. The first driver starts a local Ray of its
own (the laptop case: its Ray goes with it); the others join the session's shared Ray with
``--address`` (the cluster case: the driver's runner actors outlive nothing, the cluster lives
on), which also saves three local Ray starts (each 30-70 s here)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.driver_process import DriverProcess, ledger_query, pgrep, wait_for
from support.ray_local import shared_address
from support.suites import make_suite

from ray_bench.api import plan_run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TASKS = ["hello-world", "sum-list"]
#: How long after the driver's exit its agents may take to be gone (their runners' deletes
#: are already done by then; this is only the kernel reaping them).
GONE_SEC = 10.0


def _group_left(pgid: int) -> int:
    found = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True, check=False)
    return len(found.stdout.split())


def _send(driver: DriverProcess, sig: signal.Signals) -> None:
    if sig == signal.SIGINT:
        os.killpg(driver.pid, sig)  # Ctrl-C: the terminal signals the whole foreground group
    else:
        os.kill(driver.pid, sig)


SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Unique to this pytest process: the process table is the machine's (see test_driver_crash).
MARKER = f"sleep 303.{os.getpid():07d}"


def _stop_by(driver: DriverProcess, sig: signal.Signals, root: Path, sandboxes: Path, nth: int) -> None:
    """Start ``driver``, signal it once its two agents run, and check the stop (the ``nth``)."""
    cancelled_before = len(ledger_query(root, "SELECT attempt_id FROM results WHERE status = 'cancelled'"))
    driver.start()
    # generous: on a loaded 2-core host a local Ray alone took over 60 s to start
    try:
        wait_for(lambda: len(pgrep(MARKER)) >= 2, 300, f"two agents running ({sig.name})", alive=driver)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{driver.stderr[-2000:]}") from None
    _send(driver, sig)
    rc = driver.wait(timeout=180)
    exited = time.monotonic()
    assert rc == 128 + int(sig), driver.stderr[-3000:]
    wait_for(lambda: pgrep(MARKER) == [], GONE_SEC, f"the agents to be gone ({sig.name})")
    left = time.monotonic() - exited
    assert list(sandboxes.iterdir()) == []
    assert "Traceback" not in driver.stderr and "*** SIGTERM received" not in driver.stderr
    last = driver.stdout.strip().splitlines()[-1]
    assert f"stopped: {sig.name} received" in last and "ray-bench execute --plan" in last
    stops = ledger_query(root, "SELECT data FROM events WHERE kind = 'stop' ORDER BY seq")
    assert len(stops) == nth and '"reason": "signal"' in str(stops[-1][0])
    cancelled = ledger_query(root, "SELECT attempt_id FROM results WHERE status = 'cancelled'")
    assert len(cancelled) - cancelled_before >= 2
    assert ledger_query(root, "SELECT a.attempt_id FROM attempts a LEFT JOIN results r USING (attempt_id) "
                              "WHERE r.attempt_id IS NULL") == []  # nothing left open
    # The measure was what is left 5 s after the exit, printed after a fixed 5 s sleep
    # (15 s a test). Now asserted: the driver's group (its Ray, for the first) is empty, polled.
    wait_for(lambda: _group_left(driver.pid) == 0, 60, f"the driver's process group to be gone ({sig.name})")
    print(f"{sig.name}: exit {rc}, agents gone {left:.1f} s after the exit; its process group (its Ray) "
          f"gone {time.monotonic() - exited:.1f} s after it; {len(pgrep(MARKER))} agents, "
          f"{len(list(sandboxes.iterdir()))} sandboxes")


@pytest.mark.timeout(1500)
def test_each_signal_stops_the_run_cleanly_and_a_resume_finishes_it(tmp_path: Path) -> None:
    release = tmp_path / "release"  # once it exists the agents solve at once (the last resume)
    agent = f'if [ -e {release} ]; then sh "$SOLUTION_DIR/solve.sh"; else {MARKER}; fi'
    sandboxes = tmp_path / "sbx"
    arm = {"command": agent, "agent_dir": "agents", "expose_solution": True}
    suite, accounts = make_suite(
        tmp_path / "s", tasks=TASKS, reps=1, preflight_cells=1, max_attempts=2,
        backends={"local": {"max_sandboxes": 4, "options": {"root": str(sandboxes)}}},
        arms=[{"name": "baseline", "role": "baseline", **arm}, {"name": "mcp", "role": "variant", **arm}])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="sig")
    root, plan, logs = planned.run_root, planned.run_root / "launch-plan.json", tmp_path / "logs"
    joined = ("--address", shared_address())
    drivers = [DriverProcess(plan, planned.identity, logs, name=sig.name, extra_args=() if nth == 0 else joined)
               for nth, sig in enumerate(SIGNALS)]
    final = DriverProcess(plan, planned.identity, logs, name="final", extra_args=joined)
    try:
        for nth, (sig, driver) in enumerate(zip(SIGNALS, drivers, strict=True), start=1):
            _stop_by(driver, sig, root, sandboxes, nth)
        release.touch()
        rc = final.start().wait(timeout=420)
        assert rc == 0, final.stderr[-3000:]
    finally:
        for driver in (*drivers, final):
            driver.reap()
    valid = ledger_query(root, "SELECT DISTINCT a.cell_id FROM attempts a JOIN results r USING (attempt_id) "
                               "WHERE r.valid = 1")
    assert len(valid) == len(TASKS) * 2
    assert list(sandboxes.iterdir()) == [] and pgrep(MARKER) == []
