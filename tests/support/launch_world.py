"""A small simulated plan for the pure scheduler decisions' tests (scheduler/launch.py,
scheduler/stops.py, scheduler/runcore.py): six cells, two arms, two accounts of two slots, one
local backend; a run core over it, and the row the driver would record for a start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.circuit import RecoveryCircuit
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.plan import Plan
from ray_bench.scheduler.core import LeaseRequest
from ray_bench.scheduler.quota_fit import QuotaFit
from ray_bench.scheduler.runcore import RunCore
from ray_bench.scheduler.runstate import RunState
from ray_bench.scheduler.spend import SpendBook
from ray_bench.sim.driven import plan_for
from ray_bench.sim.workload import build_workload, parse_spec

SPEC: dict[str, Any] = {
    "seed": 1,
    "suite": {"tasks": 3, "arms": ["baseline", "mcp"], "reps": 1},
    "durations": {"lognormal": {"median_s": 600, "sigma": 0.3}},
    "accounts": [{"name": "a", "max_concurrent": 2}, {"name": "b", "max_concurrent": 2}],
    "policies": ["adaptive"],
}


def a_plan(**update: Any) -> Plan:
    spec = parse_spec(SPEC)
    return plan_for(spec, build_workload(spec)).model_copy(update=update)


HALT_FILE = Path("/runs/r/resource-halt.json")


def a_core(plan: Plan | None = None, capacity: int = 4) -> RunCore:
    plan = plan or a_plan()
    return RunCore(plan, RunState(plan, []), capacity=capacity, catalog=Catalog.default(), circuit=RecoveryCircuit(),
                   quota_fit=QuotaFit(ceiling=capacity), spend=SpendBook.of(plan, ()), tick_sec=0.25,
                   supervise_every_sec=2.0, halt_file=HALT_FILE, resume_command="ray-bench execute --plan p", began=0.0,
                   run_root=Path("/runs/r"))


def row_of(request: LeaseRequest, account: str) -> AttemptRow:
    cell = request.cell
    return AttemptRow(attempt_id=f"{cell.id}-a1", cell_id=cell.id, task=cell.task, task_checksum="x", arm=cell.arm,
                      rep=cell.rep, seq=1, account=account, backend=cell.backend, epoch="e", preflight=False,
                      started_at=0.0)
