"""Feeds the driver's events into a :class:`MetricsExporter` (a fold over the run's events)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

from ray_bench.evidence.catalog import FAILURE_CLASSES
from ray_bench.ledger import events as ev
from ray_bench.ledger.cost import attempt_cost
from ray_bench.metrics.exporter import ACCOUNT_STATES, PHASES, AccountState, AccountView, MetricsExporter
from ray_bench.metrics.lasting import LedgerTotals, ledger_totals
from ray_bench.models.plan import Plan
from ray_bench.scheduler.admission import ExpiryWatch
from ray_bench.scheduler.observers import AttemptFinished, AttemptStarted, Observed, Tick
from ray_bench.scheduler.runstate import RunState

#: States in which an account admits cells; the rest (cooling, expired, held, disabled,
#: unknown) count as unusable, for capacity and for the "no usable account" alert.
USABLE_STATES = ("healthy", "degraded")

#: How often a starting driver beats before its loop's ticks do (DriverDown waits 2 minutes).
START_BEAT_SEC = 10.0


class MetricsObserver:
    def __init__(self, exporter: MetricsExporter, plan: Plan, run_root: Path | None = None) -> None:
        self.exporter = exporter
        self.plan = plan
        self.run_root = run_root
        self._running: Counter[str] = Counter()
        self._backends: set[str] = set()
        self._expiry: ExpiryWatch | None = None
        self._loop_started = threading.Event()
        self._beater: threading.Thread | None = None

    def on_event(self, event: Observed) -> None:
        match event:
            case ev.RunStarted():
                self._run_started(event)
            case AttemptStarted(row=row):
                self._running[row.backend] += 1
                self.exporter.attempt_started(row.arm, row.account, row.backend)
                self._sandboxes()
            case AttemptFinished():
                self._attempt_finished(event)
            case Tick():
                self._tick(event)
            case ev.CircuitOpen():
                self.exporter.set_circuit(event.scope, True, event.failure_class, event.message)
            case ev.CircuitReopened():
                self.exporter.set_circuit(event.scope, False)
            case ev.Stop(reason=ev.StopReason.HALT):
                self.exporter.set_halted(True)
            case ev.RunFinished():
                self._run_finished(event)

    def prime(self) -> None:
        """What the exporter serves from the moment it listens, before the driver's loop sends
        ``run_started``: a resume's Ray start took 48 s at load, and meanwhile a scrape read 0
        cells remaining and the last session's stale heartbeat. The run as its ledger has it
        (cells by state, the lasting totals, circuits), and a beat: this driver is alive."""
        totals = self._declare_and_load()
        if totals is not None:
            self.exporter.set_cells(RunState(self.plan, totals.ended).counts())
        self._beater = threading.Thread(target=self._beat_until_started, name="rb-metrics-start-beat",
                                        daemon=True)
        self._beater.start()

    def start_ended(self) -> None:
        """The start is over (the driver's loop began, or the run ended before it did): no beat
        of the start's lands after this returns."""
        self._loop_started.set()
        if self._beater is not None:
            self._beater.join(timeout=5.0)

    def _beat_until_started(self) -> None:
        """A Ray start can outlast DriverDown's 2 minutes on a loaded host: this driver beats
        while it starts, and its loop's ticks take over from ``run_started`` on."""
        while not self._loop_started.wait(START_BEAT_SEC):
            self.exporter.lasting.beat(time.time())

    def _run_started(self, event: ev.RunStarted) -> None:
        self._loop_started.set()
        self.exporter.session_started(time.time())
        self._declare_and_load()
        self._expiry = ExpiryWatch(self.plan.accounts)
        self.exporter.set_cells(event.counts)
        self._sandboxes()

    def _declare_and_load(self) -> LedgerTotals | None:
        """Every series declared, and the ledger's totals loaded (returned; None: no run root)."""
        exporter, plan = self.exporter, self.plan
        totals = None
        self._backends = {c.backend for c in plan.cells}
        arms, accounts = [a.name for a in plan.arms], [a.name for a in plan.accounts]
        exporter.declare(arms=arms, accounts=accounts, backends=sorted(self._backends),
                         failure_classes=FAILURE_CLASSES)
        if self.run_root is not None:
            totals = ledger_totals(self.run_root)
            exporter.lasting.load(totals, arms, accounts)
            for scope, is_open in totals.circuits.items():  # closed ones are exported as 0
                exporter.set_circuit(scope, is_open, *totals.circuit_reasons.get(scope, ("", "")))
        exporter.lasting.limits(plan.spend_limit_usd, {a.name: a.limits.spend_usd for a in plan.accounts})
        exporter.lasting.stop(None)
        exporter.lasting.beat(time.time())
        return totals

    def _attempt_finished(self, event: AttemptFinished) -> None:
        row, verdict, summary, cell_state = event.row, event.verdict, event.summary, event.cell_state
        self._running[row.backend] -= 1
        phases: dict[str, float] = {k: v for k, v in summary.phases.items() if k in PHASES}
        outcome, failure_class = event.outcome  # a full disk: failed, stack
        if verdict is not None and verdict.effect == "rate_limited":
            self.exporter.rate_limited(row.account, "provider")
        valid = bool(verdict and verdict.valid and cell_state == "valid")
        # The cost the ledger keeps (ray_bench.ledger.cost): a cancelled attempt's too, $0 only
        # when its agent never started; None (unknown) is counted in
        # raybench_run_unknown_cost_attempts, never as $0.
        cost = attempt_cost(summary)
        self.exporter.attempt_finished(
            row.arm, row.account, row.backend, outcome=outcome, failure_class=failure_class,
            valid=valid, reward=summary.reward, phase_seconds=phases, cost_usd=cost,
            # when the driver recorded the end (the ledger's finished_at, milliseconds ago), which
            # `status` counts and when raybench_valid_rows_total moves: the summary's is another
            # node's clock, read before the artifacts travelled back
            finished_at=time.time())
        self._sandboxes()

    def _tick(self, event: Tick) -> None:
        now, accounts = time.time(), event.accounts
        self.exporter.lasting.beat(now)
        self.exporter.set_cells(event.counts)
        views = [AccountView(a.name, _state(a.state), a.inflight, a.limit, a.last_error or "") for a in accounts]
        self.exporter.set_accounts(views)
        self.exporter.set_healthy_capacity(sum(a.limit for a in accounts if a.state in USABLE_STATES))
        expiry = self._expiry
        self.exporter.lasting.accounts(
            {a.name: now + a.cooldown_left if a.cooldown_left > 0 else None for a in accounts},
            {a.name: expiry.expires_at(a.name) if expiry else None for a in accounts})

    def _run_finished(self, outcome: ev.RunFinished) -> None:
        self._running.clear()
        self._sandboxes()
        self.exporter.set_cells(outcome.counts)
        self.exporter.lasting.stop(outcome.stopped)
        self.exporter.lasting.beat(time.time())
        if self.run_root is not None:
            totals = ledger_totals(self.run_root)
            self.exporter.lasting.audit(totals.residue, totals.audited_at)
        self.exporter.set_finished(True, outcome.phase)

    def _sandboxes(self) -> None:
        for backend in self._backends:
            self.exporter.set_sandboxes(backend, {"running": max(0, self._running[backend])})


def _state(name: str) -> AccountState:
    for known in ACCOUNT_STATES:
        if known == name:
            return known
    return "unknown"
