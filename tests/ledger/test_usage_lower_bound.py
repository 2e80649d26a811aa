"""Usage that is a lower bound (issue 25): a Claude Code cut before it wrote its transcript
leaves usage from its stream alone, where an unfinished message's output counts only what had
arrived. That is a typed fact (``usage.bound``: ``exact`` or ``lower_bound``) carried from the
adapter through the summary and the ledger to the report (md, html, csv), ``status`` and the
spend limits, where it still counts in full and reads ``>=``. A ledger older than the field
reads it from ``unfinished_messages``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from agents.test_translate import SERVED, _fixture
from reports.report_ledgers import TASKS, Writer
from support.suites import make_suite

from ray_bench.agents.prices import with_cost
from ray_bench.agents.runtime import adapter
from ray_bench.api import plan_run
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.circuit import RecoveryCircuit
from ray_bench.ledger.cost import attempt_cost, cost_is_lower_bound
from ray_bench.ledger.rows import known_spend, lower_bound_count
from ray_bench.ledger.store import AttemptRow, Ledger
from ray_bench.models.attempt import AttemptSummary, ExecFacts
from ray_bench.models.plan import PlanCell
from ray_bench.reports.build import write_report
from ray_bench.scheduler.finish import FinishCore
from ray_bench.scheduler.quota_fit import QuotaFit
from ray_bench.scheduler.spend import SpendBook
from ray_bench.status.read import read_status
from ray_bench.status.text import status_lines

#: The killed fixture read from its stream alone, as the adapter writes it (usage.json).
STREAM_ONLY = {"input_tokens": 300, "output_tokens": 2, "cost_usd": 0.0009, "cost_basis": "estimated",
               "source": "stream", "unfinished_messages": 2, "bound": "lower_bound", "request_ids": ["r1", "r2"]}
EXACT = {"input_tokens": 300, "output_tokens": 20, "cost_usd": 0.0012, "cost_basis": "estimated",
         "source": "session", "unfinished_messages": 0, "bound": "exact", "request_ids": ["r3", "r4"]}


def test_the_claude_adapter_says_a_stream_only_usage_is_a_lower_bound() -> None:
    claude = adapter("claude-code")
    stream_only = with_cost(claude.translate(_fixture("killed", sessions=False)).usage, "claude-sonnet-4-5")
    assert stream_only is not None and stream_only.source == "stream" and stream_only.unfinished_messages
    assert stream_only.bound == "lower_bound"
    assert stream_only.output_tokens < SERVED["killed"]["output_tokens"]  # what it is a lower bound of
    session = with_cost(claude.translate(_fixture("killed")).usage, "claude-sonnet-4-5")
    assert session is not None and session.source == "session" and session.bound == "exact"
    finished = with_cost(claude.translate(_fixture("tool-call")).usage, None)
    assert finished is not None and finished.source == "result" and finished.bound == "exact"
    unknown = with_cost(claude.translate(_fixture("killed", cut=True, sessions=False)).usage, None)
    assert unknown is not None  # the bound is said only of known usage
    assert unknown.bound == ("lower_bound" if unknown.source != "unknown" else None)
    # what usage.json carries, and the summary reads back
    summary = AttemptSummary.parse({"usage": stream_only.model_dump(mode="json", exclude_none=True)})
    assert summary.usage_lower_bound and cost_is_lower_bound(summary)
    assert AttemptSummary.loads(summary.dumps()).usage_lower_bound


@pytest.mark.parametrize(("usage", "lower"), [
    (STREAM_ONLY, True),
    (EXACT, False),
    # older than the field: read from what the adapter already wrote
    ({"input_tokens": 300, "output_tokens": 2, "cost_usd": 0.0009, "source": "stream", "unfinished_messages": 2},
     True),
    ({"input_tokens": 300, "output_tokens": 2, "source": "session", "call_under_way": True, "cost_usd": 0.1}, True),
    ({"input_tokens": 300, "output_tokens": 20, "cost_usd": 0.0012, "source": "session"}, False),
    ({"input_tokens": 3, "output_tokens": 1, "cost_usd": 0.01}, False),  # a command agent's own record
    ({"source": "unknown", "unfinished_messages": 2}, False),  # unknown is no bound: counted apart
    ({"input_tokens": 3, "output_tokens": 1, "cost_usd": 0.01, "bound": "approx"}, False),  # foreign: usage kept
], ids=["bound said", "exact", "old, unfinished", "old, call under way", "old, finished", "agent's own",
        "unknown", "foreign value"])
def test_the_summary_reads_the_bound_old_or_new(usage: dict[str, Any], lower: bool) -> None:
    summary = AttemptSummary.parse({"usage": usage})
    assert summary.usage is not None and summary.usage_lower_bound is lower
    assert cost_is_lower_bound(summary) is (lower and attempt_cost(summary) is not None)
    assert ("bound" in json.loads(summary.dumps())["usage"]) is ("bound" in usage)  # shape kept


@pytest.fixture
def run(tmp_path: Path) -> Path:
    suite, accounts = make_suite(tmp_path / "s", tasks=TASKS, reps=1)
    root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="lb").run_root
    w = Writer(root)
    w.ledger.event("run_started", {"identity": w.identity, "deadline": None}, now=time.time() - 100)
    t = time.time() - 90
    old_form = {k: v for k, v in STREAM_ONLY.items() if k != "bound"}  # a ledger older than the field
    for i, (task, usage) in enumerate([("hello-world", STREAM_ONLY), ("fizzbuzz", EXACT), ("sum-list", old_form)]):
        w.attempt(task, "baseline", 1, t + i, reward=1.0, usage=usage)
    w.attempt("count-words", "mcp", 1, t + 5, reward=1.0, usage=EXACT)
    w.ledger.event("run_finished", {"run_id": w.plan.run_id, "stopped": None, "detail": ""}, now=t + 20)
    w.ledger.close()
    return root


def test_the_ledger_row_says_its_cost_is_a_lower_bound_and_it_still_counts(run: Path) -> None:
    with Ledger.reading(run) as ledger:
        rows = {r.task: r for r in ledger.attempts()}
    assert {t: r.lower_bound for t, r in rows.items()} == {
        "hello-world": True, "fizzbuzz": False, "sum-list": True, "count-words": False}
    known, unknown = known_spend(rows.values())
    assert known == pytest.approx(0.0009 * 2 + 0.0012 * 2) and unknown == 0  # counted in full, never dropped
    assert lower_bound_count(rows.values()) == 2


def test_status_shows_the_spend_as_at_least(run: Path) -> None:
    status = read_status(run)
    assert status.lower_bound_cost == 2 and status.unknown_cost == 0
    assert status.to_json()["lower_bound_cost_attempts"] == 2
    assert ("spend: at least $0.00 (2 attempts cut mid-turn, whose usage is a lower bound)"
            in status_lines(status))


def test_every_report_format_shows_the_lower_bound(run: Path) -> None:
    report = write_report(run)
    att = report.attempts.set_index("task")
    assert list(att.loc[["hello-world", "fizzbuzz", "sum-list"], "usage_bound"]) == [
        "lower_bound", "exact", "lower_bound"]
    usage = report.usage.set_index("arm")
    assert usage.loc["baseline", "lower_bound_attempts"] == 2 and usage.loc["mcp", "lower_bound_attempts"] == 0
    arms = report.arms.set_index("arm")
    assert arms.loc["baseline", "lower_bound_attempts"] == 2 and arms.loc["mcp", "lower_bound_attempts"] == 0
    md = (run / "report.md").read_text()
    # the arm's totals and the account's usage row: every sum an attempt cut mid-turn is in
    baseline_arm = next(line for line in md.splitlines() if line.startswith("| baseline | "))
    assert "| >= 0.003 |" in baseline_arm
    assert "| acct-a | baseline | 3 | >= 900 | >= 24 | - | - | >= 0.0030 | - | 0 | 3 | 0 |" in md
    assert "| acct-b | mcp | 1 | 300 | 20 | - | - | 0.0012 | - | 0 | 1 | 0 |" in md  # exact: as it was
    assert "2 cut mid-turn, whose usage is a lower bound" in md
    assert "Estimated in all: >= 0.0042 (2 attempts cut mid-turn, whose usage is a lower bound)." in md
    html = (run / "report.html").read_text()
    assert "≥ $0.0030" in html and "≥ 900" in html and "Usage a lower bound" in html
    assert "$0.0012</td>" in html  # the exact arm has no mark
    for frame in (pd.read_csv(run / "report.csv"), pd.read_parquet(run / "report.parquet")):
        rows = frame.set_index("task")
        assert rows.loc["hello-world", "usage_bound"] == "lower_bound"
        assert rows.loc["sum-list", "usage_bound"] == "lower_bound"  # the old form
        assert rows.loc["fizzbuzz", "usage_bound"] == "exact"


CELL = PlanCell(id="c1", task="t1", arm="baseline", rep=0, backend="local")
ROW = AttemptRow(attempt_id="c1-a1", cell_id="c1", task="t1", task_checksum="x", arm="baseline", rep=0, seq=1,
                 account="a", backend="local", epoch="e", preflight=False, started_at=0.0)


def test_a_lower_bound_counts_against_the_limit_in_full_and_teaches_no_history() -> None:
    spend = SpendBook(0.01)
    spend.reserve("l1", CELL)
    core = FinishCore(Catalog.default(), RecoveryCircuit(), QuotaFit(ceiling=8), spend)
    cut = AttemptSummary.parse({"usage": STREAM_ONLY, "agent": ExecFacts(exit_code=None, timed_out=True,
                                                                         duration_sec=30).model_dump()})
    done = core.finished(ROW, "l1", cut, lambda _: 0)
    assert done.record.cost_usd == pytest.approx(0.0009) and done.release.usd == pytest.approx(0.0009)
    assert done.release.usd_bound == "lower_bound"  # what the account's lifetime spend keeps
    assert spend.spent == pytest.approx(0.0009) and spend.lower_bound == 1 and spend.unknown == 0
    assert spend.expected(CELL).basis == "default"  # a lower bound is no measure of what a cell costs
    assert spend.refusal(spend.expected(CELL)).startswith("run spend at least $0.00 ")
    # a resume reads the same from the ledger's rows
    resumed = SpendBook(0.01)
    resumed.observe("t1", "baseline", 0.0009, 30, lower_bound=True)
    assert (resumed.spent, resumed.lower_bound, resumed.expected(CELL).basis) == (
        pytest.approx(0.0009), 1, "default")
