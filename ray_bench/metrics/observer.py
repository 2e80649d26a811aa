"""Feeds the driver's events into a :class:`MetricsExporter`."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ray_bench.evidence.catalog import FAILURE_CLASSES
from ray_bench.evidence.classify import Verdict
from ray_bench.ledger.store import AttemptRow
from ray_bench.metrics.exporter import ACCOUNT_STATES, PHASES, AccountView, MetricsExporter
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import Plan
from ray_bench.scheduler.admission import AccountView as GateView
from ray_bench.scheduler.runstate import RunState


class MetricsObserver:
    def __init__(self, exporter: MetricsExporter) -> None:
        self.exporter = exporter
        self._running: Counter[str] = Counter()
        self._backends: set[str] = set()

    def run_started(self, plan: Plan, state: RunState, resumed: int) -> None:
        self._backends = {c.backend for c in plan.cells}
        self.exporter.declare(arms=[a.name for a in plan.arms], accounts=[a.name for a in plan.accounts],
                              backends=sorted(self._backends), failure_classes=FAILURE_CLASSES)
        self.exporter.set_cells(state.counts())
        self._sandboxes()

    def attempt_started(self, row: AttemptRow) -> None:
        self._running[row.backend] += 1
        self.exporter.attempt_started(row.arm, row.account, row.backend)
        self._sandboxes()

    def attempt_finished(self, row: AttemptRow, verdict: Verdict | None, summary: AttemptSummary,
                         cell_state: str) -> None:
        self._running[row.backend] -= 1
        phases: dict[str, float] = {k: v for k, v in summary.phases.items() if k in PHASES}
        if verdict is None:
            outcome, failure_class = "cancelled", None
        else:
            outcome, failure_class = ("valid" if verdict.valid else "failed"), verdict.failure_class
            if verdict.effect == "rate_limited":
                self.exporter.rate_limited(row.account, "provider")
        self.exporter.attempt_finished(
            row.arm, row.account, row.backend, outcome=outcome, failure_class=failure_class,
            valid=bool(verdict and verdict.valid and cell_state == "valid"),
            reward=summary.reward, phase_seconds=phases, cost_usd=summary.cost_usd,
            finished_at=summary.finished_at or row.started_at)
        self._sandboxes()

    def tick(self, state: RunState, accounts: list[GateView], note: str | None) -> None:
        self.exporter.set_cells(state.counts())
        views = [AccountView(a.name, a.state if a.state in ACCOUNT_STATES else "healthy",
                             a.inflight, a.limit) for a in accounts]
        self.exporter.set_accounts(views)
        self.exporter.set_healthy_capacity(sum(a.limit for a in accounts if a.state in ("healthy", "degraded")))

    def note_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "circuit_open":
            self.exporter.set_circuit(str(data.get("scope")), True)
        elif kind == "stop" and data.get("reason") == "halt":
            self.exporter.set_halted(True)

    def run_finished(self, outcome: Any) -> None:
        self._running.clear()
        self._sandboxes()
        self.exporter.set_cells(outcome.counts)
        self.exporter.set_finished(True)

    def _sandboxes(self) -> None:
        for backend in self._backends:
            self.exporter.set_sandboxes(backend, {"running": max(0, self._running[backend])})
