"""Valid and failed attempts written straight into a planned run root's ledger, as if it had run."""

from __future__ import annotations

from pathlib import Path

from ray_bench.ledger import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.store import load_plan_file


def earlier_rows(root: Path, seconds: dict[tuple[str, str], list[float | None]], usd_per_hour: float = 0.0) -> None:
    """``seconds``: (task, arm) -> durations of its attempts (None: a failed attempt), each
    costing ``usd_per_hour`` while it ran."""
    plan, identity = load_plan_file(root / "launch-plan.json")
    sums = {t.id: t.checksum for t in plan.tasks}
    cells = {(c.task, c.arm): c for c in plan.cells}
    ledger = Ledger.create(root, run_id=plan.run_id, plan_identity=identity)
    for (task, arm), durations in seconds.items():
        for i, d in enumerate(durations):
            row = ledger.start_attempt(cell_id=cells[(task, arm)].id, task=task, task_checksum=sums[task], arm=arm,
                                       rep=1, account="a", backend="local", epoch=identity, preflight=False,
                                       now=1000.0 * i)
            ledger.finish_attempt(row.attempt_id, status="finished", valid=d is not None, reward=1.0 if d else None,
                                  failure_class=None if d else "task", fingerprint=None if d else "f", counts=d is None,
                                  cost_usd=(d or 0.0) * usd_per_hour / 3600, summary=AttemptSummary(),
                                  now=1000.0 * i + (d or 5000.0))
    ledger.close()


def earlier_rewards(root: Path, rewards: dict[tuple[str, str, int], float]) -> None:
    """``rewards``: (task, arm, rep) -> the reward of one valid attempt of that cell."""
    plan, identity = load_plan_file(root / "launch-plan.json")
    sums = {t.id: t.checksum for t in plan.tasks}
    cells = {(c.task, c.arm, c.rep): c for c in plan.cells}
    ledger = Ledger.create(root, run_id=plan.run_id, plan_identity=identity)
    for i, ((task, arm, rep), reward) in enumerate(rewards.items()):
        row = ledger.start_attempt(cell_id=cells[(task, arm, rep)].id, task=task, task_checksum=sums[task], arm=arm,
                                   rep=rep, account="a", backend="local", epoch=identity, preflight=False,
                                   now=10.0 * i)
        ledger.finish_attempt(row.attempt_id, status="finished", valid=True, reward=reward, failure_class=None,
                              fingerprint=None, counts=False, cost_usd=0.0, summary=AttemptSummary(),
                              now=10.0 * i + 5.0)
    ledger.close()
