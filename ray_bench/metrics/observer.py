"""Feeds the driver's events into a :class:`MetricsExporter`."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from ray_bench.evidence.catalog import FAILURE_CLASSES
from ray_bench.evidence.classify import Verdict
from ray_bench.ledger.store import AttemptRow
from ray_bench.metrics.exporter import ACCOUNT_STATES, PHASES, AccountState, AccountView, MetricsExporter
from ray_bench.metrics.lasting import ledger_totals
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import Plan
from ray_bench.scheduler.admission import AccountView as GateView
from ray_bench.scheduler.admission import ExpiryWatch
from ray_bench.scheduler.runstate import RunState

#: States in which an account admits cells; the rest (cooling, expired, held, disabled,
#: unknown) count as unusable, for capacity and for the "no usable account" alert.
USABLE_STATES = ("healthy", "degraded")


class MetricsObserver:
    def __init__(self, exporter: MetricsExporter, run_root: Path | None = None) -> None:
        self.exporter = exporter
        self.run_root = run_root
        self._running: Counter[str] = Counter()
        self._backends: set[str] = set()
        self._expiry: ExpiryWatch | None = None

    def run_started(self, plan: Plan, state: RunState, resumed: int) -> None:
        exporter = self.exporter
        exporter.session_started(time.time())
        self._backends = {c.backend for c in plan.cells}
        arms, accounts = [a.name for a in plan.arms], [a.name for a in plan.accounts]
        exporter.declare(arms=arms, accounts=accounts, backends=sorted(self._backends),
                         failure_classes=FAILURE_CLASSES)
        if self.run_root is not None:
            totals = ledger_totals(self.run_root)
            exporter.lasting.load(totals, arms, accounts)
            for scope, is_open in totals.circuits.items():  # closed ones are exported as 0
                exporter.set_circuit(scope, is_open)
        exporter.lasting.limits(plan.spend_limit_usd, {a.name: a.limits.spend_usd for a in plan.accounts})
        exporter.lasting.stop(None)
        exporter.lasting.beat(time.time())
        self._expiry = ExpiryWatch(plan.accounts)
        exporter.set_cells(state.counts())
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
        valid = bool(verdict and verdict.valid and cell_state == "valid")
        cost = summary.cost_usd if verdict is not None else 0.0
        self.exporter.attempt_finished(
            row.arm, row.account, row.backend, outcome=outcome, failure_class=failure_class,
            valid=valid, reward=summary.reward, phase_seconds=phases, cost_usd=cost,
            finished_at=summary.finished_at or row.started_at)
        self._sandboxes()

    def tick(self, state: RunState, accounts: list[GateView], note: str | None) -> None:
        now = time.time()
        self.exporter.lasting.beat(now)
        self.exporter.set_cells(state.counts())
        views = [AccountView(a.name, _state(a.state), a.inflight, a.limit) for a in accounts]
        self.exporter.set_accounts(views)
        self.exporter.set_healthy_capacity(sum(a.limit for a in accounts if a.state in USABLE_STATES))
        expiry = self._expiry
        self.exporter.lasting.accounts(
            {a.name: now + a.cooldown_left if a.cooldown_left > 0 else None for a in accounts},
            {a.name: expiry.expires_at(a.name) if expiry else None for a in accounts})

    def note_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "circuit_open":
            self.exporter.set_circuit(str(data.get("scope")), True)
        elif kind == "circuit_reopened":
            self.exporter.set_circuit(str(data.get("scope")), False)
        elif kind == "stop" and data.get("reason") == "halt":
            self.exporter.set_halted(True)

    def run_finished(self, outcome: Any) -> None:
        self._running.clear()
        self._sandboxes()
        self.exporter.set_cells(outcome.counts)
        self.exporter.lasting.stop(outcome.stopped)
        self.exporter.lasting.beat(time.time())
        if self.run_root is not None:
            totals = ledger_totals(self.run_root)
            self.exporter.lasting.audit(totals.residue, totals.audited_at)
        self.exporter.set_finished(True)

    def _sandboxes(self) -> None:
        for backend in self._backends:
            self.exporter.set_sandboxes(backend, {"running": max(0, self._running[backend])})


def _state(name: str) -> AccountState:
    for known in ACCOUNT_STATES:
        if known == name:
            return known
    return "unknown"
