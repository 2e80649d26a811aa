"""Two ``execute``s, each on a Ray instance of its own, on one state root and the same
accounts: the limits hold across both (they are granted through ``accounts.sqlite``, not by
either cluster's actors alone), and a slot one run frees goes to the other run's waiting cells
at once, not after the first run's leases time out. The first joins the session's shared Ray
(``--address``), the second starts a local one: still two clusters, each with its own admission
actor for the state root, at one local start (30-70 s here) where two took twice that.

Measured three ways: the leases live in the state root, sampled every 50 ms while both run (an
upper bound of what ran: a lease is granted before its cell's sandbox and released after it);
both ledgers' attempt intervals merged (what the drivers recorded); and the window's starts.
The figures are printed (``pytest -s``) for the record."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from support.driver_process import DriverProcess, cli_env, ledger_query, wait_for
from support.ray_local import shared_address
from support.shared_limits import idle_gaps, intervals, peak, sample_leases
from support.suites import make_suite

from ray_bench.accounts.core import Running
from ray_bench.accounts.keepers import LEASE_TTL_SEC
from ray_bench.accounts.store import AccountStore, HeldLease
from ray_bench.api import plan_run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SLOTS, WINDOW = "shared-slots", "shared-window"
LIMIT = {SLOTS: 2, WINDOW: 3}
WINDOW_CELLS = 6
TASKS = ["hello-world", "sum-list", "fizzbuzz"]
CELLS = len(TASKS) * 2 * 2  # per run: tasks x arms x reps


@pytest.mark.timeout(1800)  # a local Ray start: minutes on a loaded 2-core host
def test_two_executes_on_two_rays_share_the_accounts_limits(tmp_path: Path) -> None:
    state = tmp_path / "state"
    accounts = [
        {"name": SLOTS, "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}, "limits": {"max_concurrent": 2}},
        {"name": WINDOW, "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_B"}},
         "limits": {"max_concurrent": 3, "window": {"hours": 5, "max_cells": WINDOW_CELLS}}},
    ]
    # The agents wait until both drivers have their Ray (the local start takes 10 s to minutes on
    # a loaded host): the first run's cells hold their leases meanwhile, and the two compete
    # for every slot after.
    go = tmp_path / "go"
    arm = {"command": f'while [ ! -e {go} ]; do sleep 0.2; done; sleep 2; sh "$SOLUTION_DIR/solve.sh"',
           "agent_dir": "agents", "expose_solution": True}
    drivers: dict[str, DriverProcess] = {}
    roots: dict[str, Path] = {}
    joined = {"one": ("--address", shared_address()), "two": ()}
    for name in ("one", "two"):
        suite, accounts_file = make_suite(
            tmp_path / name, tasks=TASKS, reps=2, preflight_cells=0, accounts=accounts,
            backends={"local": {"max_sandboxes": 8, "options": {"root": str(tmp_path / "sbx")}}},
            arms=[{"name": "baseline", "role": "baseline", **arm}, {"name": "mcp", "role": "variant", **arm}])
        planned = plan_run(suite=suite, accounts=accounts_file, runs_dir=tmp_path / "runs", run_id=f"two-rays-{name}")
        roots[name] = planned.run_root
        drivers[name] = DriverProcess(planned.run_root / "launch-plan.json", planned.identity, tmp_path / "logs",
                                      name=name, env=cli_env({"RAY_BENCH_STATE_ROOT": str(state)}),
                                      extra_args=("--no-metrics", *joined[name]))
    samples: list[dict[str, int]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_leases, args=(state, stop, samples))
    sampler.start()
    try:
        for name, driver in drivers.items():  # one after the other: two local starts at once hung here
            driver.start()
            # the driver's loop runs (its Ray, runners and gate are up: a minute after "Ray ready" here)
            wait_for(lambda r=roots[name]: bool(ledger_query(r, "SELECT seq FROM events WHERE kind = 'run_started'")),
                     1200, "run_started", interval=0.5, alive=driver)
        go.touch()
        codes = {name: driver.wait(timeout=600) for name, driver in drivers.items()}
    finally:
        stop.set()
        sampler.join()
        for driver in drivers.values():
            driver.reap()
    assert codes == {"one": 0, "two": 0}, {n: d.stderr[-2000:] for n, d in drivers.items()}

    runs = {name: intervals(root) for name, root in roots.items()}
    assert sum(len(rows) for rows in runs.values()) == 2 * CELLS
    lease_peak = {a: max((s.get(a, 0) for s in samples), default=0) for a in LIMIT}
    ledger_peak = {a: peak([(s, f) for rows in runs.values() for acct, s, f in rows if acct == a]) for a in LIMIT}
    window_starts = sum(1 for rows in runs.values() for a, _, _ in rows if a == WINDOW)
    gaps, crossed = idle_gaps(runs, SLOTS, LIMIT[SLOTS])
    both = {a: {n for n, rows in runs.items() if any(acct == a for acct, _, _ in rows)} for a in LIMIT}
    print(f"\nlease peak {lease_peak}, ledger peak {ledger_peak} (limits {LIMIT}); window starts "
          f"{window_starts}/{WINDOW_CELLS}; release->next start on {SLOTS}: {len(gaps)} gaps, max "
          f"{max(gaps, default=0):.2f} s, median {sorted(gaps)[len(gaps) // 2] if gaps else 0:.2f} s; "
          f"to the other run: {len(crossed)}, max {max(crossed, default=0):.2f} s; {len(samples)} samples")

    assert len(samples) > 100
    for account, limit in LIMIT.items():
        assert lease_peak[account] <= limit, (account, lease_peak)
        assert ledger_peak[account] <= limit, (account, ledger_peak)
    assert both[SLOTS] == {"one", "two"}, both  # both runs used the account: they shared it
    assert lease_peak[SLOTS] == LIMIT[SLOTS]  # used up to its limit, not idle
    assert window_starts == WINDOW_CELLS  # the window, used by both, allowed its 6 starts, no more
    # No idle gap waiting for a lease to time out: a freed slot went to a waiting cell (of the
    # other run too) well within the TTL an expiry would have taken.
    assert crossed, "no slot passed from one run to the other"
    assert max(gaps) < LEASE_TTL_SEC, gaps


@pytest.mark.timeout(1800)  # a local Ray start: minutes on a loaded 2-core host
def test_a_state_root_another_host_grants_through_is_refused_before_any_start(tmp_path: Path) -> None:
    """Another machine's Ray holds live leases in this state root (a network filesystem):
    SQLite cannot arbitrate between them, so `execute` says to join that cluster, exit 2."""
    state = tmp_path / "state"
    store = AccountStore(state)
    far = time.time() + 600  # renewed as a live driver renews, through this test's run
    store.hold_leases(SLOTS, [HeldLease("far-run/c1#0", "far-run", Running(time.time(), 0, False))], far)
    store._db.execute("UPDATE leases SET host = 'gpu-box-7:0f3c'")
    store.close()
    accounts = [{"name": SLOTS, "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}}, "limits": {"max_concurrent": 2}}]
    local = {"max_sandboxes": 2, "options": {"root": str(tmp_path / "sbx")}}
    suite, accounts_file = make_suite(tmp_path / "s", tasks=["hello-world"], reps=1, preflight_cells=0,
                                      accounts=accounts, backends={"local": local})
    planned = plan_run(suite=suite, accounts=accounts_file, runs_dir=tmp_path / "runs", run_id="far-host")
    driver = DriverProcess(planned.run_root / "launch-plan.json", planned.identity, tmp_path / "logs",
                           env=cli_env({"RAY_BENCH_STATE_ROOT": str(state)}), extra_args=("--no-metrics",))
    try:
        code = driver.start().wait(timeout=1500)
    finally:
        driver.reap()
    # the progress lines ("starting Ray", "Ray ready in ...") and one error line
    lines = [line for line in driver.stderr.splitlines() if line.startswith("error:")]
    assert code == 2, driver.stderr[-2000:]
    assert len(lines) == 1, driver.stderr[-2000:]
    assert "gpu-box-7" in lines[0] and str(state) in lines[0] and "--address" in lines[0]
    assert ledger_query(planned.run_root, "SELECT attempt_id FROM attempts") == []
    assert not (tmp_path / "sbx").exists() or not any((tmp_path / "sbx").iterdir())
