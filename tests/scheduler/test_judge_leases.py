"""A cell whose verifier takes its credentials from a judge account holds a lease there too
(ray_bench/scheduler/core.py, "A judge account's slot too"): the account choice counts it, the
gates start both or neither, and every way a cell ends (finish, cancel, its account's refusal,
the driver's death, a resume) gives both back. Without Ray; the Ray side is
tests/onray/test_judge_lease_ray.py."""

from __future__ import annotations

from dataclasses import replace

from ray_bench.accounts.keepers import AccountGrants
from ray_bench.evidence.circuit import RecoveryCircuit
from ray_bench.evidence.classify import Verdict
from ray_bench.models.accounts import Account, AccountLimits
from ray_bench.models.plan import Plan, PlanCell
from ray_bench.models.suite import Arm
from ray_bench.models.task.harbor import TaskConfig
from ray_bench.plan.roles import judge_lease_account
from ray_bench.scheduler.admission import CoreGate, budget_only
from ray_bench.scheduler.core import Candidate, LeaseRequest, assign, judge_lease
from ray_bench.scheduler.launch import AskGate, LaunchCore, Round
from ray_bench.scheduler.quota_fit import QuotaFit
from ray_bench.scheduler.runstate import RunState
from ray_bench.scheduler.spend import SpendBook
from ray_bench.sim.driven import plan_for
from ray_bench.sim.workload import build_workload, parse_spec

NOW = 1_800_000_000.0


def _account(name: str, slots: int, env: dict[str, str] | None = None) -> Account:
    return Account.model_validate({"name": name, "route": {"env": env or {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
                                   "limits": {"max_concurrent": slots}})


def _request(n: int, judge: str | None = "judge") -> LeaseRequest:
    cell = PlanCell(id=f"c{n}", task="t", arm="a", rep=n, backend="local")
    return LeaseRequest(f"r/c{n}#{n}", cell, horizon_sec=60, judge=judge)


def _gate() -> CoreGate:
    # the judge account takes no cells of its own here: its circuit is open (``exclude``)
    return CoreGate([_account("agents", 4), _account("judge", 1, {"ANTHROPIC_API_KEY": "RB_TEST_JUDGE_KEY"})],
                    now=NOW)


def _inflight(gate: CoreGate) -> dict[str, int]:
    return {name: core.inflight for name, core in gate.cores.items()}


def test_the_lease_is_taken_only_for_a_named_judge_whose_route_the_verifier_uses() -> None:
    accounts = {"agents": _account("agents", 1), "judge": _account("judge", 1, {"ANTHROPIC_API_KEY": "K"})}
    judged = TaskConfig.model_validate({"verifier": {"env": {"ANTHROPIC_API_KEY": "${ANTHROPIC_API_KEY}"}}})
    plain = TaskConfig()

    def arm(route: str | None) -> Arm:
        roles = [{"role": "judge", "model": "m", "route": route, "billing": "api"}] if route else []
        return Arm.model_validate({"name": "a", "role": "baseline", "command": "true", "roles": roles})

    assert judge_lease_account(arm("judge"), judged, accounts) == "judge"
    assert judge_lease_account(arm("judge"), plain, accounts) is None  # its verifier names no key
    assert judge_lease_account(arm("accounts"), judged, accounts) is None  # the cell's own lease counts it
    assert judge_lease_account(arm("SOME_VAR"), judged, accounts) is None  # a variable: no account
    assert judge_lease_account(arm(None), judged, accounts) is None


def test_the_choice_counts_the_judges_slots_and_cells_on_the_judge_itself_need_none() -> None:
    requests = [_request(n) for n in range(3)]
    agents = Candidate("agents", headroom=4, limit=4)
    # one judge slot: one cell runs elsewhere with it, the others wait
    assert {n: [r.cell.id for r in rs] for n, rs in assign(requests, [agents], 0.0, (), {"judge": 1}).items()} \
        == {"agents": ["c0"]}
    assert assign(requests, [agents], 0.0, (), {"judge": 0}) == {}
    # the judge account takes cells too: its two slots go to two cells, wherever they run
    judge = Candidate("judge", headroom=2, limit=2)

    def ids(shares: dict[str, list[LeaseRequest]]) -> dict[str, list[str]]:
        return {n: [r.cell.id for r in rs] for n, rs in shares.items()}

    assert ids(assign(requests, [agents, judge], 0.0, (), {"judge": 2})) == {"agents": ["c0", "c1"]}
    # cells on the judge itself need no second slot; c2 finds room on agents but no judge slot
    assert ids(assign(requests, [Candidate("agents", headroom=1, limit=4), judge], 0.0, (), {"judge": 2})) \
        == {"judge": ["c0", "c1"]}
    # requests without a judge are not held back by one
    free = [_request(n, judge=None) for n in range(3)]
    assert len(assign(free, [agents], 0.0, (), {"judge": 0})["agents"]) == 3


def test_both_leases_are_held_for_the_cell_and_released_on_finish_and_cancel() -> None:
    gate = _gate()
    granted = gate.acquire_many([_request(0), _request(1)], NOW, exclude={"judge"})
    assert granted == {"r/c0#0": "agents"}  # the judge's one slot bounds the cells
    assert _inflight(gate) == {"agents": 1, "judge": 1}
    assert gate.cores["judge"].running(judge_lease("r/c0#0")) is not None

    success = Verdict(valid=True, failure_class=None, fingerprint=None, message="", effect="success")
    gate.release("agents", "r/c0#0", success, 0.5, NOW + 10)
    assert _inflight(gate) == {"agents": 0, "judge": 0}
    assert gate.cores["judge"].spent_usd == 0.0 and gate.cores["agents"].spent_usd == 0.5

    assert gate.acquire_many([_request(1)], NOW + 11, exclude={"judge"}) == {"r/c1#1": "agents"}
    gate.release("agents", "r/c1#1", None, 0.0, NOW + 12)  # cancelled: judged by no one
    assert _inflight(gate) == {"agents": 0, "judge": 0}


def test_a_cell_refused_by_its_own_account_gives_the_judges_slot_back() -> None:
    # the choice sees room on ``agents`` (its snapshot weighs the last cost asked for), but its
    # budget refuses this cell's expected cost at the start: the judge's lease, taken first, goes back
    agents = Account.model_validate({"name": "agents", "route": {"env": {"DEMO_API_KEY": "RB_TEST_KEY_A"}},
                                     "limits": {"max_concurrent": 4, "spend_usd": 1.0}})
    gate = CoreGate([agents, _account("judge", 1, {"ANTHROPIC_API_KEY": "RB_TEST_JUDGE_KEY"})], now=NOW)
    costly = replace(_request(0), expected_usd=2.0)
    assert gate.acquire_many([costly], NOW, exclude={"judge"}) == {}
    assert _inflight(gate) == {"agents": 0, "judge": 0}
    assert gate.cores["judge"].snapshot(NOW).headroom == 1  # free for the next cell


def test_a_stopped_driver_and_a_resumed_run_leave_no_judge_lease() -> None:
    gate = _gate()
    assert gate.acquire_many([_request(0)], NOW, exclude={"judge"})
    gate.close()  # the driver stops (or dies: run()'s finally) holding the cell
    assert _inflight(gate) == {"agents": 0, "judge": 0}

    # on Ray the keeper frees a run's leases by their prefix when the run resumes (or stops renewing)
    keeper = AccountGrants("judge", AccountLimits(max_concurrent=1))
    started, _ = keeper.acquire_many("r", [(judge_lease("r/c0#0"), "c0", 0.0)])
    assert started == [judge_lease("r/c0#0")] and keeper.core.inflight == 1
    assert keeper.abandon_run("r") == 1 and keeper.core.inflight == 0


def test_a_judge_no_one_will_free_is_a_stall_not_a_wait_for_ever() -> None:
    gate = _gate()
    gate.cores["judge"].health.hold()
    assert gate.acquire_many([_request(0)], NOW, exclude={"judge"}) == {}
    assert gate.blocked_until(NOW) is None and gate.stalled(NOW, 60) is None  # agents would take it
    assert gate.stalled(NOW, 60, judges=frozenset({"judge"})) == "the waiting cells' judge accounts: judge held"
    gate.cores["judge"].health.release(NOW)
    assert gate.stalled(NOW, 60, judges=frozenset({"judge"})) is None


def _judged_plan(tasks: int, judge_slots: int) -> Plan:
    """A simulated plan whose arm mcp's verifiers take their key from ``judge``; baseline's need none."""
    spec = parse_spec({"seed": 1, "suite": {"tasks": tasks, "arms": ["baseline", "mcp"]},
                       "durations": {"lognormal": {"median_s": 60, "sigma": 0}},
                       "accounts": [{"name": "agents", "max_concurrent": 4},
                                    {"name": "judge", "max_concurrent": judge_slots}],
                       "judges": [{"arm": "mcp", "account": "judge"}]})
    return plan_for(spec, build_workload(spec))


def test_a_round_asks_for_the_judge_lease_and_the_gate_about_the_judges_when_every_cell_needs_one() -> None:
    plan = _judged_plan(tasks=2, judge_slots=2)

    def round_of(arms: set[str]) -> tuple[Round, LaunchCore]:
        picked = plan.model_copy(update={"cells": [c for c in plan.cells if c.arm in arms]})
        launch = LaunchCore(picked, 4, RecoveryCircuit(), QuotaFit(ceiling=4), SpendBook.of(picked, ()))
        return launch.plan_round(RunState(picked, []), (), 0, NOW), launch

    round_, launch = round_of({"mcp"})
    assert [r.judge for r in round_.requests] == ["judge", "judge"]
    asked = launch.conclude(round_, waiting=2, inflight=0, now=NOW)
    assert isinstance(asked, AskGate) and asked.judges == {"judge"}
    round_, launch = round_of({"baseline", "mcp"})
    assert sorted(str(r.judge) for r in round_.requests) == ["None", "None", "judge", "judge"]
    asked = launch.conclude(round_, waiting=4, inflight=0, now=NOW)
    assert isinstance(asked, AskGate) and asked.judges == frozenset()  # baseline's cells wait on no judge


def test_a_judge_out_of_its_budget_stops_the_run_as_budget() -> None:
    judge = Account.model_validate({"name": "judge", "route": {"env": {"ANTHROPIC_API_KEY": "RB_TEST_JUDGE_KEY"}},
                                    "limits": {"max_concurrent": 1, "spend_usd": 1.0}})
    gate = CoreGate([_account("agents", 4), judge], now=NOW)
    gate.cores["judge"].spent_usd = 1.0
    why = gate.stalled(NOW, 60, judges=frozenset({"judge"}))
    assert why == "the waiting cells' judge accounts: judge budget" and budget_only(why)


def test_a_round_passes_over_cells_whose_judge_this_runs_cells_fill_and_keeps_them_first() -> None:
    plan = _judged_plan(tasks=3, judge_slots=1)
    launch = LaunchCore(plan, 4, RecoveryCircuit(), QuotaFit(ceiling=4), SpendBook.of(plan, ()))
    state = RunState(plan, [])
    running = next(c for c in plan.cells if c.arm == "mcp")
    assert launch.holding([("agents", running)]) == {"agents": 1, "judge": 1}
    round_ = launch.plan_round(state, (), 1, NOW, launch.holding([("agents", running)]))
    assert {r.cell.arm for r in round_.requests} == {"baseline"} and len(round_.requests) == 3
    state.put_back([r.cell for r in round_.requests])
    first = launch.plan_round(state, (), 0, NOW, {})  # the judge free again: mcp's cells are asked for
    assert sum(r.cell.arm == "mcp" for r in first.requests) == 1 and len(first.requests) == 4
