"""``report --runs A B ... --out DIR``: one paired report over named run roots, under the same
accepted-row rule as the single-run report; bad lineages exit 2 and write nothing."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from report_ledgers import TASKS, Writer, first_run
from support.ray_local import TEST_ROUTES
from support.suites import make_suite
from typer.testing import CliRunner

from ray_bench.api import plan_run
from ray_bench.cli import app
from ray_bench.commands.rerun import rerun_failed
from ray_bench.reports.build import build_lineage_report, build_report


def _lineage(tmp_path: Path) -> tuple[Path, Path]:
    root = first_run(tmp_path)
    rerun = rerun_failed(root, hypothesis="pinned the tool version", environ=dict(TEST_ROUTES)).run_root
    w = Writer(rerun)
    w.attempt("count-words", "mcp", 1, 200, reward=1.0)
    w.attempt("count-words", "mcp", 2, 201, reward=0.0)
    w.attempt("fizzbuzz", "baseline", 2, 202, reward=1.0)
    w.ledger.close()
    return root, rerun


def test_lineage_report_is_the_family_report_and_lists_every_run(tmp_path: Path) -> None:
    root, rerun = _lineage(tmp_path)
    family = build_report(root)
    lineage = build_lineage_report([root, rerun])
    # one rule: the same rows, denominators and paired deltas
    pd.testing.assert_frame_equal(lineage.arms, family.arms)
    pd.testing.assert_frame_equal(lineage.paired, family.paired)
    assert list(lineage.rows.attempt_id) == list(family.rows.attempt_id)
    arms = lineage.arms.set_index("arm")
    assert (arms.loc["baseline", "valid_rows"], arms.loc["mcp", "valid_rows"]) == (8, 8)
    assert lineage.title == "Lineage report: r1 + r1-rerun-1 (staging)"
    assert list(lineage.epochs.run_id) == ["r1", "r1-rerun-1"] and lineage.epochs.in_cohort.all()
    # the rerun alone is a different (smaller) evidence set: the lineage is what was named
    alone = build_lineage_report([rerun])
    assert len(alone.rows) == 3 and alone.cells_planned == 3

    out = tmp_path / "lineage"
    result = CliRunner().invoke(app, ["report", "--runs", str(root), str(rerun), "--out", str(out)])
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text()
    assert md.startswith("# Lineage report: r1 + r1-rerun-1 (staging)")
    assert "| r1-rerun-1 |" in md and "## Executions" in md
    assert sorted(p.name for p in out.iterdir()) == ["report-paired.csv", "report.csv", "report.html",
                                                      "report.md", "report.parquet"]
    assert not (root / "report.md").exists()  # nothing written into the runs


def test_bad_lineages_exit_2_with_one_line_and_write_nothing(tmp_path: Path) -> None:
    root, rerun = _lineage(tmp_path)
    other_suite, accounts = make_suite(tmp_path / "o", tasks=TASKS[:1])
    other_suite.write_text(other_suite.read_text().replace("name: t", "name: other"))
    other = plan_run(suite=other_suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="o1").run_root
    out = tmp_path / "lineage"
    cases = [
        (["--runs", str(root), str(tmp_path / "runs" / "nope"), "--out", str(out)], "unknown run"),
        (["--runs", str(root), str(root), "--out", str(out)], "run named twice"),
        (["--runs", str(root), str(other), "--out", str(out)], "several suites"),
        (["--runs", str(root), str(rerun)], "needs --out"),
    ]
    for args, says in cases:
        result = CliRunner().invoke(app, ["report", *args])
        assert result.exit_code == 2, (args, result.output)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and says in lines[0], (args, result.stderr)
    assert not out.exists()
