"""A plan on the virtual clock with the real driver, one session at a time (the in-process
runner pool, the account cores shared across sessions as the named actors are)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ray_bench.accounts.core import AccountCore
from ray_bench.accounts.health import HealthPolicy
from ray_bench.accounts.limits import Tuning
from ray_bench.cells.inprocess import InProcessPool
from ray_bench.clock import FakeClock
from ray_bench.ledger.store import AttemptRow, Ledger
from ray_bench.sandboxes.supervisor import Supervision
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.driver import Driver, RunOptions, RunOutcome
from ray_bench.scheduler.ports import RunnerPool
from ray_bench.sim.driven import plan_for, roomy_host
from ray_bench.sim.workload import build_workload, parse_spec
from ray_bench.sim.world import SimWorld

SPEC: dict[str, Any] = {
    "seed": 5,
    "suite": {"tasks": 4, "arms": ["baseline", "mcp"], "reps": 1},
    "durations": {"lognormal": {"median_s": 600, "sigma": 0.3}},
    "history": {"noise_sigma": 0.3},
    "accounts": [{"name": "a", "max_concurrent": 2}, {"name": "b", "max_concurrent": 2}],
    "policies": ["adaptive"],
}
CELLS = 8


class Run:
    """One plan, its run root, and a driver per session on one virtual clock."""

    def __init__(self, root: Path, run_root: Path | None = None) -> None:
        spec = parse_spec(SPEC)
        workload = build_workload(spec)
        self.plan = plan_for(spec, workload)
        self.clock = FakeClock()
        self.world = SimWorld(spec, workload, np.random.default_rng([spec.seed, 2]))
        tuning = Tuning(health=HealthPolicy(**spec.health))  # type: ignore[arg-type]
        self.cores = {a.name: AccountCore(a.name, a.limits, tuning=tuning, now=0.0) for a in spec.accounts}
        self.pool: RunnerPool = InProcessPool(self.clock, self.world)
        self.tmp = root
        self.root = run_root or root / "run"
        self.root.mkdir(exist_ok=True)

    def driver(self, supervision: Supervision | None = None, **options: Any) -> Driver:
        """A session's driver (``supervision``: the host's, with memory to spare, unless given)."""
        opts = RunOptions(tick_sec=30.0, supervisor_every_sec=3600.0, state_root=self.tmp / "state", **options)
        return Driver(self.plan, "sha256:" + "0" * 64, self.root, self.pool,
                      CoreGate(self.plan.accounts, clock=self.clock.now, cores=self.cores),
                      supervision or roomy_host(self.plan), options=opts, clock=self.clock)

    def session(self, supervision: Supervision | None = None, **options: Any) -> RunOutcome:
        return self.driver(supervision, **options).run()

    def ledger(self) -> Ledger:
        return Ledger.open_readonly(self.root)

    def attempts(self) -> list[AttemptRow]:
        return Ledger.read_attempts(self.root)
