"""What a finished attempt comes to (scheduler/finish.py): given the summary and the books,
this record, this release and these events. No driver, no ledger, no gate."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.circuit import Probe, RecoveryCircuit
from ray_bench.ledger import events as ev
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.attempt import AgentError, AttemptError, AttemptSummary, ExecFacts, Usage
from ray_bench.models.plan import PlanCell
from ray_bench.runroot import DISK_FULL_ERROR
from ray_bench.scheduler.finish import FinishCore, Finished
from ray_bench.scheduler.quota_fit import QUOTA_ERROR, QuotaFit
from ray_bench.scheduler.spend import SpendBook

ROW = AttemptRow(attempt_id="c1-a1", cell_id="c1", task="t1", task_checksum="x", arm="baseline", rep=0, seq=1,
                 account="a", backend="daytona", epoch="e", preflight=False, started_at=0.0)
CELL = PlanCell(id="c1", task="t1", arm="baseline", rep=0, backend="daytona")


def summary(**update: object) -> AttemptSummary:
    base = AttemptSummary(attempt_id=ROW.attempt_id, cell_id="c1", task="t1", arm="baseline", rep=0, account="a",
                          backend="daytona", started_at=0.0, sandbox_id="sb-1")
    return base.model_copy(update=update)


def valid() -> AttemptSummary:
    return summary(agent=ExecFacts(exit_code=0, duration_sec=60.0), verifier=ExecFacts(exit_code=0),
                   reward=1.0, reward_source="reward.txt", usage=Usage(output_tokens=10, cost_usd=0.5))


def quota() -> AttemptSummary:
    return summary(sandbox_id=None, error=AttemptError(type=QUOTA_ERROR, message="quota exceeded",
                                                       failure_class="capacity"))


def server_error() -> AttemptSummary:
    return summary(agent=ExecFacts(exit_code=1, output_tail="500 internal"),
                   agent_error=AgentError(type="server_error", message="500 internal"))


def core(circuit: RecoveryCircuit | None = None) -> FinishCore:
    spend = SpendBook(None)
    spend.reserve("l1", CELL)
    return FinishCore(Catalog.default(), circuit or RecoveryCircuit(), QuotaFit(ceiling=8), spend)


def running(n: int) -> Callable[[str], int]:
    return lambda backend: n


# (case, summary, running on its backend, status, valid, counts, judged by its account, event kinds)
CASES = [
    ("valid row", valid(), 0, "finished", True, False, True, []),
    ("disk full", summary(error=AttemptError(type=DISK_FULL_ERROR, message="No space left")), 0,
     "finished", False, False, False, []),
    ("cancelled", summary(cancelled=True), 0, "cancelled", False, False, False, []),
    ("quota with ours running: absorbed", quota(), 3, "finished", False, False, True, ["quota"]),
    ("quota with nothing running", quota(), 0, "finished", False, False, True, ["quota"]),
]


@pytest.mark.parametrize(("case", "got", "run", "status", "valid_", "counts", "judged", "kinds"), CASES,
                         ids=[c[0] for c in CASES])
def test_a_finished_attempt_comes_to_this(case: str, got: AttemptSummary, run: int, status: str, valid_: bool,
                                          counts: bool, judged: bool, kinds: list[str]) -> None:
    done = core().finished(ROW, "l1", got, running(run))
    assert (done.record.status, done.record.valid, done.record.counts) == (status, valid_, counts)
    assert (done.release.account, done.release.lease_id) == ("a", "l1")
    assert (done.release.verdict is not None) == judged
    assert [a.event.kind for a in done.events] == kinds
    assert (done.disk_full is not None) == (case == "disk full")


def test_a_valid_row_is_charged_its_cost_and_its_verdict_is_recorded() -> None:
    done = core().finished(ROW, "l1", valid(), running(0))
    assert done.record.charged_usd == done.release.usd == 0.5
    assert done.record.summary.verdict is not None and done.record.summary.verdict.valid


def test_a_quota_refusal_lowers_the_pool_to_what_runs() -> None:
    finishing = core()
    done = finishing.finished(ROW, "l1", quota(), running(3))
    (append,) = done.events
    assert isinstance(append.event, ev.Quota) and append.event.limit == 3
    assert finishing.quota_fit.limit("daytona") == 3


def repeat(finishing: FinishCore, make: Callable[[], AttemptSummary], times: int, run: int = 0) -> list[Finished]:
    return [finishing.finished(ROW, f"l{i}", make(), running(run)) for i in range(times)]


def test_the_same_signature_opens_the_circuit_but_an_absorbed_quota_refusal_does_not() -> None:
    finishing = core()
    opened = [a.event for d in repeat(finishing, quota, 3, run=2) for a in d.events if a.event.kind == "circuit_open"]
    assert opened == []  # the pool's edge: absorbed, no failure signature
    opened = [a.event for d in repeat(finishing, quota, 3, run=0) for a in d.events if a.event.kind == "circuit_open"]
    assert [e.scope for e in opened if isinstance(e, ev.CircuitOpen)] == ["backend:daytona"]


@pytest.mark.parametrize(("make", "result"), [(valid, "circuit_reopened"), (quota, "circuit_open")])
def test_a_probe_reopens_its_scope_on_a_valid_row_and_closes_it_on_the_same_signature(
        make: Callable[[], AttemptSummary], result: str) -> None:
    circuit = RecoveryCircuit()
    signature = core().finished(ROW, "l0", quota(), running(0)).record.fingerprint
    assert signature is not None
    circuit.probing["backend:daytona"] = Probe(signature, "bigger pool", ROW.attempt_id)
    done = core(circuit).finished(ROW, "l1", make(), running(0))
    assert [(a.event.kind, a.cell_id) for a in done.events if a.event.kind.startswith("circuit")] == [(result, "c1")]
    assert "backend:daytona" not in circuit.probing


def test_a_failure_of_the_accounts_fault_is_judged_by_the_account() -> None:
    done = core().finished(ROW, "l1", server_error(), running(0))
    assert done.release.verdict is not None and done.release.verdict.effect == "server_error"
    assert not done.record.valid


def _cancelled_core() -> FinishCore:
    spend = SpendBook(None, {"baseline": 0.4})  # the arm's role bound: the expected cost
    spend.reserve("l1", CELL)
    return FinishCore(Catalog.default(), RecoveryCircuit(), QuotaFit(ceiling=8), spend)


@pytest.mark.parametrize(("case", "got", "cost", "charged"), [
    ("usage known", summary(cancelled=True, agent_started=True, usage=Usage(output_tokens=9, cost_usd=0.12)),
     0.12, 0.12),
    ("usage unknown", summary(cancelled=True, agent_started=True), None, 0.4),
    ("the pool's summary (agent unknown)", summary(cancelled=True), None, 0.4),
    ("agent never started", summary(cancelled=True, agent_started=False), 0.0, 0.0),
])
def test_a_cancelled_attempt_is_charged_what_it_spent_or_its_expected_cost(
        case: str, got: AttemptSummary, cost: float | None, charged: float) -> None:
    finish = _cancelled_core()
    done = finish.finished(ROW, "l1", got, running(0))
    assert (done.record.status, done.record.cost_usd, done.record.charged_usd) == ("cancelled", cost, charged)
    assert (done.release.verdict, done.release.usd) == (None, charged)  # the account is charged the same
    # and told what the charge is, which its lifetime spend in accounts.sqlite keeps
    assert done.release.usd_bound == ("unknown" if cost is None else "exact")
    assert finish.spend.spent == pytest.approx(charged)
    assert finish.spend.unknown == (1 if cost is None else 0)
    # a cost cut short is no measure of a whole cell: the expected cost stays the role bound
    assert finish.spend.expected(CELL).usd == 0.4
