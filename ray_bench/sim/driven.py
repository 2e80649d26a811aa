"""The real :class:`~ray_bench.scheduler.driver.Driver` on a virtual clock.

The driver runs in this process exactly as ``execute`` runs it — the same loop, ledger
(SQLite), run state, classifier, recovery circuit and account choice — against an
:class:`~ray_bench.cells.inprocess.InProcessPool` whose attempts a :class:`SimWorld` answers, an
in-process :class:`~ray_bench.scheduler.admission.CoreGate`, and a
:class:`~ray_bench.clock.FakeClock`. So ``simulate``'s makespan is the driver's.

Faults (:class:`Faults`, drawn from a seed by :func:`draw_faults`) are applied as the clock
passes their time: runner deaths, node loss (and the node's return), an actor restart (an
account forgets its state), a driver kill and resume on the same ledger, clock jumps, slow
sandbox creation; rate-limit storms, lost logins and operator holds come from the spec's events.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ray_bench.accounts.core import AccountCore
from ray_bench.accounts.health import HealthPolicy
from ray_bench.accounts.limits import Tuning
from ray_bench.cells.inprocess import InProcessPool
from ray_bench.clock import FakeClock
from ray_bench.evidence.catalog import Catalog
from ray_bench.ledger.store import AttemptRow, Ledger
from ray_bench.models.accounts import Account
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import Capacity, Plan, PlanCell, PlanTask
from ray_bench.models.suite import Arm, BackendConfig, ResourceLimits
from ray_bench.models.task.harbor import TaskConfig
from ray_bench.sandboxes.supervisor import HostSupervision
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.builds import InstantBuilder
from ray_bench.scheduler.driver import Driver, RunOptions
from ray_bench.scheduler.observers import RunObserver
from ray_bench.sim.engine import pair_gaps
from ray_bench.sim.workload import AuthLossEvent, HoldEvent, SimSpec, Workload
from ray_bench.sim.world import SimWorld

#: A cell may hold its account this long (the plan's agent + verifier limits).
HORIZON_SEC = 6 * 3600.0
#: The key a simulated LLM-judge verifier names; a judge account's route supplies it.
JUDGE_VAR = "JUDGE_KEY"


@dataclass(frozen=True)
class Faults:
    """Faults at virtual times (seconds)."""

    runner_deaths: tuple[float, ...] = ()
    node_losses: tuple[tuple[float, float], ...] = ()  # (dies at, rejoins at)
    actor_restarts: tuple[float, ...] = ()
    driver_kills: tuple[float, ...] = ()
    clock_jumps: tuple[tuple[float, float], ...] = ()  # (at, seconds forward)
    slow_create: tuple[float, float, float] | None = None


@dataclass
class DrivenResult:
    makespan_s: float
    attempts: int
    wasted_attempts: int
    cells: int
    valid_cells: int
    failed_cells: int
    duplicate_rows: int
    cells_lost: int
    resumes: int
    stopped: str | None
    violations: list[str] = field(default_factory=list)
    pair_start_gap_s: dict[str, float] = field(default_factory=dict)
    spend_usd: float = 0.0
    detail: str = ""
    """The stop's words (``stopped``: its reason)."""
    rows: list[AttemptRow] = field(default_factory=list)


class _Killed(BaseException):
    """The driver process dies here (not an Exception: nothing in the driver catches it)."""


class _FaultyPool(InProcessPool):
    """The in-process pool with the seed's faults applied as the clock passes them."""

    def __init__(self, clock: FakeClock, world: SimWorld, faults: Faults, gate_cores: dict[str, AccountCore],
                 accounts: list[Account], auth: list[AuthLossEvent], holds: list[HoldEvent]) -> None:
        super().__init__(clock, world, nodes=2, runners_per_node=2)
        self.sim = world
        self.cores = gate_cores
        self.accounts = accounts
        events: list[tuple[float, str, Any]] = []
        events += [(t, "runner", i) for i, t in enumerate(faults.runner_deaths)]
        for dies, back in faults.node_losses:
            # node 1 only: losing the head node (0) ends a Ray cluster, it is not a fault to ride out
            events += [(dies, "node", 1), (back, "rejoin", 1)]
        events += [(t, "actor", i) for i, t in enumerate(faults.actor_restarts)]
        events += [(t, "kill", None) for t in faults.driver_kills]
        events += [(e.at_h * 3600, "auth", e.account) for e in auth]
        for hold in holds:
            events += [(hold.start_h * 3600, "hold", hold.account),
                       (hold.start_h * 3600 + hold.length_min * 60, "unhold", hold.account)]
        self.held: set[str] = set()  # durable as the state root's holds file: a new core keeps them
        self.events = sorted(events, key=lambda e: (e[0], e[1]))
        self.jumps = sorted(faults.clock_jumps)
        self.kills = 0

    def wait(self, refs: Collection[Any], timeout: float) -> list[tuple[Any, AttemptSummary]]:
        now = self.clock.now()
        if self.jumps and self.jumps[0][0] <= now:
            self.clock.advance(self.jumps.pop(0)[1])
            now = self.clock.now()
        first = self.first_finish(refs)
        horizon = now + timeout if first is None else min(now + timeout, first)
        if self.events and self.events[0][0] <= horizon:
            at, kind, arg = self.events.pop(0)
            self.clock.set(max(now, at))
            self._apply(kind, arg)
        out = super().wait(refs, timeout)
        for _, summary in out:
            if summary.reward is not None and summary.agent_error is None and not summary.lost:
                self.sim.delivered_valid(summary.cell_id)
        return out

    def _apply(self, kind: str, arg: Any) -> None:
        now = self.clock.now()
        if kind == "runner":
            self.kill_runner(int(arg) % len(self.node_of))
        elif kind == "node":
            self.kill_node(int(arg))
        elif kind == "rejoin":
            self.rejoin_node(int(arg))
        elif kind == "actor":
            # A restarted account actor forgets cooldowns and windows but keeps its leases
            # (durable account state); the new core adopts them.
            name = self.accounts[int(arg) % len(self.accounts)].name
            old = self.cores[name]
            new = AccountCore(name, old.limits, tuning=old.tuning, now=now)
            for lease_id in old.leases():
                held = old.running(lease_id)
                if held is not None:
                    new.adopt(lease_id, held)
            if name in self.held:
                new.health.hold()
            self.cores[name] = new
        elif kind == "hold":
            self.held.add(str(arg))
            self.cores[str(arg)].health.hold()
        elif kind == "unhold":
            self.held.discard(str(arg))
            self.cores[str(arg)].health.release(now)
        elif kind == "auth":
            self.sim.lose_login(str(arg), now, [f.summary for f in self.flights.values()])
            for ref, flight in self.flights.items():
                if flight.spec.account == arg and flight.finish_at > now + 30:
                    self.reschedule(ref, now + float(self.sim.rng.uniform(5.0, 30.0)))
        elif kind == "kill":
            self.kills += 1
            raise _Killed


def plan_for(spec: SimSpec, workload: Workload, *, preflight: int = 0, max_attempts: int = 3) -> Plan:
    """A plan with the workload's cells: synthetic tasks (nothing on disk; no drift inputs)."""
    judges = {j.account for j in spec.judges}
    accounts = [Account.model_validate({
        "name": a.name, "route": {"env": {"API_KEY": "SIM_KEY", **({JUDGE_VAR: "SIM_JUDGE_KEY"} if a.name in judges
                                                                   else {})}},
        "limits": a.limits}) for a in spec.accounts]
    history = workload.history or {}
    tasks = sorted({c.task for c in workload.cells})
    # a task's verifier names the judge's key when some arm's judge covers it; an arm without
    # a judge role then gets none (plan/roles.py judge_lease_account)
    judged = {t for t in tasks for j in spec.judges if j.tasks is None or t in j.tasks}
    verifier_env = {JUDGE_VAR: f"${{{JUDGE_VAR}}}"}
    plan_tasks = [PlanTask(id=t, path=f"/sim/{t}", checksum=hashlib.sha256(t.encode()).hexdigest(),
                           agent_timeout_sec=HORIZON_SEC - 600, verifier_timeout_sec=600, image=None,
                           has_dockerfile=False, has_solution=False, network=False, workdir="/app",
                           resources=ResourceLimits(), verifier_env=verifier_env if t in judged else {},
                           config=TaskConfig.model_validate({"verifier": {"env": verifier_env}}) if t in judged
                           else TaskConfig(), expected_sec=history.get(t))
                  for t in tasks]
    cells = [PlanCell(id=c.cell_id, task=c.task, arm=c.arm, rep=c.rep, backend="local") for c in workload.cells]
    roles = ([{"role": "executor", "model": "sim", "billing": "api", "max_spend_usd": spec.executor_max_usd}]
             if spec.executor_max_usd is not None else [])
    judge_of = {j.arm: j.account for j in spec.judges}
    arms = [Arm.model_validate({"name": a, "role": "baseline" if i == 0 else "variant", "command": "true",
                                "roles": roles + ([{"role": "judge", "model": "sim", "billing": "api",
                                                    "route": judge_of[a]}] if a in judge_of else [])})
            for i, a in enumerate(spec.suite.arms)]
    total = sum(a.limits.max_concurrent for a in spec.accounts)
    effective = total if spec.backend_slots is None else min(total, spec.backend_slots)
    first: dict[str, str] = {}
    for c in cells:
        first.setdefault(c.arm, c.id)
    return Plan(run_id="sim", suite="sim", created_with="simulate", inputs=[], arms=arms, accounts=accounts,
                backends={"local": BackendConfig()}, tasks=plan_tasks, cells=cells,
                preflight=list(first.values())[:preflight] if preflight else [], max_attempts=max_attempts,
                artifact_cap_mb=1, spend_limit_usd=spec.spend_limit_usd, host_reserve_disk_mb=0,  # no real disk read
                capacity=Capacity(accounts_concurrency=total, backend_pools={}, parallel_cap=None,
                                  effective=effective, lines=[]), warnings=[])


def run_driven(spec: SimSpec, workload: Workload, faults: Faults | None = None, *, preflight: int = 0,
               max_attempts: int = 3, root: Path | None = None,
               observer: RunObserver | None = None) -> DrivenResult:
    """Run the real driver over ``workload`` (resuming after each driver kill) and check the
    invariants; see the module docstring. ``observer`` hears what each driver does (as
    ``execute``'s terminal and metrics do)."""
    faults = faults or Faults()
    rng = np.random.default_rng([spec.seed, 2])
    plan = plan_for(spec, workload, preflight=preflight, max_attempts=max_attempts)
    clock = FakeClock()
    world = SimWorld(spec, workload, rng, faults.slow_create)
    tuning = Tuning(health=HealthPolicy(**spec.health))  # type: ignore[arg-type]
    cores = {a.name: AccountCore(a.name, a.limits, tuning=tuning, now=0.0) for a in spec.accounts}
    auth = [e for e in spec.events if isinstance(e, AuthLossEvent)]
    holds = [e for e in spec.events if isinstance(e, HoldEvent)]
    pool = _FaultyPool(clock, world, faults, cores, plan.accounts, auth, holds)
    tmp = Path(tempfile.mkdtemp(prefix="rb-sim-", dir=root or _fast_tmp()))
    options = RunOptions(tick_sec=30.0, supervisor_every_sec=3600.0, state_root=tmp / "state", catalog=_catalog())
    outcome = None
    try:
        while outcome is None:
            gate = CoreGate(plan.accounts, clock=clock.now, cores=cores)
            (tmp / "run").mkdir(exist_ok=True)
            driver = Driver(plan, "sha256:" + "0" * 64, tmp / "run", pool, gate, roomy_host(plan), observer=observer,
                            options=options, clock=clock)
            driver.snapshot_builder = InstantBuilder  # a Daytona plan's build phase: no service
            try:
                outcome = driver.run()
            except _Killed:
                continue
        return _result(plan, workload, tmp / "run", world, pool, outcome.stopped, outcome.detail)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _result(plan: Plan, workload: Workload, run_root: Path, world: SimWorld, pool: _FaultyPool,
            stopped: str | None, detail: str) -> DrivenResult:
    rows = Ledger.read_attempts(run_root)
    valid: dict[str, int] = {}
    last: dict[str, AttemptRow] = {}
    for row in rows:
        last[row.cell_id] = row
        if row.valid:
            valid[row.cell_id] = valid.get(row.cell_id, 0) + 1
    violations = world.violations.all()
    violations += [f"cell {c} has {n} valid rows" for c, n in valid.items() if n > 1]
    leaked = pool.count({}, "local", plan.run_id)
    if leaked:
        violations.append(f"{leaked} sandboxes left behind")
    if pool.sent_to_dead:
        violations.append(f"{pool.sent_to_dead} attempts sent to a dead node")
    failed = 0
    for cell in plan.cells:
        if cell.id in valid:
            continue
        last_row = last.get(cell.id)
        if last_row is not None and last_row.failure_class:
            failed += 1
        elif stopped is None:
            violations.append(f"cell {cell.id} ended neither valid nor failed with a reason")
    first: dict[str, float] = {}
    for row in rows:
        first.setdefault(row.cell_id, row.started_at)
    ends = [r.finished_at for r in rows if r.finished_at is not None]
    makespan = (max(ends) - min(r.started_at for r in rows)) if ends else 0.0
    return DrivenResult(
        makespan_s=makespan, attempts=len(rows), wasted_attempts=sum(1 for r in rows if not r.valid),
        cells=len(plan.cells), valid_cells=len(valid), failed_cells=failed,
        duplicate_rows=sum(n - 1 for n in valid.values()), cells_lost=len(plan.cells) - len(valid) - failed,
        resumes=pool.kills, stopped=stopped, violations=violations,
        pair_start_gap_s=pair_gaps(workload.cells, first), spend_usd=sum(r.cost_usd or 0.0 for r in rows),
        detail=detail, rows=rows)


def roomy_host(plan: Plan) -> HostSupervision:
    """The driver's host with memory to spare (a virtual run reads no real memory)."""
    return HostSupervision.of(plan, read_available=lambda: 1 << 20)


@functools.cache
def _catalog() -> Catalog:
    """Parsed once per process (parsing the YAML took half of a small simulation's time)."""
    return Catalog.default()


def _fast_tmp() -> Path | None:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else None


def draw_faults(seed: int, span_s: float) -> Faults:
    """A seed's faults over ``span_s`` virtual seconds (each kind present or not by the seed)."""
    rng = np.random.default_rng([seed, 3])

    def times(p: float, most: int) -> tuple[float, ...]:
        n = int(rng.integers(1, most + 1)) if rng.random() < p else 0
        return tuple(sorted(float(t) for t in rng.uniform(0, span_s, n)))

    nodes = tuple((t, t + float(rng.uniform(30, 600))) for t in times(0.3, 2))
    jumps = tuple((t, float(rng.uniform(60, 3600))) for t in times(0.2, 2))
    slow = None
    if rng.random() < 0.2:
        t0 = float(rng.uniform(0, span_s))
        slow = (t0, t0 + span_s / 4, float(rng.uniform(30, 300)))
    return Faults(runner_deaths=times(0.4, 3), node_losses=nodes, actor_restarts=times(0.2, 2),
                  driver_kills=times(0.3, 2), clock_jumps=jumps, slow_create=slow)
