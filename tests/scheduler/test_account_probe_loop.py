"""Account probes through the real driver loop, in process (virtual clock, no Ray; the probe
runner is a fake): they run before the fan-out, are recorded in the ledger and the account
store, and a passing one reopens the account's recovery circuit."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from ray_bench.accounts.core import AccountCore
from ray_bench.accounts.probe import ProbeResult
from ray_bench.accounts.store import AccountStore
from ray_bench.cells.inprocess import InProcessPool
from ray_bench.clock import FakeClock
from ray_bench.ledger import Ledger
from ray_bench.models.accounts import Account
from ray_bench.scheduler.admission import CoreGate
from ray_bench.scheduler.driver import Driver, RunOptions
from ray_bench.sim.driven import plan_for, roomy_host
from ray_bench.sim.workload import build_workload, parse_spec
from ray_bench.sim.world import SimWorld

SPEC = {"seed": 2, "suite": {"tasks": 2, "arms": ["baseline", "mcp"], "reps": 1},
        "durations": {"lognormal": {"median_s": 60, "sigma": 0.1}},
        "accounts": [{"name": "a", "max_concurrent": 2}, {"name": "b", "max_concurrent": 2}],
        "policies": ["adaptive"]}


def _drive(tmp: Path, verdicts: dict[str, str], *, circuit_open_for: str | None = None) -> Ledger:
    spec = parse_spec(SPEC)
    workload = build_workload(spec)
    plan = plan_for(spec, workload)
    plan = plan.model_copy(update={"accounts": [a.model_copy(update={"probe_command": "true"})
                                                for a in plan.accounts]})
    clock = FakeClock()
    cores = {a.name: AccountCore(a.name, a.limits, now=0.0) for a in spec.accounts}
    calls: list[str] = []

    def fake_probe(account: Account) -> ProbeResult:
        calls.append(account.name)
        return ProbeResult(account.name, verdicts[account.name], f"fake {verdicts[account.name]}")

    run = tmp / "run"
    run.mkdir()
    if circuit_open_for:
        seeded = Ledger.create(run, run_id=plan.run_id, plan_identity="sha256:" + "0" * 64)
        seeded.event("circuit_open", {"scope": f"account:{circuit_open_for}", "fingerprint": "auth-1",
                                      "class": "auth", "message": "401"})
        seeded.close()
    options = RunOptions(tick_sec=30.0, supervisor_every_sec=3600.0, state_root=tmp / "state", account_probe=fake_probe)
    Driver(plan, "sha256:" + "0" * 64, run, InProcessPool(clock, SimWorld(spec, workload, np.random.default_rng(0))),
           CoreGate(plan.accounts, clock=clock.now, cores=cores), roomy_host(plan), options=options, clock=clock).run()
    assert sorted(calls[:2]) == ["a", "b"]  # each account's probe, before the fan-out
    return Ledger.open_readonly(run)


def test_probe_results_are_recorded_before_the_first_attempt() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ledger = _drive(tmp, {"a": "ok", "b": "auth"})
        probes = {e.data["account"]: e for e in ledger.events("account_probe")}
        assert probes["b"].data["effect"] == "disable" and probes["a"].data["effect"] == "clear"
        assert probes["b"].data["when"] == "before the fan-out"
        store = AccountStore(tmp / "state")
        try:  # the account's actor applies this (tests/accounts/test_probe_policy.py: what it does)
            assert [(e.kind, e.reason) for e in store.events_after("b", 0)] == [("probe:disable", "fake auth")]
        finally:
            store.close()


def test_a_passing_probe_reopens_the_accounts_circuit() -> None:
    with tempfile.TemporaryDirectory() as d:
        ledger = _drive(Path(d), {"a": "ok", "b": "ok"}, circuit_open_for="a")
        reopened = ledger.events("circuit_reopened")
        assert [(e.data["scope"], e.data["via"]) for e in reopened] == [("account:a", "account_probe")]
        assert any(r.account == "a" for r in ledger.attempts())  # it took cells again
