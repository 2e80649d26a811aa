"""What an attempt cost (ray_bench/ledger/cost.py), issue 25: a cancelled attempt costs what its
usage says, $0 only when its agent never started, else unknown; the ledger and ``ledger
rebuild`` keep the same figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.evidence.rebuild import rebuild_ledger
from ray_bench.ledger.cost import attempt_cost
from ray_bench.ledger.rows import known_spend
from ray_bench.ledger.store import Ledger
from ray_bench.models.attempt import AttemptSummary, Usage
from ray_bench.plan.store import load_plan_file

PRICED = Usage(input_tokens=1000, output_tokens=40, cost_usd=0.07)
NO_PRICE = Usage(input_tokens=1000, output_tokens=40)  # tokens of a model with no price
UNKNOWN = Usage(source="unknown")

# (case, summary, cost)
CASES: list[tuple[str, AttemptSummary, float | None]] = [
    ("cancelled, usage known", AttemptSummary(cancelled=True, agent_started=True, usage=PRICED), 0.07),
    ("cancelled, agent never started", AttemptSummary(cancelled=True, agent_started=False), 0.0),
    ("cancelled mid-agent, usage unread", AttemptSummary(cancelled=True, agent_started=True), None),
    ("cancelled, usage says unknown", AttemptSummary(cancelled=True, agent_started=True, usage=UNKNOWN), None),
    ("cancelled, tokens without a price", AttemptSummary(cancelled=True, agent_started=True, usage=NO_PRICE),
     None),
    ("cancelled, a summary older than agent_started", AttemptSummary.parse({"cancelled": True}), None),
    ("lost with its runner", AttemptSummary(lost=True), None),
    ("lost before its agent", AttemptSummary(lost=True, agent_started=False), 0.0),
    ("finished", AttemptSummary(agent_started=True, usage=PRICED), 0.07),
    ("finished, no usage record (a command agent)", AttemptSummary(agent_started=True), 0.0),
    ("finished, tokens without a price", AttemptSummary(agent_started=True, usage=NO_PRICE), None),
]


@pytest.mark.parametrize(("case", "summary", "cost"), CASES, ids=[c[0] for c in CASES])
def test_what_an_attempt_cost(case: str, summary: AttemptSummary, cost: float | None) -> None:
    assert attempt_cost(summary) == cost


def test_an_old_summary_reads_agent_started_as_unknown_and_a_new_one_keeps_it() -> None:
    assert AttemptSummary.parse({"attempt_id": "x"}).agent_started is None
    assert AttemptSummary.loads(AttemptSummary(agent_started=False).dumps()).agent_started is False


def _cancelled(ledger: Ledger, cell: str, summary: AttemptSummary, cost: float | None) -> None:
    row = ledger.start_attempt(cell_id=cell, task="t", task_checksum="c", arm="a", rep=1, account="acc",
                               backend="local", epoch="sha256:e", preflight=False, now=1.0)
    ledger.finish_attempt(row.attempt_id, status="cancelled", valid=False, reward=None, failure_class=None,
                          fingerprint=None, counts=False, cost_usd=cost, charged_usd=0.25,
                          summary=summary, now=2.0)


def test_cancelled_costs_round_trip_through_the_ledger_and_an_old_zero_is_read_again(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:p")
    known = AttemptSummary(cancelled=True, agent_started=True, usage=PRICED)
    _cancelled(ledger, "known", known, attempt_cost(known))
    unread = AttemptSummary(cancelled=True, agent_started=True)
    _cancelled(ledger, "unread", unread, attempt_cost(unread))
    never = AttemptSummary(cancelled=True, agent_started=False)
    _cancelled(ledger, "never", never, attempt_cost(never))
    # what a driver before issue 25 stored: $0 for an agent cancelled mid-run
    _cancelled(ledger, "old", AttemptSummary.parse({"cancelled": True}), 0.0)
    ledger.close()
    with Ledger.reading(tmp_path) as ledger:
        rows = {r.cell_id: r for r in ledger.attempts()}
    assert {c: r.cost_usd for c, r in rows.items()} == {"known": 0.07, "unread": None, "never": 0.0,
                                                        "old": None}
    assert rows["unread"].charged_usd == 0.25  # what admission charged it, for a resume
    assert known_spend(rows.values()) == (0.07, 2)


def _result(attempt_dir: Path, **kw: Any) -> None:
    doc: dict[str, Any] = {"attempt_id": attempt_dir.name, "account": "acct-a",
                           "started_at": 1000.0, "finished_at": 1010.0, "cancelled": True, **kw}
    attempt_dir.mkdir(parents=True)
    (attempt_dir / "result.json").write_text(json.dumps(doc))


def test_rebuild_keeps_what_a_cancelled_attempt_cost(tmp_path: Path) -> None:
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world", "sum-list"])
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="lost")
    plan, _ = load_plan_file(planned.run_root / "launch-plan.json")
    first, second = (c.id for c in plan.cells[:2])
    attempts = planned.run_root / "attempts"
    _result(attempts / f"{first}-a1", agent_started=True, usage={"output_tokens": 40, "cost_usd": 0.07})
    _result(attempts / f"{first}-a2", agent_started=False)
    _result(attempts / f"{second}-a1", agent_started=True)
    rebuild_ledger(planned.run_root)
    with Ledger.reading(planned.run_root) as ledger:
        costs = {r.attempt_id: (r.status, r.cost_usd) for r in ledger.attempts()}
    assert costs == {f"{first}-a1": ("cancelled", 0.07), f"{first}-a2": ("cancelled", 0.0),
                     f"{second}-a1": ("cancelled", None)}
