"""Plan and execute suites in-process: on the shared test Ray instance (:func:`plan_and_run`),
or with no Ray at all (:func:`plan_and_run_here`) for driver-logic tests."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ray_bench.api import plan_run
from ray_bench.cells.nodes import NodeCheck
from ray_bench.ledger import Ledger, accepted_rows
from ray_bench.onray.gate import actor_gate
from ray_bench.onray.pool import RayPool
from ray_bench.plan.store import confirm_plan
from ray_bench.sandboxes import make_backend
from ray_bench.sandboxes.supervisor import HostSupervision
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.driver import Driver, RunOptions, RunOutcome
from support.local_pool import ConcurrentPool
from support.ray_local import ensure_ray, reset_shared_actors, set_test_routes


def plan_and_run(suite: Path, accounts: Path, runs: Path, run_id: str = "r1", *,
                 options: RunOptions | None = None, **plan_kw: Any) -> tuple[RunOutcome, Path]:
    ensure_ray()
    result = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id=run_id, **plan_kw)
    return execute(result.run_root, result.identity, options), result.run_root


def execute(run_root: Path, identity: str, options: RunOptions | None = None, *,
            fresh_accounts: bool = True, node_checks: list[NodeCheck] | None = None) -> RunOutcome:
    """Run (or resume) a plan in-process. ``fresh_accounts=False`` keeps the account actors
    of the previous run, as a real resume on a live cluster does; ``node_checks``: as
    ``execute_run`` passes them (None: not checked)."""
    ensure_ray()
    if fresh_accounts:
        reset_shared_actors()
    plan, identity = confirm_plan(run_root / "launch-plan.json", identity)
    opts = options or RunOptions()
    opts = replace(opts, tick_sec=min(opts.tick_sec, 0.1))
    return Driver(plan, identity, run_root, RayPool(opts.runners_per_node), actor_gate(plan, opts.state_root),
                  HostSupervision.of(plan, opts.read_available_mb), options=opts, node_checks=node_checks).run()


def plan_and_run_here(suite: Path, accounts: Path, runs: Path, run_id: str = "r1", *,
                      options: RunOptions | None = None, **plan_kw: Any) -> tuple[RunOutcome, Path]:
    """:func:`plan_and_run` with the real driver, runner and sandbox backend in this process and
    account admission in an in-process gate: no Ray, so no Ray worker process per run (an
    in-process run on the shared Ray starts its runner and admission actors, ~6.5 s each at load
    5, ~20-40 s a run here). For tests whose subject is the driver's decisions, not Ray's."""
    result = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id=run_id, **plan_kw)
    return execute_here(result.run_root, result.identity, options), result.run_root


def execute_here(run_root: Path, identity: str, options: RunOptions | None = None) -> RunOutcome:
    """Run (or resume) a plan as :func:`plan_and_run_here` does: the plan's one backend, its
    attempts side by side in this process as the driver's admission allows, fresh accounts."""
    set_test_routes()
    plan, identity = confirm_plan(run_root / "launch-plan.json", identity)
    (name, config), = plan.backends.items()
    opts = options or RunOptions()
    opts = replace(opts, tick_sec=min(opts.tick_sec, 0.1))
    pool = ConcurrentPool(make_backend(name, **config.options))
    try:
        return Driver(plan, identity, run_root, pool, CoreGate(plan.accounts),
                      HostSupervision.of(plan, opts.read_available_mb), options=opts).run()
    finally:
        pool.close()


def ledger_rows(run_root: Path) -> tuple[list[Any], dict[str, Any]]:
    with Ledger.reading(run_root) as ledger:
        attempts = ledger.attempts()
    return attempts, accepted_rows(attempts)
