"""What a finished attempt comes to, as pure decisions (issue 30, step 3): its verdict, its
terminal record, what its account is told, what it charges, and what it does to the quota fit
and the recovery circuit. :class:`~ray_bench.scheduler.runcore.RunCore` turns the result into
the driver's commands, in order (ledger record, release, events), and updates the run state;
the simulator runs the same driver.

A host's full disk is not the cell's failure (it runs again on resume) nor evidence; a
cancelled attempt is judged by no one, but is charged what it spent (unknown: its expected
cost; $0 only when its agent never started); a lost runner says nothing about its account; a
quota refusal is the pool's edge, not a failure signature, unless nothing of ours runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.circuit import RecoveryCircuit
from ray_bench.evidence.classify import Verdict, classify
from ray_bench.ledger import events as ev
from ray_bench.ledger.cost import attempt_cost, cost_is_lower_bound
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.attempt import AttemptSummary
from ray_bench.runroot import DISK_FULL_ERROR
from ray_bench.scheduler.quota_fit import QUOTA_ERROR, QuotaFit
from ray_bench.scheduler.spend import SpendBook


@dataclass(frozen=True)
class Record:
    """The attempt's terminal record (:meth:`~ray_bench.ledger.store.Ledger.finish_attempt`)."""

    status: str
    valid: bool
    reward: float | None
    failure_class: str | None
    fingerprint: str | None
    counts: bool
    cost_usd: float | None
    charged_usd: float | None
    summary: AttemptSummary


@dataclass(frozen=True)
class Release:
    """Give the lease back to its account, judged by ``verdict`` (None: not judged), charging ``usd``."""

    account: str
    lease_id: str
    verdict: Verdict | None
    usd: float
    #: What ``usd`` is (:attr:`ray_bench.accounts.outcome.Outcome.usd_bound`).
    usd_bound: str = "exact"


def _bound(cost: float | None, lower_bound: bool) -> str:
    """What a charge is: the cell's expected cost for an unknown one, at least the cost for a CLI
    cut before it recorded every call, else exact."""
    return "unknown" if cost is None else "lower_bound" if lower_bound else "exact"


@dataclass(frozen=True)
class Append:
    """A run event for the ledger."""

    event: ev.RunEvent
    cell_id: str | None = None


@dataclass(frozen=True)
class Finished:
    """What the driver does, in order: ``record``, ``release``, ``events``; then the run state
    learns ``verdict`` (None: cancelled or the host's fault). ``disk_full``: the error message
    when the attempt met a full disk (the run stops, resumable)."""

    record: Record
    release: Release
    events: tuple[Append, ...] = ()
    verdict: Verdict | None = None
    disk_full: str | None = None


class FinishCore:
    """The finish decisions of one run, over the books it shares with the launch core."""

    def __init__(self, catalog: Catalog, circuit: RecoveryCircuit, quota_fit: QuotaFit, spend: SpendBook) -> None:
        self.catalog = catalog
        self.circuit = circuit
        self.quota_fit = quota_fit
        self.spend = spend

    def finished(self, row: AttemptRow, lease_id: str, summary: AttemptSummary,
                 running_on: Callable[[str], int]) -> Finished:
        """``row`` ended with ``summary``; ``running_on(backend)``: how many attempts of ours
        run there now (read only for a quota refusal)."""
        # What it cost (ray_bench.ledger.cost): a cancelled or lost attempt too, $0 only when its
        # agent never started. An unknown cost is charged at the cell's expected cost, to the run
        # and to the account; the ledger keeps the cost unknown (NULL) and the charge beside it,
        # which a resume charges again (SpendBook.of), so a resumed run's limit stops where an
        # unbroken one would. An attempt cut short teaches the cost history nothing (partial).
        cost = attempt_cost(summary)
        partial = summary.cancelled or summary.lost
        # A CLI cut mid-turn: its cost is a lower bound, charged in full, teaching nothing.
        least = cost_is_lower_bound(summary)
        if summary.error is not None and summary.error.type == DISK_FULL_ERROR:
            charged = self.spend.finish(lease_id, row.task, row.arm, cost, partial=True, lower_bound=least)
            return Finished(Record("finished", False, None, "stack", "disk-full", False, cost, charged, summary),
                            Release(row.account, lease_id, None, charged, _bound(cost, least)),
                            disk_full=summary.error.message)
        if summary.cancelled:
            charged = self.spend.finish(lease_id, row.task, row.arm, cost, partial=True, lower_bound=least)
            self.circuit.probe_finished(row.attempt_id, valid=False, fingerprint=None, counted=False)
            return Finished(Record("cancelled", False, None, None, None, False, cost, charged, summary),
                            Release(row.account, lease_id, None, charged, _bound(cost, least)))
        verdict = classify(summary, self.catalog)
        summary = summary.model_copy(update={"verdict": verdict.record()})
        charged = self.spend.finish(lease_id, row.task, row.arm, cost,
                                    summary.agent.duration_sec if summary.agent else 0.0, partial=partial,
                                    lower_bound=least)
        record = Record("finished", verdict.valid, summary.reward, verdict.failure_class, verdict.fingerprint,
                        verdict.counts, cost, charged, summary)
        release = Release(row.account, lease_id, None if verdict.lost else verdict, charged, _bound(cost, least))
        events: list[Append] = []
        absorbed = self._fit_quota(row, summary, running_on, events)
        self._judge_probe(row, verdict, absorbed, events)
        if verdict.valid:
            self.circuit.record_success(account=row.account, backend=row.backend)
        elif verdict.failure_class and verdict.fingerprint and not verdict.lost and not absorbed:
            for scope in self.circuit.record_failure(verdict.failure_class, verdict.fingerprint,
                                                     account=row.account, backend=row.backend):
                events.append(Append(ev.CircuitOpen(scope=scope, fingerprint=verdict.fingerprint,
                                                    failure_class=verdict.failure_class, message=verdict.message)))
        return Finished(record, release, tuple(events), verdict)

    def _fit_quota(self, row: AttemptRow, summary: AttemptSummary, running_on: Callable[[str], int],
                   events: list[Append]) -> bool:
        """Learn the provider's real pool from a quota refusal (see :mod:`quota_fit`). True when
        the refusal was absorbed; a refusal with nothing of ours running goes to the circuit."""
        if summary.error is None or summary.error.type != QUOTA_ERROR:
            if summary.sandbox_id:
                self.quota_fit.on_created(row.backend)
            return False
        running = running_on(row.backend)
        limit = self.quota_fit.on_quota(row.backend, running)
        events.append(Append(ev.Quota(backend=row.backend, running=running, limit=limit,
                                      message=summary.error.message[:300])))
        return running > 0

    def _judge_probe(self, row: AttemptRow, verdict: Verdict, absorbed: bool, events: list[Append]) -> None:
        """A circuit probe's result: a valid row reopens its scope, the same signature closes it
        again (recorded against the hypothesis), anything else frees it for the next probe."""
        hypotheses = {s: p.hypothesis for s, p in self.circuit.probing.items() if p.attempt_id == row.attempt_id}
        counted = not verdict.lost and not absorbed  # an auth probe counts too, not its attempts
        results = self.circuit.probe_finished(row.attempt_id, valid=verdict.valid,
                                              fingerprint=verdict.fingerprint, counted=counted)
        for scope, result in results.items():
            if result == "reopened":
                events.append(Append(ev.CircuitReopened(scope=scope, via="probe", attempt_id=row.attempt_id,
                                                        hypothesis=hypotheses[scope]), row.cell_id))
            elif result == "closed":
                events.append(Append(ev.CircuitOpen(scope=scope, fingerprint=verdict.fingerprint or "",
                                                    failure_class=verdict.failure_class or "",
                                                    message=verdict.message, probe=row.attempt_id,
                                                    hypothesis=hypotheses[scope]), row.cell_id))
