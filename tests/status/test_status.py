"""Status states from real plans, ledgers and locks (no Ray: the ledger is written the way the
driver writes it), and what `status`, `pause` and `watch` say about them."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import pause_run, plan_run
from ray_bench.cli.app import app
from ray_bench.cli.watch import watch_run
from ray_bench.errors import UserInputError
from ray_bench.ledger.store import Ledger
from ray_bench.metrics.pace import pace_snapshot
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import Plan
from ray_bench.plan.store import PLAN_FILE, load_plan_file
from ray_bench.status.liveness import HEARTBEAT_EVENT, LOCK_FILE
from ray_bench.status.read import RunStatus, read_status
from ray_bench.status.text import status_lines


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    # 8 tasks x 2 arms x 2 reps = 32 cells
    suite, accounts = make_suite(tmp_path / "s", reps=2)
    return plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1").run_root


def _plan(run_root: Path) -> tuple[Plan, str]:
    return load_plan_file(run_root / PLAN_FILE)


def _session(run_root: Path, *, valid: int, t0: float, step: float = 10.0, open_attempts: int = 0,
             deadline: float | None = None) -> Ledger:
    """A driver session as the driver records it: run_started, then `valid` valid rows
    finishing every `step` seconds, then `open_attempts` attempts still in flight."""
    plan, identity = _plan(run_root)
    ledger = Ledger.create(run_root, run_id=plan.run_id, plan_identity=identity)
    ledger.event("run_started", {"identity": identity, "deadline": deadline}, now=t0)
    cells = plan.cells
    for i in range(valid):
        cell = cells[i]
        row = ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum="x", arm=cell.arm,
                                   rep=cell.rep, account="acct-a", backend="local", epoch=identity,
                                   preflight=False, now=t0 + step * i)
        ledger.finish_attempt(row.attempt_id, status="finished", valid=True, reward=float(i % 2),
                              failure_class=None, fingerprint=None, counts=True, cost_usd=0.01,
                              summary=AttemptSummary(), now=t0 + step * (i + 1))
    for j in range(open_attempts):
        cell = cells[valid + j]
        ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum="x", arm=cell.arm, rep=cell.rep,
                             account="acct-b", backend="local", epoch=identity, preflight=False,
                             now=t0 + step * valid)
    return ledger


def _close(ledger: Ledger, run_root: Path, *, stopped: str | None, detail: str = "", now: float) -> None:
    plan, _ = _plan(run_root)
    ledger.event("run_finished", {"run_id": plan.run_id, "stopped": stopped, "detail": detail}, now=now)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@contextmanager
def _driver_lock(run_root: Path, since: float = 1.0) -> Iterator[None]:
    """Hold the run's lock the way `execute` does (another open file description), taken at
    ``since``: by default long before the session the test wrote, as `execute` takes it before
    its loop records run_started."""
    with (run_root / LOCK_FILE).open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        handle.write(str(os.getpid()))
        handle.flush()
        os.utime(run_root / LOCK_FILE, (since, since))
        yield


def test_planned(run_root: Path) -> None:
    status = read_status(run_root)
    assert status.state == "planned"
    assert status.next_action is not None and status.next_action.startswith("ray-bench execute --plan")
    assert status.counts["pending"] == 32


def test_a_plan_without_its_receipt_proposes_no_confirm(run_root: Path) -> None:
    """Issue 56: execute refuses a plan whose receipt is gone; status must not hand out its identity."""
    (run_root / "receipt.md").unlink()
    status = read_status(run_root)
    assert status.state == "planned" and status.next_action is None
    assert any("receipt.md is missing" in note for note in status.notes)
    text = "\n".join(status_lines(status))
    assert "--confirm" not in text and "receipt.md is missing" in text


def test_running_needs_a_live_lock_holder_and_shows_one_pace(run_root: Path) -> None:
    t0 = time.time() - 100
    ledger = _session(run_root, valid=10, t0=t0, open_attempts=2, deadline=t0 + 400)
    ledger.close()
    with _driver_lock(run_root):
        status = read_status(run_root, now=t0 + 100)
        assert status.state == "running"
        assert status.driver.lock_held and status.driver.pid == os.getpid()
        assert status.next_action is None  # nothing to resume while it runs
        assert status.counts == {"pending": 20, "running": 2, "valid": 10, "failed": 0}
        assert status.solved == 5  # valid is about the evidence, solved about the reward
        # the same rule, the same numbers as the exporter's: 10 rows in 100 s = 6 rows/min
        assert status.pace is not None
        assert status.pace == pace_snapshot([t0 + 10 * (i + 1) for i in range(10)], now=t0 + 100,
                                            started_at=t0, remaining_cells=22, deadline=t0 + 400)
        assert status.pace.rows_per_minute["15m"] == pytest.approx(6.0)
        text = "\n".join(status_lines(status))
        assert "pace 6.00 rows/min from 10 rows in 100 s (15m window)" in text
        assert "10 valid rows (5 solved)" in text


def test_a_resume_whose_loop_has_not_begun_is_starting_with_no_estimate(run_root: Path) -> None:
    """A resume holds the lock while its Ray starts (48 s at load, minutes on a slow host) and
    its loop has written no run_started yet: the last session's pace, read against a growing
    now, gave an estimate that grew by 3.3 s every 2 s. It is running, starting, no estimate."""
    t0 = time.time() - 600
    ledger = _session(run_root, valid=10, t0=t0, open_attempts=2)  # the session that died
    ledger.close()
    with _driver_lock(run_root, since=t0 + 500):  # the resume took the lock since
        status = read_status(run_root, now=t0 + 560)
        assert status.state == "running" and status.next_action is None
        assert status.pace is not None and status.pace.finish_estimate_seconds is None
        text = "\n".join(status_lines(status))
        assert f"the driver (pid {os.getpid()}) is starting" in text and "no estimate yet" in text
        assert "makes no progress" not in text
        assert "finish in" not in text
    with _driver_lock(run_root, since=t0 - 1):  # the same lock taken before: a session under way
        assert read_status(run_root, now=t0 + 100).pace.finish_estimate_seconds is not None


def test_a_copy_of_a_run_whose_driver_died_is_stopped_not_running(run_root: Path) -> None:
    t0 = time.time() - 600
    ledger = _session(run_root, valid=3, t0=t0, open_attempts=2)
    ledger.event(HEARTBEAT_EVENT, {"pid": 1}, now=t0 + 60)
    ledger.close()
    (run_root / LOCK_FILE).write_text(str(_dead_pid()))  # the lock file is there, nobody holds it
    status = read_status(run_root)
    assert status.state == "stopped"
    assert status.reason is not None and "driver died" in status.reason
    assert status.driver.last_heartbeat == t0 + 60
    assert status.next_action is not None and "execute --plan" in status.next_action
    assert "recovers 2 attempts left in flight" in (status.next_action_why or "")


def test_a_paused_run_with_cells_left_is_paused_and_says_how_to_resume(run_root: Path) -> None:
    t0 = time.time() - 300
    ledger = _session(run_root, valid=7, t0=t0)
    ledger.event("paused", {"reason": "quota", "now": False}, now=t0 + 100)
    _close(ledger, run_root, stopped="paused", detail="paused by operator", now=t0 + 110)
    ledger.close()
    status = read_status(run_root)
    assert status.state == "paused"
    assert status.counts["pending"] == 25
    assert status.reason is not None and status.reason.startswith("paused by the operator at ")
    assert status.reason.endswith("(quota)")
    assert status.next_action is not None and status.next_action.startswith("ray-bench execute --plan")
    assert status.to_json()["resume_action"] == status.next_action
    lines = status_lines(status)
    assert not any("{" in line for line in lines)  # words, not a dict
    assert any(line.startswith("last stop: paused by the operator") for line in lines)


def test_a_finished_run_offers_no_resume(run_root: Path) -> None:
    t0 = time.time() - 300
    ledger = _session(run_root, valid=32, t0=t0, step=1.0)
    _close(ledger, run_root, stopped=None, now=t0 + 40)
    ledger.close()
    status = read_status(run_root)
    assert status.state == "finished"
    assert status.next_action is None and status.to_json()["resume_action"] is None
    assert not any(line.startswith("next:") for line in status_lines(status))


def _stopped(run_root: Path, stopped: str, detail: str) -> RunStatus:
    t0 = time.time() - 300
    ledger = _session(run_root, valid=4, t0=t0)
    _close(ledger, run_root, stopped=stopped, detail=detail, now=t0 + 50)
    ledger.close()
    return read_status(run_root)


def test_stops_say_why_in_words_and_resume_only_where_it_would_do_something(run_root: Path) -> None:
    status = _stopped(run_root, "drift", "task hello-world changed (tests/test.sh)")
    assert status.state == "stopped"
    assert status.reason == "inputs changed: task hello-world changed (tests/test.sh)"
    assert status.next_action is None  # a resume would stop again at once
    assert status.next_action_why is not None and "plan again" in status.next_action_why


def test_a_circuit_stop_resumes_with_a_hypothesis(run_root: Path) -> None:
    status = _stopped(run_root, "circuit", "recovery circuit open for run")
    assert status.next_action is not None and status.next_action.endswith("--hypothesis TEXT")


def test_pause_refuses_a_run_that_is_not_running(run_root: Path) -> None:
    t0 = time.time() - 300
    ledger = _session(run_root, valid=32, t0=t0, step=1.0)
    _close(ledger, run_root, stopped=None, now=t0 + 40)
    ledger.close()
    with pytest.raises(UserInputError, match="is finished"):
        pause_run(run_root)
    assert not (run_root / "pause.json").exists()
    result = CliRunner().invoke(app, ["pause", str(run_root)])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "nothing to pause: it has finished" in result.output


def test_a_library_driver_without_a_lock_is_running_while_its_heartbeat_is_fresh(run_root: Path) -> None:
    ledger = _session(run_root, valid=1, t0=time.time() - 10)
    ledger.close()
    assert read_status(run_root).state == "running"
    assert read_status(run_root, now=time.time() + 600).state == "stopped"


def test_pause_of_a_running_run_is_written(run_root: Path) -> None:
    ledger = _session(run_root, valid=1, t0=time.time() - 10)
    ledger.close()
    with _driver_lock(run_root):
        result = CliRunner().invoke(app, ["pause", str(run_root), "--reason", "lunch"])
        assert result.exit_code == 0, result.output
        assert json.loads((run_root / "pause.json").read_text())["reason"] == "lunch"
        assert read_status(run_root).pause_requested


def test_a_pause_is_never_read_half_written(run_root: Path) -> None:
    """The driver reads pause.json every round: it is written whole (a rename), so a read never
    finds it empty or cut (a torn read made a `pause --now` a drain; see PAUSE_SETTLE_SEC)."""
    import threading

    ledger = _session(run_root, valid=1, t0=time.time() - 10)
    ledger.close()
    torn: list[str] = []
    reads = 0
    done = threading.Event()

    def read() -> None:
        nonlocal reads
        while not done.is_set():
            with contextlib.suppress(FileNotFoundError):
                text = (run_root / "pause.json").read_text()
                reads += 1
                try:
                    json.loads(text)
                except ValueError:
                    torn.append(text)

    reader = threading.Thread(target=read)
    with _driver_lock(run_root):
        reader.start()
        try:
            for i in range(200):
                pause_run(run_root, now=bool(i % 2), reason="x" * 4000)
        finally:
            done.set()
            reader.join()
    assert reads > 0 and not torn, (reads, [t[:40] for t in torn[:3]])
    assert not [p.name for p in run_root.iterdir() if p.name.startswith(".pause.json")]  # no temporary left


def test_watch_writes_plain_lines_when_not_on_a_terminal(run_root: Path, tmp_path: Path) -> None:
    t0 = time.time() - 300
    ledger = _session(run_root, valid=7, t0=t0)
    _close(ledger, run_root, stopped="drift", detail="task t changed", now=t0 + 100)
    ledger.close()
    stream = io.StringIO()
    assert watch_run(run_root, every=0.01, stream=stream, sleep=lambda _s: None, state_root=tmp_path / "st") == 0
    lines = stream.getvalue().splitlines()
    assert lines and "run r1 (stopped, staging): 32 cells: 7 valid rows" in lines[0]
    assert "last stop: inputs changed: task t changed" in lines  # once: not in the progress line too
    assert lines[-1].startswith("next: the inputs changed since planning")  # no resume: nothing to wait for


def test_status_json_is_typed_and_complete(run_root: Path) -> None:
    ledger = _session(run_root, valid=2, t0=time.time() - 30)
    ledger.close()
    (run_root / LOCK_FILE).write_text(str(_dead_pid()))  # a driver that died 30 s in
    result = CliRunner().invoke(app, ["status", str(run_root), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["state"] == "stopped"  # nobody holds the lock: the driver is gone
    assert data["pace"]["basis"].startswith("no estimate yet: 2 rows")
    assert data["driver"]["lock_held"] is False


def test_a_dead_or_stopped_run_has_no_finish_estimate(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", reps=2)
    t0 = time.time() - 400
    roots = [plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id=f"r{i}").run_root
             for i in (1, 2)]
    ledger = _session(roots[0], valid=10, t0=t0, deadline=t0 + 4000)  # the driver was SIGKILLed
    ledger.close()
    (roots[0] / LOCK_FILE).write_text(str(_dead_pid()))
    ledger = _session(roots[1], valid=10, t0=t0, deadline=t0 + 4000)
    _close(ledger, roots[1], stopped="accounts", detail="no account can admit a cell", now=t0 + 110)
    ledger.close()
    for root in roots:
        status = read_status(root)
        assert status.state == "stopped"
        assert status.pace is not None and status.pace.estimate is not None  # the pace it had, kept
        assert status.to_json()["pace"]["finish_estimate_sec"] is None
        assert status.to_json()["pace"]["deadline_gap_rows"] is None
        text = "\n".join(status_lines(status))
        assert "rows/min" in text and "finish in" not in text and "on track" not in text


def test_an_accounts_stop_proposes_what_would_make_progress(run_root: Path) -> None:
    status = _stopped(run_root, "accounts", "no account can admit a cell without an operator: acct-a held "
                                            "(maintenance), acct-b held (maintenance); fix the accounts")
    plan, _ = _plan(run_root)
    accounts = next(i.path for i in plan.inputs if i.kind == "accounts")
    assert status.next_action == f"ray-bench accounts status --accounts {accounts}"
    assert status.to_json()["resume_action"] is None  # a resume would stop again in 0.1 s
    assert "then resume" in (status.next_action_why or "")


def test_an_accounts_stop_by_the_circuit_resumes_with_a_hypothesis(run_root: Path) -> None:
    status = _stopped(run_root, "accounts", "no account can be admitted: the recovery circuit is open for "
                                            "every account; resume with --hypothesis TEXT")
    assert status.next_action is not None and status.next_action.endswith("--hypothesis TEXT")


def test_a_preflight_that_used_every_attempt_proposes_a_rerun_not_a_resume(run_root: Path) -> None:
    plan, identity = _plan(run_root)
    t0 = time.time() - 300
    ledger = Ledger.create(run_root, run_id=plan.run_id, plan_identity=identity)
    ledger.event("run_started", {"identity": identity}, now=t0)
    cell = next(c for c in plan.cells if c.id == plan.preflight[0])
    for seq in range(plan.max_attempts):
        row = ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum="x", arm=cell.arm, rep=cell.rep,
                                   account="acct-a", backend="local", epoch=identity, preflight=True, now=t0 + seq)
        ledger.finish_attempt(row.attempt_id, status="finished", valid=False, reward=None,
                              failure_class="evaluator", fingerprint="f", counts=True, cost_usd=0.0,
                              summary=AttemptSummary(), now=t0 + seq + 0.5)
    _close(ledger, run_root, stopped="preflight", detail="preflight gate failed", now=t0 + 10)
    ledger.close()
    status = read_status(run_root)
    assert status.next_action == f"ray-bench rerun {run_root} --failed --hypothesis TEXT"
    assert "would stop at once" in (status.next_action_why or "")


def test_status_lists_the_accounts_durable_state_without_a_cluster(run_root: Path, tmp_path: Path) -> None:
    from ray_bench.accounts.store import AccountStore

    now = time.time()
    state = tmp_path / "state"
    store = AccountStore(state)
    store.record_spend("acct-a", now - 60, 1.25)
    store.save_health("acct-a", state="cooling", cooling_until=now + 7200, episodes=1, auth_failures=0,
                      last_error="usage_limit: weekly limit", events_seen=0)
    store.save_health("acct-b", state="disabled", cooling_until=float("-inf"), episodes=0, auth_failures=3,
                      last_error="auth: 401", events_seen=0)
    store.close()
    ledger = _session(run_root, valid=2, t0=now - 100)
    _close(ledger, run_root, stopped="accounts", detail="no account can admit a cell", now=now - 10)
    ledger.close()

    text = CliRunner().invoke(app, ["status", str(run_root), "--state-root", str(state)])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    cooling = next(line for line in lines if line.startswith("account acct-a: cooling until "))
    assert "(usage_limit: weekly limit); spent $1.25 [state root]" in cooling
    assert "account acct-b: disabled (auth: 401); spent $0.00 [state root]" in lines
    data = json.loads(CliRunner().invoke(app, ["status", str(run_root), "--json", "--state-root",
                                               str(state)]).stdout)
    accounts = {a["name"]: a for a in data["accounts"]}
    assert accounts["acct-a"]["cooling_until"] == pytest.approx(now + 7200, abs=5)
    assert accounts["acct-b"]["state"] == "disabled" and accounts["acct-b"]["recommended_parallelism"] == 0
    # a state root the accounts never used: their configured state, said to come from the config
    fresh = json.loads(CliRunner().invoke(app, ["status", str(run_root), "--json", "--state-root",
                                                str(tmp_path / "fresh")]).stdout)
    assert {a["source"] for a in fresh["accounts"]} == {"config"}
    assert {a["state"] for a in fresh["accounts"]} == {"healthy"}


def test_a_spend_with_attempts_of_unknown_cost_is_shown_as_a_lower_bound(run_root: Path) -> None:
    t0 = time.time() - 300
    ledger = _session(run_root, valid=2, t0=t0)  # two attempts of $0.01
    plan, identity = _plan(run_root)
    cell = plan.cells[2]
    row = ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum="x", arm=cell.arm, rep=cell.rep,
                               account="acct-a", backend="local", epoch=identity, preflight=False, now=t0 + 30)
    ledger.finish_attempt(row.attempt_id, status="finished", valid=True, reward=1.0, failure_class=None,
                          fingerprint=None, counts=True, cost_usd=None, charged_usd=0.25,
                          summary=AttemptSummary(), now=t0 + 40)
    _close(ledger, run_root, stopped="spend", detail="limit", now=t0 + 50)
    ledger.close()
    status = read_status(run_root)
    assert (status.spend_usd, status.unknown_cost) == (pytest.approx(0.02), 1)
    assert status.to_json()["unknown_cost_attempts"] == 1
    assert "spend: at least $0.02 (1 attempt of unknown cost)" in status_lines(status)


def test_a_spend_of_unknown_costs_alone_is_unknown_never_at_least_zero(run_root: Path) -> None:
    """Every attempt of a model with no list price (issue 54: gemini-cli before its prices): the
    spend is said unknown, in status, settle and the reports alike (one rule: said_spend)."""
    import dataclasses

    from ray_bench.ledger.rows import said_spend
    status = dataclasses.replace(read_status(run_root), spend_usd=0.0, unknown_cost=3, lower_bound_cost=0)
    line = next(x for x in status_lines(status) if x.startswith("spend:"))
    assert line == "spend: unknown (3 attempts of unknown cost)", line
    assert said_spend(0.0, 3, 0, ".4f", unit="", at_least=">= ") == "unknown"
    assert said_spend(0.02, 1) == "at least $0.02" and said_spend(0.02, 0, 1) == "at least $0.02"
    assert said_spend(0.02, 0) == "$0.02" and said_spend(0.0, 0) == "$0.00"  # known to be nothing


def test_a_driver_suspended_by_sigstop_is_stopped_with_kill_cont_as_the_next_action(run_root: Path) -> None:
    """Issue 58: a SIGSTOPped driver holds its lock and lives, so status said `running`."""
    import signal

    t0 = time.time() - 100
    _session(run_root, valid=10, t0=t0, open_attempts=2).close()
    holder = subprocess.Popen(  # a driver of its own process: it takes the lock, says so, and waits
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"h = open({str(run_root / LOCK_FILE)!r}, 'w'); fcntl.flock(h, fcntl.LOCK_EX)\n"
         "h.write(str(os.getpid())); h.flush(); print('held', flush=True); time.sleep(300)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        os.utime(run_root / LOCK_FILE, (1.0, 1.0))  # taken before the session began
        assert read_status(run_root, now=t0 + 100).state == "running"
        os.kill(holder.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while (status := read_status(run_root, now=t0 + 100)).state != "stopped" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status.state == "stopped" and status.reason is not None and "suspended" in status.reason
        assert status.next_action == f"kill -CONT {holder.pid}"
        os.kill(holder.pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while (status := read_status(run_root, now=t0 + 100)).state != "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status.state == "running"
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_pause_reads_the_state_from_the_events_not_the_attempts(run_root: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`pause` asks the state only (issue 57): it agrees with `status` in every session's state,
    and reads no attempt, whose number grows with the run; only the last heartbeat's time."""
    from ray_bench.status.read import read_phase

    t0 = time.time() - 300
    ledger = _session(run_root, valid=3, t0=t0, open_attempts=1)
    ledger.event(HEARTBEAT_EVENT, {"pid": os.getpid(), "inflight": 1}, now=time.time() - 5)
    states = []
    for when, close in ((time.time(), None), (time.time() + 600, None), (time.time(), "paused"),
                        (time.time(), "circuit")):
        if close is not None:
            _close(ledger, run_root, stopped=close, now=t0 + 200)
        expected = read_status(run_root, now=when).state
        with monkeypatch.context() as m:
            m.setattr(Ledger, "attempts", lambda self: pytest.fail("pause read the attempts"))
            assert read_phase(run_root, now=when)[0] == expected
            if when > time.time() + 60:  # pause reads the clock itself: only the state's reader is asked
                pass
            elif expected == "running":
                request = pause_run(run_root)
                assert request["resume_action"].endswith(_plan(run_root)[1])
                (run_root / "pause.json").unlink()
            else:
                with pytest.raises(UserInputError, match=f"is {expected}"):
                    pause_run(run_root)
        states.append(expected)
    ledger.close()
    assert states == ["running", "stopped", "paused", "stopped"]
