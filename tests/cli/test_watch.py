"""`ray-bench status --watch` against a run that has not started yet: it waits (one line), then
says what the run does, once per change, and ends with the run."""

from __future__ import annotations

import contextlib
import io
import subprocess
import time
from pathlib import Path

import pytest
from support.driver_process import BIN, cli_env
from support.suites import make_suite

from ray_bench.accounts.store import AccountStore
from ray_bench.api import plan_run
from ray_bench.cli.watch import watch_run
from ray_bench.errors import UserInputError
from ray_bench.ledger.store import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.store import load_plan_file
from ray_bench.runroot import RunPaths, hold_lock


def _planned(tmp_path: Path) -> Path:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], reps=2)
    return plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="w1").run_root


def _wait_for(path: Path, text: str, timeout: float = 60.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = path.read_text() if path.exists() else ""
        if text in out:
            return out
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path.read_text() if path.exists() else ''!r}")


def test_a_watch_started_before_the_run_waits_then_prints_its_lines_once(tmp_path: Path) -> None:
    """Issue 56: a watch started while `execute` verified the plan exited at once. Here the
    driver is the test: it takes the lock as `execute` does, writes the ledger as the driver
    does (a session, rows, a cooling account in the state root, the close)."""
    root = _planned(tmp_path)
    state = tmp_path / "state"
    out = tmp_path / "watch.out"
    with out.open("w") as sink:
        watch = subprocess.Popen([str(BIN), "status", str(root), "--watch", "--state-root", str(state)],
                                 stdout=sink, stderr=subprocess.PIPE, env=cli_env(), start_new_session=True)
    try:
        _wait_for(out, "waiting for run w1 to start")
        assert watch.poll() is None  # a planned run is waited for, not left at once
        plan, identity = load_plan_file(RunPaths(root).plan)
        with hold_lock(root):
            _wait_for(out, "the driver is starting")
            ledger = Ledger.create(root, run_id=plan.run_id, plan_identity=identity)
            ledger.event("run_started", {"identity": identity})
            until = time.time() + 600
            store = AccountStore(state)
            store.save_health("acct-a", state="cooling", cooling_until=until, episodes=1, auth_failures=0,
                              last_error="rate_limited (retry_after=600s)", events_seen=0)
            store.close()
            for cell in plan.cells:
                row = ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum="x", arm=cell.arm,
                                           rep=cell.rep, account="acct-b", backend="local", epoch=identity,
                                           preflight=False, now=time.time())
                ledger.finish_attempt(row.attempt_id, status="finished", valid=True, reward=1.0,
                                      failure_class=None, fingerprint=None, counts=True, cost_usd=0.0,
                                      summary=AttemptSummary(), now=time.time())
            _wait_for(out, f"{len(plan.cells)} valid rows")
            # said by a refresh that read the state root after the save (the fast tier, loaded,
            # once ended the run before any refresh had printed it)
            _wait_for(out, "account acct-a cooling until")
            time.sleep(3)  # refreshes that change nothing print nothing
            ledger.event("run_finished", {"run_id": plan.run_id, "stopped": None, "detail": ""})
            ledger.close()
        assert watch.wait(timeout=60) == 0, watch.stderr.read() if watch.stderr else ""
    finally:
        if watch.poll() is None:
            watch.kill()
    lines = out.read_text().splitlines()
    body = [line.split(" | ", 1)[-1] for line in lines]
    assert body[0].startswith("waiting for run w1 to start") and body.count(body[0]) == 1
    progress = [b for b in body if b.startswith("run w1 (")]
    assert len(progress) == len(set(progress)), progress  # each progress line once
    assert progress[-1].startswith(f"run w1 (finished, staging): {len(plan.cells)} cells: {len(plan.cells)} valid")
    clock = time.strftime("%H:%M:%S", time.localtime(round(until)))
    assert body.count(f"account acct-a cooling until {clock} (rate_limited)") == 1, body
    assert body.count("account acct-b healthy") == 1


@pytest.mark.parametrize(("state", "verb"), [("planned", "start"), ("paused", "resume")])
def test_a_run_that_never_starts_is_one_line_after_the_timeout(tmp_path: Path, state: str, verb: str) -> None:
    """A paused run too: `execute` verifies its inputs before it takes the lock, and a watch
    started then read the run as it was and left at once."""
    root = _planned(tmp_path)
    if state == "paused":
        plan, identity = load_plan_file(RunPaths(root).plan)
        ledger = Ledger.create(root, run_id=plan.run_id, plan_identity=identity)
        ledger.event("run_started", {"identity": identity})
        ledger.event("run_finished", {"run_id": plan.run_id, "stopped": "paused", "detail": ""})
        ledger.close()
    now = [time.time()]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    stream = io.StringIO()
    with pytest.raises(UserInputError, match=rf"run w1 did not {verb} within 1 min \(still {state}\)") as raised:
        watch_run(root, every=2.0, stream=stream, sleep=sleep, clock=lambda: now[0], start_timeout=60,
                  state_root=tmp_path / "state")
    assert f"{verb} it with `ray-bench execute --plan" in raised.value.line()
    (line,) = stream.getvalue().splitlines()  # the waiting line, once
    assert f"waiting for run w1 to {verb} ({state}, no driver holds its lock yet); gives up at " in line


def test_a_driver_that_lets_the_lock_go_before_the_run_began_ends_the_watch_with_1(tmp_path: Path) -> None:
    """Ray's start failed, say: the lock was taken and let go, and no ledger was ever written."""
    root = _planned(tmp_path)
    driver = contextlib.ExitStack()
    turns = iter([lambda: driver.enter_context(hold_lock(root)), driver.close])

    def sleep(_seconds: float) -> None:
        next(turns)()

    stream = io.StringIO()
    assert watch_run(root, every=0.0, stream=stream, sleep=sleep, state_root=tmp_path / "state") == 1
    body = [line.split(" | ", 1)[-1] for line in stream.getvalue().splitlines()]
    assert body[0].startswith("waiting for run w1 to start") and "the driver is starting (Ray, then the ledger)" in body
    assert body[-1].startswith("run w1: its driver exited before the run began")
