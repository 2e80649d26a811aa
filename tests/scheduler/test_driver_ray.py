"""The driver on a real (shared, local) Ray instance with the local backend and scripted
agents: what must see Ray (both runner processes, cancels reaching the runners, the admission
actor's durable account state and holds). The driver's other decisions, without Ray, are in
test_driver_decisions.py."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from support.runs import execute, ledger_rows, plan_and_run
from support.suites import make_suite

from ray_bench.ledger import Ledger
from ray_bench.runroot import RunPaths

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _arm(name: str, role: str, command: str, **kw: object) -> dict[str, object]:
    return {"name": name, "role": role, "command": command, "agent_dir": "agents", **kw}


def _local(tmp_path: Path, pool: int = 4) -> dict[str, object]:
    return {"local": {"max_sandboxes": pool, "options": {"root": str(tmp_path / "sbx")}}}


def test_full_run_one_accepted_row_per_cell_on_both_runners_and_a_resume_runs_none_again(tmp_path: Path) -> None:
    # One run for three checks that each paid a run of their own (the run's actors are new
    # worker processes each time): a full run, its cells shared by the runners, a no-op resume.
    from ray_bench.scheduler.driver import RunOptions

    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "sum-list", "fizzbuzz"], reps=2,
                                 backends=_local(tmp_path))
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs", options=RunOptions(runners_per_node=2))
    assert outcome.exit_code == 0 and outcome.stopped is None
    assert outcome.counts == {"pending": 0, "running": 0, "valid": 12, "failed": 0}
    attempts, rows = ledger_rows(root)
    assert len(rows) == 12 and len(attempts) == 12
    for row in attempts:
        assert (RunPaths(root).attempt(row) / "result.json").is_file()
    assert list((tmp_path / "sbx").iterdir()) == []
    pids = {json.loads((RunPaths(root).attempt(a) / "result.json").read_text())["pid"]
            for a in attempts}
    assert len(pids) == 2  # both runner processes ran cells
    plan_identity = Ledger.open_readonly(root).meta()["plan_identity"]
    again = execute(root, plan_identity)
    assert again.exit_code == 0 and again.attempts_run == 0
    assert len(ledger_rows(root)[0]) == 12


def test_pause_now_cancels_running_cells(tmp_path: Path) -> None:
    # Agents that would sleep 10 minutes: a run that waited for them instead of cancelling them
    # takes more than 600 s; one that cancels ends far sooner, however loaded the machine is.
    suite, accounts = make_suite(
        tmp_path / "s", tasks=["hello-world", "sum-list"], backends=_local(tmp_path, pool=4), preflight_cells=0,
        arms=[_arm("baseline", "baseline", "sleep 600"), _arm("mcp", "variant", "sleep 600")])
    from ray_bench.api import pause_run

    runs = tmp_path / "runs"

    def pause_once_running() -> None:
        # bounded, and the thread is a daemon: a run that fails before its ledger exists must
        # fail this test, not hang pytest's exit on a thread that waits forever
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            if (runs / "r1" / "ledger.sqlite").exists():
                try:
                    if ledger_rows(runs / "r1")[0]:
                        break
                except Exception:  # the ledger is being created; poll again
                    pass
            time.sleep(0.2)
        else:
            return
        paused_at.append(time.monotonic())
        pause_run(runs / "r1", now=True)

    paused_at: list[float] = []
    thread = threading.Thread(target=pause_once_running, daemon=True)
    thread.start()
    outcome, root = plan_and_run(suite, accounts, runs)
    thread.join()
    assert paused_at and time.monotonic() - paused_at[0] < 300
    assert outcome.stopped == "paused"
    attempts, _ = ledger_rows(root)
    assert attempts and {a.status for a in attempts} == {"cancelled"}
    # cancelled mid-agent: of unknown cost, charged at the cell's expected cost, never $0 (issue 25)
    assert {a.cost_usd for a in attempts} == {None} and all((a.charged_usd or 0) > 0 for a in attempts)
    assert list((tmp_path / "sbx").iterdir()) == []


def test_resource_halt_stops_launching_and_blocks_resume_until_cleared(tmp_path: Path) -> None:
    from ray_bench.api import execute_run
    from ray_bench.errors import HaltActiveError
    from ray_bench.scheduler.driver import RunOptions

    suite, accounts = make_suite(
        tmp_path / "s", reps=2, backends=_local(tmp_path, pool=2), preflight_cells=0, host_reserve_mb=512,
        arms=[_arm("baseline", "baseline", "sleep 0.5"), _arm("mcp", "variant", "sleep 0.5")])
    readings = iter([4096, 4096, 100])  # plenty, plenty, then pressure for good

    def available() -> int:
        return next(readings, 100)

    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs",
                                 options=RunOptions(read_available_mb=available, supervisor_every_sec=0.5))
    assert outcome.stopped == "halt" and outcome.exit_code == 1
    halt = json.loads((root / "resource-halt.json").read_text())
    assert "under the reserve of 512 MiB" in halt["reason"]
    assert outcome.counts["pending"] > 0
    attempts, _ = ledger_rows(root)
    assert all(a.terminal for a in attempts)  # running cells finished

    identity = Ledger.open_readonly(root).meta()["plan_identity"]
    with pytest.raises(HaltActiveError):
        execute(root, identity)
    resumed = execute_run(plan_path=root / "launch-plan.json", confirm=identity, options=RunOptions(),
                          clear_halt=root / "resource-halt.json", clearance_reason="moved the other job away")
    assert resumed.exit_code == 0
    archived = list((root / "halts").iterdir())
    assert len(archived) == 1 and "moved the other job away" in archived[0].read_text()
    assert not (root / "resource-halt.json").exists()


def test_held_and_expiring_accounts_are_not_admitted(tmp_path: Path) -> None:
    from ray_bench.accounts.holds import write_hold
    from ray_bench.scheduler.driver import RunOptions

    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    # The login expires in a minute: less than a cell's horizon (agent + verifier limits).
    (home / ".claude" / ".credentials.json").write_text(json.dumps(
        {"claudeAiOauth": {"expiresAt": int((time.time() + 60) * 1000)}}))
    accounts = [
        {"name": "held-one", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}, "limits": {"max_concurrent": 2}},
        {"name": "expiring", "route": {"home": str(home)}, "limits": {"max_concurrent": 2}},
        {"name": "good", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_B"}}, "limits": {"max_concurrent": 2}},
    ]
    suite, accounts_file = make_suite(tmp_path / "s", tasks=["hello-world", "sum-list"], accounts=accounts,
                                      backends=_local(tmp_path))
    state = tmp_path / "state"
    write_hold(state, "held-one", hold=True, reason="test")
    outcome, root = plan_and_run(suite, accounts_file, tmp_path / "runs",
                                 options=RunOptions(state_root=state))
    assert outcome.exit_code == 0
    attempts, _ = ledger_rows(root)
    assert {a.account for a in attempts} == {"good"}


def test_a_failing_account_probe_disables_the_account_before_the_fan_out(tmp_path: Path) -> None:
    accounts = [
        {"name": "acct-a", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}, "limits": {"max_concurrent": 3},
         "probe_command": "true"},
        {"name": "acct-b", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_B"}}, "limits": {"max_concurrent": 3},
         "probe_command": "echo 'HTTP 401 Unauthorized' >&2; exit 1"},
    ]
    suite, accounts_file = make_suite(tmp_path / "s", tasks=["hello-world", "sum-list"], reps=2,
                                      backends=_local(tmp_path), accounts=accounts)
    outcome, root = plan_and_run(suite, accounts_file, tmp_path / "runs")
    assert outcome.exit_code == 0 and outcome.counts["valid"] == 8
    ledger = Ledger.open_readonly(root)
    probes = {e.data["account"]: e.data for e in ledger.events("account_probe")}
    assert probes["acct-a"]["verdict"] == "ok" and probes["acct-b"]["verdict"] == "auth"
    assert probes["acct-b"]["effect"] == "disable" and probes["acct-b"]["when"] == "before the fan-out"
    # The probe ran before the first attempt, and the disabled account got none of the 8 attempts
    # (before, a failing probe left the account healthy and it took half the cells).
    attempts = ledger_rows(root)[0]
    assert {a.account for a in attempts} == {"acct-a"} and len(attempts) == 8
    first = min(a.started_at for a in attempts)
    assert all(e.ts <= first for e in ledger.events("account_probe"))
    from ray_bench.accounts.store import AccountStore
    from ray_bench.state import default_state_root

    store = AccountStore(default_state_root())
    try:
        assert store.health_state("acct-b") == "disabled"
        assert [e.kind for e in store.events_after("acct-b", 0)] == ["probe:disable"]
    finally:
        store.close()
