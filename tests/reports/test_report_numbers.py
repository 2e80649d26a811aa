"""The report's numbers against hand-computed values, from ledgers written directly (no Ray)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from report_ledgers import Writer
from report_ledgers import first_run as make_first_run
from support.ray_local import TEST_ROUTES

from ray_bench.commands.rerun import RepeatedSignatureError, rerun_failed
from ray_bench.plan.store import load_plan_file
from ray_bench.reports.build import build_report, render_markdown, write_report
from ray_bench.reports.paired import TaskPairs, overall_stats
from ray_bench.reports.stats import bootstrap_ci


@pytest.fixture
def first_run(tmp_path: Path) -> Path:
    return make_first_run(tmp_path)


def test_first_run_numbers(first_run: Path) -> None:
    report = build_report(first_run)
    arms = report.arms.set_index("arm")
    assert arms.loc["baseline", "cells"] == 8 and arms.loc["baseline", "valid_rows"] == 7
    assert arms.loc["baseline", "solved"] == 4
    assert arms.loc["baseline", "strict_rate"] == pytest.approx(4 / 8)
    assert arms.loc["baseline", "headline_rate"] == pytest.approx(4 / 7)
    assert arms.loc["baseline", "mean_reward"] == pytest.approx(4 / 7)
    assert arms.loc["mcp", "valid_rows"] == 6 and arms.loc["mcp", "missing"] == 2
    assert arms.loc["mcp", "strict_rate"] == pytest.approx(4 / 8)
    assert arms.loc["mcp", "headline_rate"] == pytest.approx(4 / 6)
    # earliest valid attempt, never the best
    sum_mcp_2 = report.rows[
        (report.rows.task == "sum-list") & (report.rows.arm == "mcp") & (report.rows.rep == 2)
    ]
    assert list(sum_mcp_2.reward) == [0.0] and list(sum_mcp_2.seq) == [2]
    paired = report.paired.set_index("task")
    assert paired.delta.to_dict() == {"fizzbuzz": 0.0, "hello-world": 0.5, "sum-list": -1.0}
    assert list(paired.outcome) == ["tie", "win", "loss"]
    d = report.deltas.iloc[0]
    assert (d.tasks, d.wins, d.losses, d.ties) == (3, 1, 1, 1)
    assert d.mean_delta == pytest.approx(-0.5 / 3)
    assert -1.0 <= d.ci_low <= d.mean_delta <= d.ci_high <= 0.5
    failures = report.failures.set_index("failure_class")
    assert failures.attempts.to_dict() == {"tool": 2, "evaluator": 1, "executor": 1}
    assert (
        failures.loc["tool", "cells"] == 1
        and failures.loc["tool", "top_fingerprints"] == "tool-1 (2)"
    )
    usage = report.usage.set_index(["account", "arm"])
    assert usage.loc[("acct-a", "baseline"), "attempts"] == 9
    assert usage.loc[("acct-a", "baseline"), "input_tokens"] == 900
    assert usage.loc[("acct-b", "mcp"), "attempts"] == 9  # hello 3, sum-list 4, fizzbuzz 2
    assert usage.loc[("acct-b", "mcp"), "output_tokens"] == 80  # the stale attempt has no usage
    assert usage.loc[("acct-b", "mcp"), "cost_usd"] == pytest.approx(0.08)
    md = render_markdown(report)
    assert "| baseline | 8 | 7 | 1 | 4 |" in md and "tool-1 (2)" in md


def test_rerun_refused_then_recovers_and_report_spans_epochs(first_run: Path) -> None:
    env = dict(TEST_ROUTES)
    with pytest.raises(RepeatedSignatureError, match="tool:tool-1"):
        rerun_failed(first_run, environ=env)
    assert not (first_run.parent / "r1-rerun-1").exists()  # refused: nothing written
    rerun = rerun_failed(first_run, hypothesis="pinned the tool version", environ=env)
    assert rerun.run_root.name == "r1-rerun-1" and rerun.cells == 3
    plan, _ = load_plan_file(rerun.run_root / "launch-plan.json")
    assert sorted((c.task, c.arm, c.rep) for c in plan.cells) == [
        ("count-words", "mcp", 1),
        ("count-words", "mcp", 2),
        ("fizzbuzz", "baseline", 2),
    ]
    assert any("pinned the tool version" in w for w in plan.warnings)
    receipt = (rerun.run_root / "receipt.md").read_text()
    assert "## Rerun" in receipt and "`tool-1`" in receipt and "pinned the tool version" in receipt
    w = Writer(rerun.run_root)
    w.attempt("count-words", "mcp", 1, 200, reward=1.0)
    w.attempt("count-words", "mcp", 2, 201, reward=0.0)
    w.ledger.close()
    report = write_report(first_run)
    assert len(report.epochs) == 2 and report.epochs.in_cohort.all()
    d = report.deltas.iloc[0]
    assert (d.tasks, d.wins, d.losses, d.ties) == (4, 2, 1, 1)
    assert d.mean_delta == pytest.approx(0.0)
    arms = report.arms.set_index("arm")
    assert arms.loc["mcp", "valid_rows"] == 8 and arms.loc["mcp", "strict_rate"] == pytest.approx(
        5 / 8
    )
    assert arms.loc["baseline", "valid_rows"] == 7  # fizzbuzz/baseline/2 still missing
    for name in ("report.md", "report.csv", "report.parquet", "report.html"):
        assert (first_run / name).is_file()
    # only the tool cell is left; without --class it repeats the signature of the last time
    with pytest.raises(RepeatedSignatureError):
        rerun_failed(first_run, environ=env)
    with pytest.raises(Exception, match="nothing to rerun"):
        rerun_failed(first_run, failure_class="evaluator", environ=env)


def test_bootstrap_is_seeded_and_brackets_the_mean() -> None:
    deltas = [0.5, -1.0, 0.0, 0.5, 0.25, 1.0]
    low, high = bootstrap_ci(deltas)
    assert (low, high) == bootstrap_ci(deltas)
    mean = sum(deltas) / len(deltas)
    assert min(deltas) <= low <= mean <= high <= max(deltas)
    assert bootstrap_ci([0.1, 0.1, 0.1]) == (pytest.approx(0.1), pytest.approx(0.1))
    assert bootstrap_ci([0.3]) == (0.3, 0.3)
    assert all(math.isnan(v) for v in bootstrap_ci([]))
    s = overall_stats([TaskPairs(f"t{i}", "", (0.0,), (d,)) for i, d in enumerate([1.0, -1.0, 0.0, 0.0])])
    assert (s.wins, s.losses, s.ties, s.delta) == (1, 1, 2, 0.0)
