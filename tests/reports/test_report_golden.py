"""Every figure of a varied report, against goldens made by the report before it streamed (issue
57: the report read every attempt into pydantic models and dict records; it now reads columns).

The ledger: 4 tasks x 2 arms x 3 reps with retries, failures of several classes (counted and
not), a stale runner, rewards of 0, 0.5 and 1 (McNemar and the sign flip), a regrade, settled
costs, unknown costs (no usage, tokens without a cost, ``source: unknown``), usage cut mid-turn
(a lower bound), a cost from tokens at list price, cache tokens, an excluded cell and a cell that
never ran. The goldens (``golden/report57/``) were written by ``RB_WRITE_GOLDEN=1`` on main at
d4fe40c, before the change; the plan's identity and the run root's path, which depend on the
temporary directory, and the times the exclusion and the settlement were recorded, are replaced
by placeholders.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest
from report_ledgers import TASKS, Writer
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.evidence.decisions import record_exclusion
from ray_bench.evidence.settle import settle_run
from ray_bench.models.attempt import AttemptSummary
from ray_bench.reports.build import Report, write_report

GOLDEN = Path(__file__).parent / "golden" / "report57"
FILES = ("report.md", "report.csv", "report.html", "report-paired.csv")


def _usage(cost: float | None = 0.01, **more: object) -> dict[str, object]:
    return {"input_tokens": 100, "output_tokens": 10, **({} if cost is None else {"cost_usd": cost}), **more}


def varied_run(tmp_path: Path) -> Path:
    suite, accounts = make_suite(tmp_path / "s", tasks=TASKS, reps=3)
    root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="g1").run_root
    w = Writer(root)
    t = iter(range(100, 1000, 3))
    # hello-world: binary rewards; a stale runner then a retry; a failure that does not count
    w.attempt("hello-world", "baseline", 1, next(t), reward=1.0)
    w.attempt("hello-world", "baseline", 2, next(t), reward=0.0,
              usage=_usage(0.02, cache_read_tokens=500, cache_write_tokens=40, cost_basis="estimated"))
    w.attempt("hello-world", "baseline", 3, next(t), reward=1.0)
    w.attempt("hello-world", "mcp", 1, next(t), stale=True)
    w.attempt("hello-world", "mcp", 1, next(t), reward=1.0)
    w.attempt("hello-world", "mcp", 2, next(t), reward=1.0, usage=_usage(0.03, bound="lower_bound"))
    w.attempt("hello-world", "mcp", 3, next(t), fail=("provider", "rate-limit"))
    w.attempt("hello-world", "mcp", 3, next(t), reward=1.0)
    # sum-list: rewards of 0.5 (the sign flip), the earliest valid row and not the best
    w.attempt("sum-list", "baseline", 1, next(t), reward=0.5)
    w.attempt("sum-list", "baseline", 2, next(t), reward=0.5, usage=_usage(None))  # tokens, no cost: unknown
    w.attempt("sum-list", "baseline", 3, next(t), reward=0.0, usage={"source": "unknown"})
    w.attempt("sum-list", "mcp", 1, next(t), reward=1.0)
    w.attempt("sum-list", "mcp", 2, next(t), fail=("evaluator", "ev-1"))
    w.attempt("sum-list", "mcp", 2, next(t), reward=0.5)
    w.attempt("sum-list", "mcp", 2, next(t), reward=1.0)
    w.attempt("sum-list", "mcp", 3, next(t), reward=0.5, usage=_usage(0.05, bound="lower_bound"))
    # fizzbuzz: failures of two classes, a cell that never gets a valid row
    w.attempt("fizzbuzz", "baseline", 1, next(t), reward=1.0)
    w.attempt("fizzbuzz", "baseline", 2, next(t), fail=("tool", "tool-1"))
    w.attempt("fizzbuzz", "baseline", 2, next(t), fail=("tool", "tool-1"))
    w.attempt("fizzbuzz", "baseline", 2, next(t), fail=("tool", "tool-2"))
    w.attempt("fizzbuzz", "baseline", 3, next(t), reward=0.0)
    w.attempt("fizzbuzz", "mcp", 1, next(t), reward=0.0)
    w.attempt("fizzbuzz", "mcp", 2, next(t), fail=("task", "oom"))
    w.attempt("fizzbuzz", "mcp", 2, next(t), reward=1.0)
    w.attempt("fizzbuzz", "mcp", 3, next(t), reward=1.0, usage={})
    # count-words: the baseline only; mcp rep 3 never ran, rep 2 is excluded
    w.attempt("count-words", "baseline", 1, next(t), reward=0.0)
    w.attempt("count-words", "baseline", 2, next(t), reward=1.0)
    w.attempt("count-words", "baseline", 3, next(t), fail=("executor", "docker-gone"))
    w.attempt("count-words", "mcp", 1, next(t), reward=1.0)
    w.attempt("count-words", "mcp", 2, next(t), reward=0.0)
    # a regrade of hello-world baseline rep 2's row: its reward becomes 1
    source = next(r for r in w.ledger.attempts() if (r.task, r.arm, r.rep) == ("hello-world", "baseline", 2))
    cell = w.cells[("hello-world", "baseline", 2)]
    regrade = w.ledger.start_attempt(cell_id=cell.id, task=source.task, task_checksum=source.task_checksum,
                                     arm=source.arm, rep=source.rep, account="acct-a", backend="local",
                                     epoch=w.identity, preflight=False, now=next(t), kind="regrade",
                                     source_attempt=source.attempt_id)
    w.ledger.finish_attempt(regrade.attempt_id, status="finished", valid=True, reward=1.0, failure_class=None,
                            fingerprint=None, counts=False, cost_usd=0.0,
                            summary=AttemptSummary.parse({"reward": 1.0, "verdict": {"valid": True}}), now=next(t))
    ids = sorted(r.attempt_id for r in w.ledger.attempts() if r.kind == "run" and r.status == "finished")
    w.ledger.close()
    record_exclusion(root, "count-words/mcp/2", "flaky container", by="golden")
    export = tmp_path / "usage.csv"
    export.write_text("request_id,model,cost_usd\n" + "".join(f"req_{a},claude-sonnet-4-5,0.012\n" for a in ids[:9]))
    settle_run(root, export, by="fin")
    return root


def _frames(report: Report) -> dict[str, object]:
    def records(frame: pd.DataFrame) -> list[dict[str, object]]:
        return json.loads(frame.to_json(orient="records", double_precision=15))

    stats = report.paired_stats
    assert stats is not None
    return {"rows": records(report.rows), "attempts": records(report.attempts), "arms": records(report.arms),
            "paired": records(report.paired), "deltas": records(report.deltas), "usage": records(report.usage),
            "failures": records(report.failures), "fingerprints": records(report.fingerprints),
            "regraded": records(report.regraded), "stats": records(stats.stats),
            "pass_k": records(stats.pass_k), "claim": stats.claim, "reps": stats.reps,
            "dtypes": {name: {c: str(t) for c, t in getattr(report, name).dtypes.items()}
                       for name in ("rows", "attempts", "arms", "usage", "failures", "fingerprints")}}


def _normal(text: str, report: Report, root: Path) -> str:
    identity = str(report.epochs.epoch.iloc[0])
    text = text.replace(identity, "<identity>").replace(identity[:19], "<id19>").replace(str(root), "<root>")
    # when the exclusion and the settlement were recorded (now)
    return re.sub(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?( ?UTC|Z|[+-]\d{2}:\d{2})?", "<time>", text)


def test_the_report_of_a_varied_ledger_is_the_one_made_before_it_streamed(tmp_path: Path) -> None:
    root = varied_run(tmp_path)
    report = write_report(root)
    got = {name: _normal((root / name).read_text(), report, root) for name in FILES}
    got["frames.json"] = _normal(json.dumps(_frames(report), indent=1, sort_keys=True), report, root) + "\n"
    if os.environ.get("RB_WRITE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for name, text in got.items():
            (GOLDEN / name).write_text(text)
        pytest.skip("goldens written")
    # the ledger is as varied as it says: every path of the report is taken
    assert {"settled", "estimated", "unknown"} <= set(report.attempts.cost_status)
    assert "lower_bound" in set(report.attempts.usage_bound) and len(report.regraded) == 1
    assert len(report.exclusions) == 1 and report.failures.failure_class.nunique() >= 5
    for name, text in got.items():
        assert text == (GOLDEN / name).read_text(), f"{name} differs from the golden"
