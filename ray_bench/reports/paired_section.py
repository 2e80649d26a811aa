"""The report's paired statistics as frames and markdown: per task and overall tests with
Holm's correction, pass@k / pass^k per arm, and the claim sentence.

The numbers come from :mod:`ray_bench.reports.paired`; this module only pairs the accepted
rows by (task, repetition) and lays the results out. Written to ``report-paired.csv`` (one
row per task and per overall figure, ``scope`` says which) beside ``report.csv``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ray_bench.reports.paired import (
    MCNEMAR,
    Comparison,
    TaskPairs,
    claim,
    compare,
    pass_curve,
)

STATS_COLUMNS = ["scope", "variant", "benchmark", "task", "tasks", "pairs", "paired_delta", "ci_low", "ci_high",
                 "test", "variant_only", "baseline_only", "p_value", "p_holm"]
PASS_COLUMNS = ["arm", "k", "tasks", "pass_at_k", "pass_hat_k"]


@dataclass
class PairedStats:
    stats: pd.DataFrame  # STATS_COLUMNS: scope "task" (unadjusted p) and "overall" (Holm-adjusted)
    pass_k: pd.DataFrame  # PASS_COLUMNS
    claim: str
    reps: int  # the fewest accepted rows of a task in an arm (0: nothing paired)
    #: the figures every table, plot and the claim show (:func:`ray_bench.reports.paired.compare`)
    comparisons: list[Comparison]


def task_pairs(rows: pd.DataFrame, baseline: str, variant: str, benchmarks: Mapping[str, str]) -> list[TaskPairs]:
    """Per task, the (task, repetition)s with an accepted reward in both arms, by repetition."""
    if not len(rows):
        return []
    known = rows[rows.reward.notna()]
    reward = {(t, a, int(r)): float(x) for t, a, r, x in zip(known.task, known.arm, known.rep, known.reward,
                                                           strict=True)}
    # one pass over the rewards (a scan of them per task took 2 s at 500 tasks, minutes at 5,000)
    paired: dict[str, list[int]] = {}
    for t, a, r in reward:
        if a == baseline and (t, variant, r) in reward:
            paired.setdefault(t, []).append(r)
    out = []
    for task in sorted(paired):
        reps = sorted(paired[task])
        out.append(TaskPairs(task, benchmarks.get(task, ""), tuple(reward[(task, baseline, r)] for r in reps),
                             tuple(reward[(task, variant, r)] for r in reps)))
    return out


def _record(scope: str, variant: str, benchmark: str, task: str, tasks: int, pairs: int, delta: float,
            low: float, high: float, o: Any, p_holm: float) -> dict[str, Any]:
    return {"scope": scope, "variant": variant, "benchmark": benchmark, "task": task, "tasks": tasks,
            "pairs": pairs, "paired_delta": delta, "ci_low": low, "ci_high": high, "test": o.method,
            "variant_only": o.variant_only, "baseline_only": o.baseline_only, "p_value": o.p_value,
            "p_holm": p_holm}


def paired_stats(rows: pd.DataFrame, baseline: str, variants: list[str],
                 benchmarks: Mapping[str, str]) -> PairedStats:
    comparisons = compare({v: task_pairs(rows, baseline, v, benchmarks) for v in variants})
    task_records = [_record("task", c.variant, s.benchmark, s.task, 1, s.pairs, s.delta, s.ci_low, s.ci_high,
                            s.test, float("nan")) for c in comparisons for s in c.tasks]
    overall_records = [_record("overall", c.variant, o.benchmark, "", o.tasks, o.pairs, o.delta, o.ci_low,
                               o.ci_high, o.test, o.p_holm) for c in comparisons for o in c.overall]
    stats = pd.DataFrame([*overall_records, *task_records], columns=STATS_COLUMNS)
    # counts, blank where the test has none (a sign flip), never 1.0 in the csv
    stats = stats.astype({"variant_only": "Int64", "baseline_only": "Int64"})
    counts = rows.groupby(["task", "arm"]).reward.count() if len(rows) else pd.Series(dtype=int)
    paired_tasks = {t for t in stats.task if t}
    reps = min((int(n) for (t, _), n in counts.items() if t in paired_tasks), default=0)
    return PairedStats(stats, _pass_k(rows), claim(reps, [(c.variant, c.headline) for c in comparisons]),
                       reps, comparisons)


def _pass_k(rows: pd.DataFrame) -> pd.DataFrame:
    """Per arm: pass@k and pass^k over the tasks, solved meaning reward >= 1 (as the report's)."""
    records: list[dict[str, Any]] = []
    if len(rows):
        known = rows[rows.reward.notna()]
        # per (arm, task): trials and solved, in one grouping (a frame per task cost 1 s at 5,000 tasks)
        solved = (known.reward >= 1).groupby([known.arm, known.task], sort=True).agg(["size", "sum"])
        for arm, group in solved.groupby(level=0, sort=True):
            trials = [(int(n), int(c)) for n, c in zip(group["size"], group["sum"], strict=True)]
            records += [{"arm": arm, "k": p.k, "tasks": p.tasks, "pass_at_k": p.pass_at, "pass_hat_k": p.pass_hat}
                        for p in pass_curve(trials)]
    return pd.DataFrame(records, columns=PASS_COLUMNS)


def _p(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{float(value):.3f}"


def _signed(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{float(value):+.3f}"


def _test(r: Any) -> str:
    if r.test == MCNEMAR:
        return f"{r.test} ({int(r.variant_only)} vs {int(r.baseline_only)} discordant)"
    return str(r.test)


def span(low: float, high: float, one: str) -> str:
    """An interval as every table shows it, or why there is none (``one``: of what there is one)."""
    return f"none: {one}" if pd.isna(low) else f"{low:+.3f} to {high:+.3f}"


def interval(r: Any) -> str:
    """A row of :attr:`PairedStats.stats`'s interval, or why there is none."""
    return span(r.ci_low, r.ci_high, "1 task" if r.scope == "overall" else "1 pair")


def markdown_lines(p: PairedStats, baseline: str) -> list[str]:
    out = ["", f"## Paired statistics (variant - {baseline}, pairs are one task and repetition in both arms)", "",
           f"**What the data can claim.** {p.claim}", "",
           "Overall: tasks are the units (the mean of the tasks' paired deltas, a 95% bootstrap interval "
           "resampling tasks, exact McNemar over tasks when each task has one pass/fail pair, else a "
           "sign-flip permutation test over the task deltas); p Holm-adjusted across every overall row.", "",
           "| variant | benchmark | tasks | pairs | paired delta | 95% interval | test | p | p (Holm) |",
           "|---|---|---|---|---|---|---|---|---|"]
    overall = p.stats[p.stats.scope == "overall"]
    for r in overall.itertuples():
        out.append(f"| {r.variant} | {r.benchmark} | {r.tasks} | {r.pairs} | {_signed(r.paired_delta)} | "
                   f"{interval(r)} | {_test(r)} | {_p(r.p_value)} | {_p(r.p_holm)} |")
    tasks = p.stats[p.stats.scope == "task"]
    if len(tasks):
        out += ["", "Per task: bootstrap over the task's pairs (none with one pair); exact McNemar on "
                "the discordant pairs for pass/fail rewards, else the sign flip; p unadjusted.", "",
                "| task | variant | pairs | paired delta | 95% interval | test | p |", "|---|---|---|---|---|---|---|"]
        out += [f"| {r.task} | {r.variant} | {r.pairs} | {_signed(r.paired_delta)} | {interval(r)} | {_test(r)} | "
                f"{_p(r.p_value)} |" for r in tasks.itertuples()]
    if len(p.pass_k):
        out += ["", "pass@k: the chance that at least one of k trials solves a task (Chen et al. 2021's "
                "unbiased estimator); pass^k: that all k do (tau-bench); mean over tasks, k up to the "
                "fewest trials of a task.", "", "| arm | k | tasks | pass@k | pass^k |", "|---|---|---|---|---|"]
        out += [f"| {r.arm} | {r.k} | {r.tasks} | {r.pass_at_k:.3f} | {r.pass_hat_k:.3f} |"
                for r in p.pass_k.itertuples()]
    return out
