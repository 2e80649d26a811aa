"""The launch policy as pure decisions (scheduler/launch.py): given the run state, the books
and the views, these requests and this outcome. No driver, no gate, no clock."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from support.launch_world import a_plan

from ray_bench.accounts import RefusalReason
from ray_bench.evidence.circuit import Probe, RecoveryCircuit
from ray_bench.ledger.store import AttemptRow
from ray_bench.scheduler.core import LeaseRequest
from ray_bench.scheduler.launch import AT_LIMIT, AskGate, Halt, LaunchCore, Wait
from ray_bench.scheduler.quota_fit import QuotaFit
from ray_bench.scheduler.runstate import RunState
from ray_bench.scheduler.spend import SpendBook
from ray_bench.sim.driven import HORIZON_SEC


def row_of(request: LeaseRequest, account: str = "a") -> AttemptRow:
    cell = request.cell
    return AttemptRow(attempt_id="att-1", cell_id=cell.id, task=cell.task, task_checksum="x", arm=cell.arm,
                      rep=cell.rep, seq=1, account=account, backend=cell.backend, epoch="e", preflight=False,
                      started_at=0.0)


@dataclass
class World:
    """One run's books as the core sees them at time 0."""

    capacity: int = 4
    open_scopes: dict[str, str] = field(default_factory=dict)
    probing: dict[str, Probe] = field(default_factory=dict)
    creates_per_minute: dict[str, float] = field(default_factory=dict)
    spend_limit_usd: float | None = None

    def build(self) -> tuple[RunState, LaunchCore]:
        plan = a_plan(spend_limit_usd=self.spend_limit_usd)
        circuit = RecoveryCircuit(open_scopes=dict(self.open_scopes), probing=dict(self.probing))
        quota = QuotaFit(ceiling=self.capacity, creates_per_minute=dict(self.creates_per_minute))
        return RunState(plan, []), LaunchCore(plan, self.capacity, circuit, quota, SpendBook.of(plan, ()))


# (case, world, cells running, requests asked, what the round comes to when no account takes one)
ROUNDS = [
    ("free slots", World(capacity=4), 0, 4, AskGate),
    ("free slots, one running", World(capacity=4), 1, 3, Wait),
    ("full", World(capacity=4), 4, 0, Wait),
    ("create rate", World(creates_per_minute={"local": 6.0}), 0, 1, AskGate),
    ("spend limit, nothing runs", World(spend_limit_usd=0.1), 0, 0, Halt),
    ("spend limit, one runs", World(spend_limit_usd=0.1), 1, 0, Wait),
    ("backend circuit open", World(open_scopes={"backend:local": "fp"}), 0, 0, Halt),
    ("backend probation", World(probing={"backend:local": Probe("fp", "h")}), 0, 1, AskGate),
    ("backend probe in flight", World(probing={"backend:local": Probe("fp", "h", "att-1")}), 1, 0, Wait),
    ("every account's circuit open", World(open_scopes={"account:a": "fp", "account:b": "fp"}), 0, 4, Halt),
]


@pytest.mark.parametrize(("case", "world", "inflight", "asked", "outcome"), ROUNDS, ids=[r[0] for r in ROUNDS])
def test_a_round_asks_for_these_cells_and_comes_to_this(case: str, world: World, inflight: int, asked: int,
                                                        outcome: type) -> None:
    state, core = world.build()
    pending = len(state.pending)
    round_ = core.plan_round(state, [], inflight, 0.0)
    assert len(round_.requests) == asked
    assert len(state.pending) == pending - asked  # asked cells left the queue, no other did
    assert [r.lease_id for r in round_.requests] == [f"sim/{r.cell.id}#{i}" for i, r in enumerate(round_.requests)]
    assert all(r.horizon_sec == HORIZON_SEC for r in round_.requests)  # agent + verifier limits
    decision = round_.halt or core.conclude(round_, len(round_.requests), inflight, 0.0)
    assert isinstance(decision, outcome), decision


def test_a_circuit_stop_puts_every_taken_cell_back_and_names_the_scope() -> None:
    state, core = World(open_scopes={"backend:local": "sig-1"}).build()
    round_ = core.plan_round(state, [], 0, 0.0)
    assert round_.halt == Halt("circuit", "recovery circuit open for backend:local (signature sig-1); "
                                          "resume with --hypothesis TEXT")
    assert len(round_.checked) == 1  # the cell it stopped at has its inputs checked too: drift wins
    assert len(state.pending) == len(state.cells)


def test_a_probation_probe_goes_alone_and_is_remembered_until_it_starts() -> None:
    state, core = World(probing={"backend:local": Probe("fp", "h")}).build()
    round_ = core.plan_round(state, [], 0, 0.0)
    (probe,) = round_.requests
    assert core.probe_leases == {probe.lease_id: ["backend:local"]}
    (event,) = core.started(round_, probe, row_of(probe), 0.0)
    assert (event.scope, event.attempt_id, event.hypothesis, event.account) == ("backend:local", "att-1", "h", "a")
    assert core.probe_leases == {}
    assert core.circuit.probing["backend:local"].attempt_id == "att-1"  # in flight: the next round waits
    assert core.plan_round(state, [], 1, 0.0).requests == ()


def test_the_create_rate_paces_the_round_and_sets_the_wake_up() -> None:
    state, core = World(creates_per_minute={"local": 6.0}).build()  # a burst of one, then one per 10 s
    round_ = core.plan_round(state, [], 0, 0.0)
    assert round_.paced == "local"
    assert core.started(round_, round_.requests[0], row_of(round_.requests[0]), 0.0) == []
    assert core.conclude(round_, 0, 1, 0.0) == Wait("waiting: local creates per minute (next in 10 s)")
    assert core.wake_at == pytest.approx(10.0)
    assert core.plan_round(state, [], 1, 1.0).requests == ()  # the token is spent


def test_the_spend_limit_stops_only_when_nothing_runs() -> None:
    state, core = World(spend_limit_usd=0.1).build()  # below one default cell ($0.25)
    round_ = core.plan_round(state, [], 0, 0.0)
    assert round_.over is not None and round_.over.usd == pytest.approx(0.25)
    halt = core.conclude(round_, 0, 0, 0.0)
    assert isinstance(halt, Halt) and halt.reason == "spend" and "$0.10" in halt.detail


def test_a_cell_that_shuns_its_account_takes_no_free_slot() -> None:
    state, core = World(capacity=2).build()
    core.quota_fit = QuotaFit(ceiling=8)  # an unpaced backend allows `ceiling` creates a round
    first = state.take(0.0)
    assert first is not None
    state.put_back([first])
    shunner = state.cells[first.id]
    shunner.shuns, shunner.last_account = True, "a"
    asked = core.plan_round(state, [], 0, 0.0).requests
    # it may wait for b rather than go back to a: two more fill the two slots
    assert sorted(r.shun for r in asked) == [False, False, True]
    assert [r.avoid for r in asked if r.shun] == ["a"]


def test_accounts_on_probation_or_open_are_not_offered_the_batch() -> None:
    _, core = World(open_scopes={"account:a": "fp"}, probing={"account:b": Probe("fp", "h")}).build()
    assert core.blocked_accounts() == {"a"}
    assert core.excluded() == {"a", "b"}
    assert core.account_probes() == [("account:b", "b")]


WHEN_IDLE = [
    ("an account frees itself", (30.0, "every account is cooling"), None,
     Wait("waiting: every account is cooling (next in 20 s)")),
    ("budgets spent", None, f"a {RefusalReason.BUDGET}, b {RefusalReason.BUDGET}", Halt),
    ("an operator is needed", None, f"a {RefusalReason.BUDGET}, b held by operator", Halt),
    ("neither", None, None, Wait(AT_LIMIT)),
]


@pytest.mark.parametrize(("case", "blocked", "stalled", "expected"), WHEN_IDLE, ids=[w[0] for w in WHEN_IDLE])
def test_when_nothing_runs_and_nothing_started(case: str, blocked: tuple[float, str] | None, stalled: str | None,
                                               expected: Wait | type) -> None:
    _, core = World().build()
    got = core.when_idle(blocked, stalled, 10.0)
    if isinstance(expected, type):
        assert isinstance(got, expected)
        reason = "accounts" if stalled and "held" in stalled else "budget"
        assert isinstance(got, Halt) and got.reason == reason and (stalled or "") in got.detail
    else:
        assert got == expected
    assert core.wake_at == (blocked[0] if blocked else None)


def test_an_account_on_probation_is_offered_one_request_that_is_no_other_scopes_probe() -> None:
    state, core = World(probing={"account:a": Probe("fp", "h"), "account:b": Probe("fp", "h")}).build()
    round_ = core.plan_round(state, [], 0, 0.0)
    first = core.probe_offer(round_.requests, {})
    assert first is round_.requests[0]
    core.probe_granted(first, "account:a")
    second = core.probe_offer(round_.requests, {first.lease_id: "a"})
    assert second is round_.requests[1]
    (event,) = core.started(round_, first, row_of(first), 0.0)
    assert event.scope == "account:a" and core.circuit.probing["account:b"].attempt_id is None
