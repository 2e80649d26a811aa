"""Gauges that outlive a driver session: rebuilt from the ledger when a driver starts, kept
current by its events after that.

Counters (``raybench_valid_rows_total``, ``raybench_spend_usd_total``) count what *this*
process saw and restart at 0 on resume, which is right for ``rate()`` and wrong for "how
much has this run spent". The driver's spend limit uses ledger totals; so do these gauges.
The same goes for stop reasons, open circuits (replayed on resume: a probe's valid row or
an account's recovery reopens them) and the driver's heartbeat, which the
``RayBenchDriverDown`` alert watches.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

from ray_bench.evidence.circuit import circuit_scopes
from ray_bench.ledger.events import Audit, CircuitOpen, StopReason
from ray_bench.ledger.rows import accepted_rows, known_spend
from ray_bench.ledger.store import AttemptRow, Ledger
from ray_bench.runroot import RunPaths

#: Values of ``raybench_run_stopped{reason}``: why the last session ended (1), or 0 for all
#: while it runs or after a clean finish. Every ``StopReason``: a run stopped by a signal, lost
#: nodes, a full disk or Ray was 0 on every label, so the stop alert could not fire for it.
STOP_REASONS: tuple[str, ...] = tuple(reason.value for reason in StopReason)


@dataclass
class LedgerTotals:
    """What the ledger says about a run so far (every session)."""

    valid_rows: Counter[str] = field(default_factory=Counter)  # arm -> accepted rows
    reward: dict[str, float] = field(default_factory=dict)  # arm -> sum of accepted rows' rewards
    spend_usd: dict[str, float] = field(default_factory=dict)  # account -> USD of the known costs
    unknown_cost: Counter[str] = field(default_factory=Counter)  # account -> attempts of unknown cost
    circuits: dict[str, bool] = field(default_factory=dict)  # scope -> open
    #: scope -> (failure class, message) of the circuit_open that last opened it
    circuit_reasons: dict[str, tuple[str, str]] = field(default_factory=dict)
    residue: int | None = None  # the last end-of-run audit's count
    audited_at: float | None = None  # when that audit ran (unix time)
    ended: list[AttemptRow] = field(default_factory=list)  # the attempts with a terminal record


def ledger_totals(run_root: Path) -> LedgerTotals:
    totals = LedgerTotals()
    if not RunPaths(run_root).ledger.exists():
        return totals
    with Ledger.reading(run_root) as ledger:
        attempts = ledger.attempts()
        events = ledger.events()
    totals.ended = [a for a in attempts if a.terminal]
    for row in accepted_rows(attempts).values():
        totals.valid_rows[row.arm] += 1
        totals.reward[row.arm] = totals.reward.get(row.arm, 0.0) + (row.reward or 0.0)
    by_account: dict[str, list[AttemptRow]] = {}
    for row in attempts:
        by_account.setdefault(row.account, []).append(row)
    for account, rows in by_account.items():  # unknown, never $0: counted apart (a lower bound)
        totals.spend_usd[account], unknown = known_spend(rows)
        if unknown:
            totals.unknown_cost[account] = unknown
    # the driver's replay rule: a scope on probation (a hypothesis recorded, its probe not yet
    # valid) stays open; one that opened and reopened is exported as 0
    totals.circuits = {scope: fp is not None for scope, fp in circuit_scopes(events).items()}
    totals.circuit_reasons = {e.event.scope: (e.event.failure_class, e.event.message)
                              for e in events if isinstance(e.event, CircuitOpen)}
    audits = [(e.event, e.ts) for e in events if isinstance(e.event, Audit) and e.event.residue is not None]
    if audits:
        (last, totals.audited_at) = audits[-1]
        totals.residue = last.residue
    return totals


class LastingGauges:
    """The ledger-backed gauges of one run, on the exporter's registry."""

    def __init__(self, registry: CollectorRegistry, run_id: str) -> None:
        self.run_id = run_id
        r, run = registry, ["run"]
        self.valid_rows = Gauge("raybench_run_valid_rows", "Valid rows of the run so far, every session "
                                "(from the ledger; survives a resume).", [*run, "arm"], registry=r)
        self.reward = Gauge("raybench_run_reward", "Sum of the rewards of the run's valid rows so far, every "
                            "session (from the ledger); divide by raybench_run_valid_rows for the mean.",
                            [*run, "arm"], registry=r)
        self.spend = Gauge("raybench_run_spend_usd", "Spend of the run so far by account, every session "
                           "(from the ledger; what the spend limit is checked against).", [*run, "account"],
                           registry=r)
        self.unknown_cost = Gauge("raybench_run_unknown_cost_attempts", "Attempts of the run so far whose "
                                  "cost is unknown, by account, every session (from the ledger): while "
                                  "above 0, raybench_run_spend_usd is a lower bound.", [*run, "account"],
                                  registry=r)
        self.spend_limit = Gauge("raybench_spend_limit_usd", "Spend limit of the run (scope=run) or an "
                                 "account's budget (scope=account:NAME).", [*run, "scope"], registry=r)
        self.stopped = Gauge("raybench_run_stopped", "1 for the reason the run's last session stopped "
                             "(0 for every reason while it runs or after a clean finish).", [*run, "reason"],
                             registry=r)
        self.heartbeat = Gauge("raybench_driver_heartbeat_timestamp_seconds", "Unix time of the driver "
                               "loop's last turn; stale while the driver hangs.", run, registry=r)
        self.deadline = Gauge("raybench_deadline_timestamp_seconds", "The run's deadline (unix time), "
                              "only with a deadline.", run, registry=r)
        self.residue = Gauge("raybench_audit_residue_sandboxes", "Sandboxes the end-of-run audit found "
                             "and could not remove (from the backends' labels).", run, registry=r)
        self.audited_at = Gauge("raybench_audit_timestamp_seconds", "When the audit counted in "
                                "raybench_audit_residue_sandboxes ran (unix time); the newest audit of a "
                                "run is its truth, whichever process serves it.", run, registry=r)
        self.cooldown_end = Gauge("raybench_account_cooldown_end_timestamp_seconds", "When the account's "
                                  "cool-down ends (unix time); only while it cools.", ["account"], registry=r)
        self.login_expiry = Gauge("raybench_account_login_expiry_timestamp_seconds", "When the account's "
                                  "HOME login expires (unix time); only for HOME logins.", ["account"],
                                  registry=r)
        for reason in STOP_REASONS:
            self.stopped.labels(run_id, reason).set(0)
        self.residue.labels(run_id).set(0)

    def load(self, totals: LedgerTotals, arms: Iterable[str], accounts: Iterable[str]) -> None:
        """Start from the ledger's totals (circuits go to the exporter's own gauge)."""
        for arm in arms:
            self.valid_rows.labels(self.run_id, arm).set(totals.valid_rows.get(arm, 0))
            self.reward.labels(self.run_id, arm).set(totals.reward.get(arm, 0.0))
        for account in accounts:
            self.spend.labels(self.run_id, account).set(totals.spend_usd.get(account, 0.0))
            self.unknown_cost.labels(self.run_id, account).set(totals.unknown_cost.get(account, 0))
        self.audit(totals.residue, totals.audited_at)

    def audit(self, residue: int | None, at: float | None) -> None:
        """The last audit's count and time (nothing before the run's first audit)."""
        if residue is not None and at is not None:
            self.residue.labels(self.run_id).set(residue)
            self.audited_at.labels(self.run_id).set(at)

    def present(self, arms: Iterable[str] = (), accounts: Iterable[str] = ()) -> None:
        """Make the series of these arms and accounts exist (at their current value, else 0)."""
        for arm in arms:
            self.valid_rows.labels(self.run_id, arm)
            self.reward.labels(self.run_id, arm)
        for account in accounts:
            self.spend.labels(self.run_id, account)
            self.unknown_cost.labels(self.run_id, account)

    def limits(self, run_limit: float | None, budgets: Mapping[str, float | None]) -> None:
        if run_limit is not None:
            self.spend_limit.labels(self.run_id, "run").set(run_limit)
        for account, budget in budgets.items():
            if budget is not None:
                self.spend_limit.labels(self.run_id, f"account:{account}").set(budget)

    def row(self, arm: str, account: str, cost_usd: float | None, valid: bool, reward: float | None = None) -> None:
        """``cost_usd`` None: unknown, counted apart."""
        if valid:
            self.valid_rows.labels(self.run_id, arm).inc()
            self.reward.labels(self.run_id, arm).inc(reward or 0.0)
        if cost_usd is None:
            self.unknown_cost.labels(self.run_id, account).inc()
        elif cost_usd:
            self.spend.labels(self.run_id, account).inc(cost_usd)

    def stop(self, reason: str | None) -> None:
        for known in STOP_REASONS:
            self.stopped.labels(self.run_id, known).set(int(known == reason))

    def beat(self, now: float) -> None:
        self.heartbeat.labels(self.run_id).set(now)

    def set_deadline(self, ts: float | None) -> None:
        if ts is None:
            self.deadline.clear()
        else:
            self.deadline.labels(self.run_id).set(ts)

    def accounts(self, cooldown_ends: Mapping[str, float | None], expiries: Mapping[str, float | None]) -> None:
        for name, end in cooldown_ends.items():
            if end is None:
                _remove(self.cooldown_end, name)
            else:
                self.cooldown_end.labels(name).set(end)
        for name, ts in expiries.items():
            if ts is None:
                _remove(self.login_expiry, name)
            else:
                self.login_expiry.labels(name).set(ts)


def _remove(gauge: Gauge, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        gauge.remove(*labels)
