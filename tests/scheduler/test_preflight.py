"""The preflight is the plan's, not a session's: the real driver on the in-process pool and a
virtual clock, resumed on the same ledger the way `execute` resumes (no Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.cells.inprocess import InProcessPool
from ray_bench.cells.spec import AttemptSpec
from ray_bench.clock import FakeClock
from ray_bench.ledger.store import Ledger
from ray_bench.models.attempt import AttemptSummary, ExecFacts
from ray_bench.models.plan import Plan
from ray_bench.plan.store import PLAN_FILE, load_plan_file
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.driver import Driver, RunOptions, RunOutcome
from ray_bench.sim.driven import roomy_host


class _World:
    """Every attempt takes 10 s; while ``broken`` the verifier writes no reward (a counted
    `evaluator` failure), else the task is solved."""

    def __init__(self) -> None:
        self.broken = True

    def begin(self, spec: AttemptSpec, now: float) -> tuple[float, float, AttemptSummary]:
        summary = AttemptSummary(attempt_id=spec.attempt_id, cell_id=spec.cell_id, task=spec.task_id,
                                 arm=spec.arm, rep=spec.rep, account=spec.account, backend=spec.backend,
                                 agent=ExecFacts(exit_code=0), verifier=ExecFacts(exit_code=2 if self.broken else 0),
                                 reward=None if self.broken else 1.0)
        return 1.0, 10.0, summary

    def end(self, spec: AttemptSpec, now: float, delivered: bool) -> None:
        return None


@pytest.fixture
def planned(tmp_path: Path) -> tuple[Plan, str, Path]:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "sum-list", "fizzbuzz"],
                                 preflight_cells=1, max_attempts=2)
    root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="pf").run_root
    plan, identity = load_plan_file(root / PLAN_FILE)
    return plan, identity, root


def _execute(planned: tuple[Plan, str, Path], world: _World, clock: FakeClock) -> RunOutcome:
    plan, identity, root = planned
    pool = InProcessPool(clock, world)
    options = RunOptions(tick_sec=1.0, state_root=root.parent / "state")
    return Driver(plan, identity, root, pool, CoreGate(plan.accounts, clock=clock.now), roomy_host(plan),
                  options=options, clock=clock).run()


def _attempts(root: Path) -> list[tuple[str, bool]]:
    with Ledger.reading(root) as ledger:
        return [(a.cell_id, a.preflight) for a in ledger.attempts()]


def test_a_resume_after_a_spent_preflight_starts_nothing(planned: tuple[Plan, str, Path]) -> None:
    plan, _, root = planned
    world, clock = _World(), FakeClock()
    first = _execute(planned, world, clock)
    assert first.stopped == "preflight"
    assert "used every attempt" in first.detail and "rerun" in first.detail
    before = _attempts(root)
    assert before and all(pre for _, pre in before)  # no fan-out cell started
    assert {c for c, _ in before} == set(plan.preflight)
    # The resume `status` would have offered before: the gate is still closed, nothing starts.
    again = _execute(planned, world, clock)
    assert again.stopped == "preflight" and again.exit_code == 1
    assert _attempts(root) == before


def test_a_resume_runs_the_preflights_remaining_cells_before_the_fan_out(
        planned: tuple[Plan, str, Path]) -> None:
    plan, identity, root = planned
    world, clock = _World(), FakeClock()
    # One preflight cell solved, the other one never tried: the old rule (any valid preflight
    # cell) skipped the gate here.
    world.broken = False
    ledger = Ledger.create(root, run_id=plan.run_id, plan_identity=identity)
    done = next(c for c in plan.cells if c.id == plan.preflight[0])
    row = ledger.start_attempt(cell_id=done.id, task=done.task, task_checksum="x", arm=done.arm, rep=done.rep,
                               account="acct-a", backend="local", epoch=identity, preflight=True, now=1.0)
    ledger.finish_attempt(row.attempt_id, status="finished", valid=True, reward=1.0, failure_class=None,
                          fingerprint=None, counts=True, cost_usd=0.0, summary=AttemptSummary(), now=2.0)
    ledger.close()
    world.broken = True
    outcome = _execute(planned, world, clock)
    assert outcome.stopped == "preflight"
    tried = _attempts(root)[1:]
    assert tried and all(pre for _, pre in tried)
    assert {c for c, _ in tried} == set(plan.preflight[1:])


def test_a_passed_preflight_is_recorded_once_and_not_run_again(planned: tuple[Plan, str, Path]) -> None:
    plan, _, root = planned
    world, clock = _World(), FakeClock()
    world.broken = False
    outcome = _execute(planned, world, clock)
    assert outcome.stopped is None and outcome.counts["valid"] == len(plan.cells)
    again = _execute(planned, world, clock)
    assert again.stopped is None and again.attempts_run == 0
    with Ledger.reading(root) as ledger:
        assert len(ledger.events("preflight_passed")) == 1
