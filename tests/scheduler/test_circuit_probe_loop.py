"""The circuit's bounded reopen through the real driver loop, in process (virtual clock, no
Ray): a hypothesis that changed nothing costs one attempt; a right one reopens the scope with
one probe, then the run goes on."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from ray_bench.accounts.core import AccountCore
from ray_bench.cells.inprocess import InProcessPool
from ray_bench.cells.spec import AttemptSpec
from ray_bench.clock import FakeClock
from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AgentError, AttemptSummary, ExecFacts
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.driver import Driver, RunOptions
from ray_bench.sim.driven import plan_for, roomy_host
from ray_bench.sim.workload import build_workload, parse_spec
from ray_bench.sim.world import SimWorld

SPEC = {"seed": 1, "suite": {"tasks": 4, "arms": ["baseline", "mcp"], "reps": 1},
        "durations": {"lognormal": {"median_s": 60, "sigma": 0.1}},
        "accounts": [{"name": "a", "max_concurrent": 4}], "policies": ["adaptive"]}


class _BrokenTool(SimWorld):
    """Every attempt's agent CLI is missing while ``broken`` (one signature, class tool)."""

    broken = True

    def begin(self, spec: AttemptSpec, now: float) -> tuple[float, float, AttemptSummary]:
        create, seconds, summary = super().begin(spec, now)
        if self.broken:
            summary.agent = ExecFacts(exit_code=1, duration_sec=1.0)
            summary.agent_error = AgentError(type="cli_missing", message="claude: not found")
            summary.reward = None
            summary.verifier = None
        return create, seconds, summary


def _run(tmp: Path, world: _BrokenTool, hypothesis: str | None = None) -> tuple[Ledger, int, str | None]:
    spec = parse_spec(SPEC)
    workload = build_workload(spec)
    plan = plan_for(spec, workload, max_attempts=2)
    clock = FakeClock()
    cores = {a.name: AccountCore(a.name, a.limits, now=0.0) for a in spec.accounts}
    pool = InProcessPool(clock, world)
    options = RunOptions(tick_sec=30.0, supervisor_every_sec=3600.0, state_root=tmp / "state", hypothesis=hypothesis)
    (tmp / "run").mkdir(exist_ok=True)
    driver = Driver(plan, "sha256:" + "0" * 64, tmp / "run", pool, CoreGate(plan.accounts, clock=clock.now,
                    cores=cores), roomy_host(plan), options=options, clock=clock)
    outcome = driver.run()
    return Ledger.open_readonly(tmp / "run"), outcome.attempts_run, outcome.stopped


def test_a_hypothesis_sends_one_probe_and_only_a_valid_one_reopens() -> None:
    spec = parse_spec(SPEC)
    world = _BrokenTool(spec, build_workload(spec), np.random.default_rng(0))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        _, attempts, stopped = _run(tmp, world)
        assert stopped == "circuit" and attempts >= 3  # the threshold, and what was in flight with it
        # A hypothesis that changed nothing: one attempt, then closed again on the same signature.
        ledger, attempts, stopped = _run(tmp, world, hypothesis="reinstalled the CLI")
        assert (attempts, stopped) == (1, "circuit")
        closed = ledger.events("circuit_open")[-1].data
        assert closed["hypothesis"] == "reinstalled the CLI" and closed["probe"]
        assert [e.data["attempt_id"] for e in ledger.events("circuit_probe")] == [closed["probe"]]
        # The right one: the probe goes alone, its valid row reopens the scope, the rest runs.
        world.broken = False
        before = {r.attempt_id for r in ledger.attempts()}
        ledger, attempts, stopped = _run(tmp, world, hypothesis="put the CLI on PATH")
        assert stopped is None  # cells that used every attempt before stay failed; nothing stopped the run
        reopened = ledger.events("circuit_reopened")
        assert [e.data["via"] for e in reopened] == ["probe"]
        probe_id = reopened[0].data["attempt_id"]
        assert [e.data["attempt_id"] for e in ledger.events("circuit_probe")][-1] == probe_id
        rows = [r for r in ledger.attempts() if r.attempt_id not in before]  # this session's (its own clock)
        probe_row = next(r for r in rows if r.attempt_id == probe_id)
        others = [r for r in rows if r.attempt_id != probe_id and r.started_at > probe_row.started_at]
        assert others and all(r.started_at >= (probe_row.finished_at or 0.0) for r in others)
        assert all(r.valid for r in others) and attempts == 1 + len(others)
