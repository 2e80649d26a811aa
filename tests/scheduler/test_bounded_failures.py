"""Every failure is bounded (issue 53): a systematic stack failure that names another sandbox
each time is one signature, so the recovery circuit opens and the run stops by itself; and a
cell pays for at most ``attempt_cap(max_attempts)`` failed attempts of any class."""

from __future__ import annotations

import tempfile
import uuid
from collections import Counter
from pathlib import Path

import numpy as np

from ray_bench.accounts.core import AccountCore
from ray_bench.cells.inprocess import InProcessPool
from ray_bench.cells.spec import AttemptSpec
from ray_bench.clock import FakeClock
from ray_bench.evidence.classify import Verdict
from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AttemptError, AttemptSummary
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.driver import Driver, RunOptions
from ray_bench.scheduler.runstate import RunState, attempt_cap
from ray_bench.sim.driven import plan_for, roomy_host
from ray_bench.sim.workload import build_workload, parse_spec
from ray_bench.sim.world import SimWorld

SPEC = {"seed": 1, "suite": {"tasks": 4, "arms": ["baseline", "mcp"], "reps": 1},
        "durations": {"lognormal": {"median_s": 60, "sigma": 0.1}},
        "accounts": [{"name": "a", "max_concurrent": 8}], "policies": ["adaptive"]}


class _CreateTimesOut(SimWorld):
    """Every create times out, naming its own sandbox as the Daytona backend does."""

    def begin(self, spec: AttemptSpec, now: float) -> tuple[float, float, AttemptSummary]:
        create, _, summary = super().begin(spec, now)
        summary.error = AttemptError(type="SandboxError", failure_class="stack",
                                     message=f"Daytona sandbox {uuid.uuid4()} still creating after 15s")
        summary.reward, summary.agent, summary.verifier = None, None, None
        return create, 15.0, summary


def test_every_create_timing_out_stops_the_run_with_the_circuit_open() -> None:
    spec = parse_spec(SPEC)
    world = _CreateTimesOut(spec, build_workload(spec), np.random.default_rng(0))
    plan = plan_for(spec, build_workload(spec), max_attempts=3)
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "run").mkdir()
        cores = {a.name: AccountCore(a.name, a.limits, now=0.0) for a in spec.accounts}
        driver = Driver(plan, "sha256:" + "0" * 64, tmp / "run", InProcessPool(clock, world),
                        CoreGate(plan.accounts, clock=clock.now, cores=cores), roomy_host(plan),
                        options=RunOptions(tick_sec=30.0, supervisor_every_sec=3600.0, state_root=tmp / "state"),
                        clock=clock)
        outcome = driver.run()
        rows = Ledger.read_attempts(tmp / "run")
    assert outcome.stopped == "circuit" and "--hypothesis" in outcome.detail
    assert len({r.fingerprint for r in rows}) == 1  # one signature, whichever sandbox it named
    per_cell = Counter(r.cell_id for r in rows)
    assert max(per_cell.values()) <= attempt_cap(plan.max_attempts)


def test_failures_of_every_class_stop_at_the_cap() -> None:
    spec = parse_spec(SPEC)
    plan = plan_for(spec, build_workload(spec), max_attempts=3)
    state = RunState(plan, [])
    cell = plan.cells[0].id
    outcomes = []
    for n, cls in enumerate(["stack", "provider", "capacity", "auth", "executor", "stack"]):
        state.started(cell, f"l{n}")
        outcomes.append(state.finished(cell, Verdict(False, cls, f"fp{n}", "m", "none"), f"l{n}"))
    assert outcomes == ["pending"] * 5 + ["failed"] and attempt_cap(3) == 6
    state = RunState(plan, [])
    for n in range(3):  # the cell's own failures still stop at max_attempts
        state.started(cell, f"t{n}")
        last = state.finished(cell, Verdict(False, "task", "t", "m", "none"), f"t{n}")
    assert last == "failed"
