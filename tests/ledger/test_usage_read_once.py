"""An attempt's usage record is read once, by :meth:`Ledger.attempts` (issue 57): the report's
token and cost columns come from the row it gives (they parsed the record a second time from
the whole summary), and :meth:`Ledger.summaries` of a few fields reads them as
:meth:`AttemptSummary.loads` does, without decoding the rest."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from reports.report_ledgers import TASKS, Writer
from support.suites import make_suite

import ray_bench.models.attempt as attempt_model
from ray_bench import numbers
from ray_bench.api import plan_run
from ray_bench.ledger.cost import usage_facts
from ray_bench.ledger.store import Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.reports.build import SUMMARY_FIELDS, build_report

USAGES: list[dict[str, object]] = [
    {"input_tokens": 300, "output_tokens": 20, "cache_read_tokens": 7, "cost_usd": 0.0012, "cost_basis": "reported",
     "bound": "exact", "request_ids": ["r1"]},
    {"input_tokens": 300, "output_tokens": 2, "cost_usd": 0.0009, "unfinished_messages": 2},  # older: a lower bound
    {"source": "unknown", "unfinished_messages": 2},  # unknown: no figure
    {"input_tokens": 3, "output_tokens": 1},  # tokens, no cost
]
#: Stored summaries no ledger should hold, read as the whole text reads them all the same.
ODD = ['{"usage": {"cost_usd": "inf"}, "verdict": {"message": 5}, "stale": "yes"}',
       '{"usage": [], "verdict": null, "stale": null}', "[1, 2]", "not json", '"text"',
       '{"verdict": {"valid": true, "message": "slow"}, "stale": true, "usage": {"cache_write_tokens": true}}']


@pytest.fixture
def run(tmp_path: Path) -> Path:
    suite, accounts = make_suite(tmp_path / "s", tasks=TASKS, reps=3)
    root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="once").run_root
    w = Writer(root)
    t = time.time() - 100
    cells = [(task, arm, rep) for task in TASKS for arm in ("baseline", "mcp") for rep in (1, 2, 3)]
    for i, (task, arm, rep) in enumerate(cells):
        if i == 5:
            w.attempt(task, arm, rep, t + i, stale=True)
        else:
            w.attempt(task, arm, rep, t + i, reward=1.0, usage=USAGES[i % len(USAGES)])
    w.ledger.close()
    conn = sqlite3.connect(root / "ledger.sqlite")
    with conn:
        ids = [r[0] for r in conn.execute("SELECT attempt_id FROM results ORDER BY attempt_id")]
        conn.executemany("UPDATE results SET summary = ? WHERE attempt_id = ?", list(zip(ODD, ids, strict=False)))
    conn.close()
    return root


def _texts(root: Path) -> dict[str, str]:
    conn = sqlite3.connect(root / "ledger.sqlite")
    try:
        return dict(conn.execute("SELECT attempt_id, summary FROM results").fetchall())
    finally:
        conn.close()


def test_the_row_carries_the_usage_the_summary_says(run: Path) -> None:
    texts = _texts(run)
    with Ledger.reading(run) as ledger:
        rows = ledger.attempts()
    assert len(rows) == len(texts) == 24
    for row in rows:
        usage = AttemptSummary.loads(texts[row.attempt_id]).usage
        assert row.usage == usage_facts(usage), texts[row.attempt_id]
    facts = [r.usage for r in rows if r.usage is not None]
    assert {f.lower_bound for f in facts} == {True, False} and any(f.cache_read_tokens == 7 for f in facts)
    assert len(facts) < len(rows)  # unknown, stale, odd: no figure


def test_a_few_fields_of_every_summary_read_as_the_whole_text_reads_them(run: Path) -> None:
    texts = _texts(run)
    for fields in (SUMMARY_FIELDS, ("usage",), ("usage", "verdict", "stale", "reward")):
        with Ledger.reading(run) as ledger:
            got = dict(ledger.summaries(fields))
        assert got == {a: AttemptSummary.loads(t, fields) for a, t in texts.items()}
    assert any(s.stale for s in got.values()) and any(s.verdict and s.verdict.message == "slow" for s in got.values())


def test_the_report_reads_no_usage_record_beyond_the_ledgers_one_read(run: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    checked = 0
    real = numbers.amounts_problem

    def counted(data: object) -> str | None:  # every read of a usage record checks its amounts
        nonlocal checked
        checked += 1
        return real(data)  # type: ignore[arg-type]

    monkeypatch.setattr(attempt_model, "amounts_problem", counted)
    with Ledger.reading(run) as ledger:
        ledger.attempts()
    once = checked
    assert once > 0
    checked = 0
    report = build_report(run)
    assert checked == once  # the report's own rows, nothing more
    assert report.attempts.input_tokens.notna().any() and (report.attempts.message == "slow").any()
