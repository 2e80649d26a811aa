"""Whole runs on the ``daytona`` backend against the local Daytona-compatible fixture
(``tests/support/daytona_server.py``): through the driver on Ray with a third of the creates
answered 429, a driver SIGKILLed mid-run whose sandboxes ``ray-bench audit --cleanup`` finds
and removes, and the quickstart.

Credentials reach the Ray workers this way: the in-process run (the shared test Ray instance)
names ``api_url`` in the backend options and a credential route, :data:`KEY_ENV`, that this
module sets when pytest imports it, i.e. during collection, before any test starts Ray, so the
workers inherit it. The subprocess runs get ``DAYTONA_API_URL``/``DAYTONA_API_KEY`` in their
environment, as an operator would export them, and the plan names no URL or key at all.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("daytona", reason="the daytona extra is not installed")

from support.daytona_fixtures import reset
from support.daytona_server import DaytonaServer, Faults
from support.driver_process import DriverProcess, cli_env, ledger_query, run_cli, wait_for
from support.runs import ledger_rows, plan_and_run
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.sandboxes.base import LABEL_RUN

pytestmark = [pytest.mark.daytona, pytest.mark.docker, pytest.mark.ray, pytest.mark.slow]

#: The credential route of the in-process run. Not a secret: the fixture accepts only this.
KEY_ENV = "RAY_BENCH_TEST_DAYTONA_RUNS_KEY"
os.environ.setdefault(KEY_ENV, "fake-daytona-runs-key")

TASKS = ["hello-world", "fizzbuzz", "sum-list"]


@pytest.fixture(scope="module")
def server(docker_client: Any, base_image: str) -> Iterator[DaytonaServer]:
    srv = DaytonaServer(
        docker_client=docker_client, default_image=base_image, api_key=os.environ[KEY_ENV]
    ).start()
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def fresh_server(server: DaytonaServer) -> Iterator[DaytonaServer]:
    """No faults unless a test sets them; after each test the fixture holds no sandbox."""
    reset(server)
    yield server
    left_ids = server.sandbox_ids()
    left = server.containers()
    for container in left:
        container.remove(force=True, v=True)
    assert (left_ids, left) == ([], []), "the test left sandboxes on the fixture"


def _env(server: DaytonaServer) -> dict[str, str]:
    return cli_env(server.env())


def _run_sandboxes(server: DaytonaServer, run_id: str) -> list[str]:
    """Ids of the fixture's live sandboxes labelled with ``run_id`` (through its API state)."""
    return sorted(
        b.id
        for b in list(server._boxes.values())
        if b.state != "destroyed" and (b.body.get("labels") or {}).get(LABEL_RUN) == run_id
    )


def test_run_with_a_third_of_creates_rate_limited(
    tmp_path: Path, server: DaytonaServer, base_image: str
) -> None:
    # seed 1 answers 429 to creates 1, 4, 7, 14, 16, ... (3 of the first 10) and never twice
    # in a row, well inside the backend's max_rate_limit_retries (5).
    server.faults = Faults(create_429_fraction=1 / 3, retry_after_sec=0.5, seed=1)
    options = {"api_url": server.api_url, "api_key_env": KEY_ENV}
    suite, accounts = make_suite(
        tmp_path / "s", tasks=TASKS, backend="daytona",
        backends={"daytona": {"image": base_image, "max_sandboxes": 3, "options": options}},
    )
    started = time.monotonic()
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs", run_id="dt-429")
    wall = time.monotonic() - started
    assert outcome.exit_code == 0, outcome
    attempts, rows = ledger_rows(root)
    cells = len(TASKS) * 2
    assert len(rows) == cells
    assert all(a.terminal for a in attempts)
    assert server.counts["create_429"] > 0, "the fault must have fired"
    # The backend waits out each 429 for its Retry-After and retries the create (up to
    # max_rate_limit_retries); no create here sees more than two in a row, so every 429 is
    # absorbed inside `backend.create` and never reaches the driver: not as a failed
    # attempt, let alone one blamed on the task. One attempt per cell, all valid.
    assert [a for a in attempts if a.failure_class == "task"] == []
    assert [a for a in attempts if not a.valid] == []
    assert len(attempts) == cells
    # every create the fixture refused was asked again: the 429s plus one success per sandbox
    assert len(server.create_requests) == server.counts["create_429"] + server.counts["created"]
    assert server.counts["created"] >= cells
    # nothing left: not in the fixture's API, not as a container
    assert _run_sandboxes(server, "dt-429") == []
    assert server.containers() == []
    print(f"\n429 run: {cells} cells, {server.counts['create_429']} 429s, {wall:.1f}s")


def test_a_run_under_a_full_organisation_quota_learns_the_pool_and_finishes(
    tmp_path: Path, server: DaytonaServer, base_image: str
) -> None:
    """The plan allows 4 sandboxes; the organisation's quota takes 2 vCPU (1 each): the
    refusals are capacity, not failures of the run, and admission runs at what fits. Creates
    go at the organisation pool's ``creates_per_minute`` (30: one per 2 s after a burst of 3)."""
    server.faults = Faults(quota_vcpu=2, delete_delay_sec=0.3)
    rate, burst = 30.0, 3
    options = {"api_url": server.api_url, "api_key_env": KEY_ENV,
               "pool": {"vcpu": 64, "memory_gib": 64, "disk_gib": 640, "creates_per_minute": rate}}
    arm = {"command": 'sleep 2; sh "$SOLUTION_DIR/solve.sh"', "agent_dir": "agents",
           "expose_solution": True}
    suite, accounts = make_suite(
        tmp_path / "s", tasks=TASKS, backend="daytona", preflight_cells=0,
        backends={"daytona": {"image": base_image, "max_sandboxes": 4, "options": options,
                              "resources": {"cpus": 1}}},
        arms=[{"name": "baseline", "role": "baseline", **arm}, {"name": "mcp", "role": "variant", **arm}],
        accounts=[{"name": "acct-a", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
                   "limits": {"max_concurrent": 4}}],
    )
    outcome, root = plan_and_run(suite, accounts, tmp_path / "runs", run_id="dt-quota")
    assert outcome.exit_code == 0, outcome
    attempts, rows = ledger_rows(root)
    assert len(rows) == len(TASKS) * 2
    refused = [a for a in attempts if not a.valid]
    assert server.counts["quota_400"] > 0, "the quota must have been reached"
    assert refused and all(a.failure_class == "capacity" for a in refused)
    assert _run_sandboxes(server, "dt-quota") == []
    # every attempt is one create: never more in a window than the burst and the rate allow
    starts = sorted(a.started_at for a in attempts)
    for i, first in enumerate(starts):
        for j in range(i, len(starts)):
            assert j - i + 1 <= burst + (starts[j] - first + 0.5) * rate / 60, (i, j, starts)


def test_sigkilled_driver_leaves_sandboxes_that_audit_cleanup_removes(
    tmp_path: Path, server: DaytonaServer, base_image: str
) -> None:
    # The plan names no URL and no key: the driver and the audit read the fixture's
    # DAYTONA_API_URL / DAYTONA_API_KEY from their environment.
    agent = 'sleep 30; sh "$SOLUTION_DIR/solve.sh"'
    arm = {"command": agent, "agent_dir": "agents", "expose_solution": True}
    suite, accounts = make_suite(
        tmp_path / "s", tasks=TASKS[:2], backend="daytona", preflight_cells=0,
        backends={"daytona": {"image": base_image, "max_sandboxes": 4}},
        arms=[{"name": "baseline", "role": "baseline", **arm},
              {"name": "mcp", "role": "variant", **arm}],
    )
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="dt-kill")
    root = planned.run_root
    env = _env(server)
    driver = DriverProcess(root / "launch-plan.json", planned.identity, tmp_path / "logs", env=env)
    started = time.monotonic()
    try:
        driver.start()

        def agents_running() -> bool:
            # every cell has an open attempt and its sandbox is up on the fixture
            open_attempts = ledger_query(
                root, "SELECT a.attempt_id FROM attempts a LEFT JOIN results r "
                      "USING (attempt_id) WHERE r.attempt_id IS NULL")
            return len(open_attempts) == 4 and len(_run_sandboxes(server, "dt-kill")) == 4

        # A bound on a hang, not a speed: the driver starts its own Ray first (18-91 s at load 13-64).
        wait_for(agents_running, 300, "four agents running in Daytona sandboxes", interval=0.2,
                 alive=driver)
        time.sleep(1.0)  # let the agents' `sleep 30` start
        driver.kill()
        driver.reap()  # and the Ray instance the dead driver started (its own process group)
    finally:
        driver.reap()
    left = _run_sandboxes(server, "dt-kill")
    assert len(left) == 4, "the dead driver should have left its four sandboxes"
    assert len(server.containers()) == 4

    audit = run_cli("audit", str(root), "--json", env=env, timeout=120)
    assert audit.returncode == 1, audit.stdout + audit.stderr
    report = json.loads(audit.stdout)
    assert report["clean"] is False
    assert report["errors"] == []
    assert sorted(r["id"] for r in report["residue"]) == left
    assert all(r["backend"] == "daytona" for r in report["residue"])
    assert _run_sandboxes(server, "dt-kill") == left  # a dry audit removes nothing

    cleanup = run_cli("audit", str(root), "--cleanup", env=env, timeout=120)
    assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
    assert "found 4, removed 4, residue 0" in cleanup.stdout
    assert _run_sandboxes(server, "dt-kill") == []
    assert server.containers() == []
    again = run_cli("audit", str(root), env=env, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    print(f"\nkill + audit: {time.monotonic() - started:.1f}s")


def test_quickstart_on_daytona(tmp_path: Path, server: DaytonaServer, base_image: str) -> None:
    started = time.monotonic()
    done = run_cli("quickstart", "--backend", "daytona", "--workdir", str(tmp_path / "qs"),
                   env={**_env(server), "RAY_BENCH_STATE_ROOT": str(tmp_path / "state")},
                   timeout=500)
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_root,) = (tmp_path / "qs" / "runs").iterdir()
    summary = json.loads((run_root / "run-summary.json").read_text())
    assert summary["counts"]["valid"] == 32
    assert summary["exit_code"] == 0
    _, rows = ledger_rows(run_root)
    assert len(rows) == 32
    assert server.counts["created"] >= 32
    assert _run_sandboxes(server, run_root.name) == []
    assert server.containers() == []
    # ~55-60 s on a busy 2-core machine (32 cells, 4 sandboxes at a time, one Ray start)
    print(f"\nquickstart on daytona: {wall:.1f}s")
