"""Plan and execute suites in-process on the shared test Ray instance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray_bench.api import plan_run
from ray_bench.cells.pool import RayPool
from ray_bench.ledger import Ledger, accepted_rows
from ray_bench.plan.store import confirm_plan
from ray_bench.scheduler.driver import Driver, RunOptions, RunOutcome
from support.ray_local import ensure_ray, reset_shared_actors


def plan_and_run(suite: Path, accounts: Path, runs: Path, run_id: str = "r1", *,
                 options: RunOptions | None = None, **plan_kw: Any) -> tuple[RunOutcome, Path]:
    ensure_ray()
    result = plan_run(suite=suite, accounts=accounts, runs_dir=runs, run_id=run_id, **plan_kw)
    return execute(result.run_root, result.identity, options), result.run_root


def execute(run_root: Path, identity: str, options: RunOptions | None = None, *,
            fresh_accounts: bool = True) -> RunOutcome:
    """Run (or resume) a plan in-process. ``fresh_accounts=False`` keeps the account actors
    of the previous run, as a real resume on a live cluster does."""
    ensure_ray()
    if fresh_accounts:
        reset_shared_actors()
    plan, identity = confirm_plan(run_root / "launch-plan.json", identity)
    opts = options or RunOptions()
    opts.tick_sec = min(opts.tick_sec, 0.1)
    return Driver(plan, identity, run_root, RayPool(opts.runners_per_node), options=opts).run()


def ledger_rows(run_root: Path) -> tuple[list[Any], dict[str, Any]]:
    ledger = Ledger.open_readonly(run_root)
    try:
        attempts = ledger.attempts()
    finally:
        ledger.close()
    return attempts, accepted_rows(attempts)
