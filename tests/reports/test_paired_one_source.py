"""One paired computation behind the report (issue 56): the HTML plot's per-task and overall
intervals (read from the page), ``report-paired.csv``, the markdown and HTML tables and the claim
sentence all show :func:`ray_bench.reports.paired.compare`'s figures. The plot used to resample
each arm's repetitions apart: a task whose arms agree on every repetition got -0.667 to +0.667
where the paired statistics said +0.000 to +0.000."""

from __future__ import annotations

import math
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from report_ledgers import TASKS, Writer
from support.suites import make_suite

from ray_bench.api import plan_run
from ray_bench.reports.build import write_report
from ray_bench.reports.paired import Comparison, OverallStats, TaskStats, compare
from ray_bench.reports.paired_section import span, task_pairs

#: Per task, (baseline, mcp) rewards of repetitions 1-3; None: no valid row (that rep is no pair).
DIFFER: dict[str, tuple[list[float | None], list[float | None]]] = {
    "hello-world": ([1.0, 0.0, 1.0], [1.0, 0.0, 1.0]),  # the arms agree on every repetition
    "sum-list": ([1.0, 1.0, 0.0], [0.0, 1.0, 1.0]),
    "fizzbuzz": ([0.0, 0.0, 0.0], [1.0, 1.0, 0.0]),
    "count-words": ([0.5, 0.25, 1.0], [0.75, 0.25, None]),
}
#: Both arms the same on every task and repetition, rewards varying across repetitions.
IDENTICAL = {t: (b, b) for t, (b, _) in DIFFER.items() if t != "count-words"} | {
    "count-words": ([0.5, 0.25, 1.0], [0.5, 0.25, 1.0])}


def _run(tmp_path: Path, rewards: dict[str, tuple[list[float | None], list[float | None]]]) -> Path:
    suite, accounts = make_suite(tmp_path / "s", tasks=TASKS, reps=3)
    root = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="r1").run_root
    w = Writer(root)
    t = 100.0
    for task, arms in rewards.items():
        for arm, values in zip(("baseline", "mcp"), arms, strict=True):
            for rep, reward in enumerate(values, 1):
                if reward is None:
                    w.attempt(task, arm, rep, t, fail=("tool", "tool-1"))
                else:
                    w.attempt(task, arm, rep, t, reward=reward)
                t += 1
    w.ledger.close()
    return root


class _Page(HTMLParser):
    """The plot's marks (their data-* attributes) and each table's cells by table id."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[dict[str, str]] = []
        self.lines = 0
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._in_deltas = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "svg":
            self._in_deltas = a.get("id") == "plot-deltas"
        elif tag == "circle" and self._in_deltas:
            self.marks.append(a)
        elif tag == "line" and self._in_deltas and a.get("class") == "ci":
            self.lines += 1
        elif tag == "table":
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag == "td":
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _check_one_source(root: Path) -> Comparison:
    report = write_report(root)
    # the function, called on the report's own rows
    (c,) = compare({"mcp": task_pairs(report.rows, "baseline", "mcp", {})})
    figures = {t.task: t for t in c.tasks}
    assert sorted(figures) == sorted(TASKS)

    page = _Page()
    page.feed((root / "report.html").read_text())
    plotted = {m["data-task"]: m for m in page.marks if m.get("class") == "task-delta"}
    assert sorted(plotted) == sorted(figures)
    stats = pd.read_csv(root / "report-paired.csv")
    csv_tasks = stats[stats.scope == "task"].set_index("task")
    html_per_task = {r[0]: r for r in page.tables["paired"] if r}  # Task, Variant, Pairs, ..., low, high
    html_stats = {r[1]: r for r in page.tables["paired-tasks"] if r}  # Variant, Task, Pairs, delta, interval
    md = (root / "report.md").read_text()
    for task, f in figures.items():
        for source, (delta, low, high) in {
            "plot": tuple(float(plotted[task][k]) for k in ("data-delta", "data-ci-low", "data-ci-high")),
            "csv": tuple(float(csv_tasks.loc[task, k]) for k in ("paired_delta", "ci_low", "ci_high")),
            "frame": tuple(float(report.paired.set_index("task").loc[task, k]) for k in ("delta", "ci_low",
                                                                                          "ci_high")),
        }.items():
            assert _same(delta, f.delta) and _same(low, f.ci_low) and _same(high, f.ci_high), (task, source)
        shown = span(f.ci_low, f.ci_high, "1 pair")
        row = html_per_task[task]
        assert row[2] == str(f.pairs) and row[5:8] == [f"{f.delta:+.3f}", f"{f.ci_low:+.3f}", f"{f.ci_high:+.3f}"]
        assert html_stats[task][3:5] == [f"{f.delta:+.3f}", shown]
        # both markdown tables: the paired-delta table and the paired statistics' per task
        means = f"{f.baseline_mean:.2f} | {f.variant_mean:.2f}"
        assert f"| {task} | mcp | {f.pairs} | {means} | {f.delta:+.3f} | {shown} |" in md
        assert f"| {task} | mcp | {f.pairs} | {f.delta:+.3f} | {shown} |" in md
    # overall: the plot's mean mark, the CSV's overall row, the headline and the sentence
    o = c.headline
    (mean,) = [m for m in page.marks if m.get("class") == "mean-delta"]
    assert [float(mean[k]) for k in ("data-delta", "data-ci-low", "data-ci-high")] == [o.delta, o.ci_low, o.ci_high]
    overall = stats[stats.scope == "overall"].iloc[0]
    assert [overall.paired_delta, overall.ci_low, overall.ci_high] == [o.delta, o.ci_low, o.ci_high]
    d = report.deltas.iloc[0]
    assert (d.mean_delta, d.ci_low, d.ci_high, d.wins, d.losses, d.ties) == (o.delta, o.ci_low, o.ci_high,
                                                                            o.wins, o.losses, o.ties)
    assert f"mean paired delta {o.delta:+.3f} (95% CI {o.ci_low:+.3f} to {o.ci_high:+.3f})" in md
    assert report.paired_stats is not None
    assert f"95% CI {o.ci_low:+.3f} to {o.ci_high:+.3f}" in report.paired_stats.claim
    return c


def test_every_view_shows_the_one_paired_computation(tmp_path: Path) -> None:
    root = _run(tmp_path, DIFFER)
    c = _check_one_source(root)
    f = {t.task: t for t in c.tasks}
    # by hand: pairs by (task, repetition); count-words' third repetition has no mcp row
    assert (f["sum-list"].pairs, f["sum-list"].delta) == (3, 0.0)
    assert f["sum-list"].ci_low < 0 < f["sum-list"].ci_high  # deltas -1, 0, +1
    assert f["fizzbuzz"].delta == pytest.approx(2 / 3) and f["fizzbuzz"].ci_high == 1.0
    assert f["count-words"].pairs == 2 and f["count-words"].delta == pytest.approx(0.125)
    assert (f["count-words"].baseline_mean, f["count-words"].variant_mean) == (0.375, 0.5)
    # the arms agree on every repetition of hello-world: a zero-width interval (the old plot: +-0.667)
    assert (f["hello-world"].delta, f["hello-world"].ci_low, f["hello-world"].ci_high) == (0.0, 0.0, 0.0)


def test_identical_arms_give_zero_width_intervals_everywhere(tmp_path: Path) -> None:
    root = _run(tmp_path, IDENTICAL)
    c = _check_one_source(root)
    figures: list[TaskStats | OverallStats] = [*c.tasks, c.headline]
    for t in figures:
        assert (t.delta, t.ci_low, t.ci_high) == (0.0, 0.0, 0.0), t
    page = _Page()
    page.feed((root / "report.html").read_text())
    assert page.lines == 0  # no whisker anywhere on the plot
    assert "shows no difference the data can resolve: mean paired delta +0.000 (95% CI +0.000 to +0.000)" in (
        root / "report.md").read_text()
