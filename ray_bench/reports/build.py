"""The report, rebuilt only from accepted rows.

A run's report covers its *family*: the run root and the reruns planned from it
(``ID-rerun-N``), one cohort of epochs (see
:mod:`ray_bench.evidence.rows` for the rules). A lineage report (``ray-bench report --runs A B
C --out DIR``) covers exactly the run roots named, under the same rule; one whose plans give an
arm name two configurations (its digest, :mod:`ray_bench.plan.arm_identity`) is refused, never
pooled. Every epoch found is listed, in the cohort or not, with the execute options of each of
its executions. Usage and cost count every attempt (money spent on a failed attempt is still
spent); everything else counts accepted rows only. Excluded cells are listed with who excluded
them and why, and are out of both denominators. The title says whether the evidence is staging
or official (every run it draws from promoted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ray_bench.errors import UserInputError
from ray_bench.evidence.family import run_family
from ray_bench.evidence.rows import Evidence, build_evidence, load_epoch
from ray_bench.ledger.rows import said_spend, unknown_cost_note
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.arm_identity import refuse_mixed_arms
from ray_bench.reports import cost, sections
from ray_bench.reports.paired import Comparison
from ray_bench.reports.paired_section import PairedStats, markdown_lines, paired_stats, span
from ray_bench.reports.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE
from ray_bench.runroot import RunPaths, refuse_output_in_run_root
from ray_bench.textsafe import table_cell

ATTEMPT_COLUMNS = (
    "run_id",
    "attempt_id",
    "cell_id",
    "task",
    "task_checksum",
    "arm",
    "rep",
    "seq",
    "account",
    "backend",
    "epoch",
    "preflight",
    "started_at",
    "status",
    "finished_at",
    "valid",
    "reward",
    "failure_class",
    "fingerprint",
    "counts",
    "kind",
    "source_attempt",
    "regraded_by",
)
TOP_FINGERPRINTS = 3
#: The paired statistics, every task's row among them (what a plot that cannot draw them all names).
PAIRED_CSV = "report-paired.csv"


@dataclass
class Report:
    run_id: str
    rows: pd.DataFrame  # one accepted row per cell
    attempts: pd.DataFrame  # every attempt of the cohort, with usage and failure messages
    arms: pd.DataFrame  # per arm: denominators, rates, reward
    paired: pd.DataFrame  # per task and variant: mean rewards over the pairs, delta and interval
    deltas: pd.DataFrame  # per variant: mean delta, wins/losses/ties, bootstrap interval
    usage: pd.DataFrame  # per account and arm: tokens and cost
    failures: pd.DataFrame  # per failure class
    fingerprints: pd.DataFrame  # per (class, fingerprint)
    epochs: pd.DataFrame  # every epoch found
    baseline: str
    variants: list[str]
    cells_planned: int
    category: str = "staging"  # or "official"
    runs: list[str] = field(default_factory=list)  # every run id the report draws from
    lineage: bool = False  # built from named run roots (report --runs)
    promotions: list[str] = field(default_factory=list)
    exclusions: pd.DataFrame = field(default_factory=pd.DataFrame)
    settlement: pd.DataFrame = field(default_factory=pd.DataFrame)
    executions: pd.DataFrame = field(default_factory=pd.DataFrame)
    roles: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: paired tests, Holm, pass@k and the claim (:mod:`ray_bench.reports.paired_section`)
    paired_stats: PairedStats | None = None
    #: accepted rows whose reward is their latest valid regrade's (ray_bench.commands.regrade)
    regraded: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def title(self) -> str:
        what = f"Lineage report: {' + '.join(self.runs)}" if self.lineage else f"Report: {self.run_id}"
        return f"{what} ({self.category})"

    def files(self, run_root: Path) -> dict[str, Path]:
        return {
            "md": run_root / "report.md",
            "csv": run_root / "report.csv",
            "parquet": run_root / "report.parquet",
            "html": run_root / "report.html",
            "paired csv": run_root / PAIRED_CSV,
        }


def build_report(run_root: Path, roots: list[Path] | None = None) -> Report:
    """The report of ``run_root`` and its reruns (or of ``roots``, the first one named)."""
    family = roots if roots is not None else run_family(run_root)
    epochs = [load_epoch(p) for p in family]
    if not any(e.attempts for e in epochs):
        raise UserInputError("no attempt has run yet: there is nothing to report", where=str(run_root),
                             fix="execute the plan first (its receipt names the command)")
    evidence = build_evidence(epochs)
    return report_from_evidence(epochs[0].run_id, evidence)


def lineage_roots(paths: list[Path]) -> list[Path]:
    """The run roots of a lineage, as named and in order. Bad input: a path that is not a run
    root, or one named twice."""
    roots: list[Path] = []
    for path in paths:
        if not RunPaths(path).plan.is_file():
            raise UserInputError("unknown run: no launch-plan.json here", where=str(path),
                                 fix="name run roots (runs/ID) of one lineage")
        if path.resolve() in roots:
            raise UserInputError("run named twice", where=str(path), fix="name each run root once")
        roots.append(path.resolve())
    if not roots:
        raise UserInputError("no run roots named", where="--runs", fix="pass --runs runs/A runs/B ...")
    return roots


def build_lineage_report(paths: list[Path]) -> Report:
    """One paired report over the named run roots (same cohort and accepted-row rule)."""
    epochs = [load_epoch(p) for p in lineage_roots(paths)]
    evidence = build_evidence(epochs)
    refuse_mixed_arms([(e.run_id, e.plan) for e in epochs if e.identity in evidence.cohort.epochs], "--runs")
    report = report_from_evidence(epochs[0].run_id, evidence)
    report.lineage = True
    return report


def report_from_evidence(run_id: str, evidence: Evidence) -> Report:
    plans = [e.plan for e in evidence.epochs if e.identity in evidence.cohort.epochs]
    baseline = next(
        (a.name for p in plans for a in p.arms if a.role == "baseline"),
        evidence.arms[0] if evidence.arms else "",
    )
    variants = [a for a in evidence.arms if a != baseline]
    settled = sections.settled_cost(evidence)
    att = _attempts_frame(evidence, settled)
    chosen = {(r.epoch, r.attempt_id) for r in evidence.rows.values()}
    rows = att[[key in chosen for key in zip(att.epoch, att.attempt_id, strict=True)]]
    rows, regraded = _regraded(rows.sort_values(["task", "arm", "rep"]).reset_index(drop=True), evidence)
    # a task's benchmark is the directory holding it (as `gaps` writes CodeScaleBench's)
    benchmarks = {t.id: Path(t.path).parent.name for p in plans for t in p.tasks}
    stats = paired_stats(rows, baseline, variants, benchmarks) if variants else None
    comparisons = stats.comparisons if stats is not None else []
    return Report(
        run_id=run_id,
        rows=rows,
        attempts=att,
        arms=_arms(evidence, att, settled),
        paired=_paired(comparisons),
        deltas=_deltas(comparisons),
        usage=cost.usage_table(att),
        failures=_failures(att),
        fingerprints=_fingerprints(att),
        epochs=_epochs(evidence),
        baseline=baseline,
        variants=variants,
        cells_planned=len(evidence.planned),
        category=sections.category(evidence),
        runs=[e.run_id for e in evidence.epochs if e.identity in evidence.cohort.epochs],
        promotions=sections.promotions(evidence),
        exclusions=sections.exclusions(evidence),
        settlement=sections.settlements(evidence),
        executions=sections.executions(evidence),
        roles=sections.roles(evidence),
        paired_stats=stats,
        regraded=regraded,
    )


_REGRADED_COLUMNS = ["task", "arm", "rep", "attempt_id", "regraded_by", "graded_reward", "reward"]


def _regraded(rows: pd.DataFrame, evidence: Evidence) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows with their regrades' rewards (the accepted-row rule gave each row its latest valid
    regrade: ray_bench.ledger.rows), and the table of those rows: graded then, and now."""
    by_key = {(r.epoch, r.attempt_id): r for r in evidence.rows.values() if r.regraded_by}
    if not by_key or not len(rows):
        return rows, pd.DataFrame(columns=_REGRADED_COLUMNS)
    rows = rows.copy()
    keys = list(zip(rows.epoch, rows.attempt_id, strict=True))
    graded = list(rows.reward)
    rows["reward"] = [by_key[k].reward if k in by_key else g for k, g in zip(keys, graded, strict=True)]
    rows["task_checksum"] = [by_key[k].task_checksum if k in by_key else c
                             for k, c in zip(keys, rows.task_checksum, strict=True)]
    rows["regraded_by"] = [by_key[k].regraded_by if k in by_key else None for k in keys]
    table = [{"task": t, "arm": a, "rep": p, "attempt_id": i, "regraded_by": by_key[k].regraded_by,
              "graded_reward": g, "reward": by_key[k].reward}
             for k, t, a, p, i, g in zip(keys, rows.task, rows.arm, rows.rep, rows.attempt_id, graded, strict=True)
             if k in by_key]
    return rows, pd.DataFrame(table, columns=_REGRADED_COLUMNS)


#: What the report reads of each attempt's summary beside its row: the message of its verdict.
#: Its usage is the row's (:attr:`AttemptRow.usage`), read once by the ledger.
SUMMARY_FIELDS = ("verdict", "stale")


def _attempts_frame(evidence: Evidence, settled: dict[str, float]) -> pd.DataFrame:
    """Every attempt of the cohort, one column at a time: a dict per attempt and a summary model
    with every field were 2 GB and a third of the report at 100,000 attempts (issue 57)."""
    columns: dict[str, list[Any]] = {c: [] for c in (*ATTEMPT_COLUMNS, *cost.USAGE_FIELDS, "message")}
    fields = ATTEMPT_COLUMNS[1:]
    usage_columns = [columns[c] for c in cost.USAGE_FIELDS]
    for epoch in evidence.epochs:
        if epoch.identity not in evidence.cohort.epochs:
            continue
        columns["run_id"] += [epoch.run_id] * len(epoch.attempts)
        for name in fields:
            columns[name] += [getattr(a, name) for a in epoch.attempts]
        messages = {attempt_id: text for attempt_id, summary in epoch.each_summary(SUMMARY_FIELDS)
                    if (text := _message(summary))}
        for a in epoch.attempts:
            for column, value in zip(usage_columns, cost.usage_values(a.usage, settled.get(a.attempt_id)),
                                     strict=True):
                column.append(value)
            columns["message"].append(messages.get(a.attempt_id, ""))
        del messages
    return cost.typed(pd.DataFrame(columns))


def _message(summary: AttemptSummary) -> str:
    """An attempt's message: its verdict's, or why it has none."""
    verdict = summary.verdict.message if summary.verdict is not None else ""
    return verdict or ("stale runner" if summary.stale else "")


def _failed(att: pd.DataFrame) -> pd.DataFrame:
    if not len(att):
        return att
    return att[att.status.notna() & ~att.valid.astype(bool) & att.failure_class.notna()]


def _arms(evidence: Evidence, att: pd.DataFrame, settled: dict[str, float]) -> pd.DataFrame:
    failed = _failed(att)
    records = []
    for d in evidence.denominators():
        mine = att[att.arm == d.arm] if len(att) else att
        records.append(
            {
                "arm": d.arm,
                "cells": d.planned,
                "valid_rows": d.valid,
                "missing": d.missing,
                "solved": d.solved,
                "mean_reward": d.mean_reward,
                "strict_rate": d.strict_rate,
                "headline_rate": d.headline_rate,
                "invalid_attempts": int((failed.arm == d.arm).sum()) if len(failed) else 0,
                "attempts": len(mine),
                "cost_usd": float(mine.cost_usd.sum()) if len(mine) else 0.0,
                "unknown_cost_attempts": int((mine.cost_status == "unknown").sum()) if len(mine) else 0,
                "lower_bound_attempts": int((mine.usage_bound == "lower_bound").sum()) if len(mine) else 0,
                # settled USD of the arm's settled attempts; NaN when nothing was settled
                "settled_usd": (sum(settled.get(a, 0.0) for a in mine.attempt_id)
                                if settled and len(mine) else float("nan")),
            }
        )
    return pd.DataFrame(
        records,
        columns=[
            "arm",
            "cells",
            "valid_rows",
            "missing",
            "solved",
            "mean_reward",
            "strict_rate",
            "headline_rate",
            "invalid_attempts",
            "attempts",
            "cost_usd",
            "settled_usd",
            "unknown_cost_attempts",
            "lower_bound_attempts",
        ],
    )


_PAIRED_COLUMNS = ["task", "variant", "pairs", "baseline_reward", "variant_reward", "delta", "ci_low", "ci_high",
                   "outcome"]
_DELTA_COLUMNS = ["variant", "tasks", "mean_delta", "wins", "losses", "ties", "ci_low", "ci_high"]


def _paired(comparisons: list[Comparison]) -> pd.DataFrame:
    """Per task and variant, the paired figures (:func:`ray_bench.reports.paired.compare`): each
    arm's mean reward over the pairs, the mean paired delta and its interval."""
    return pd.DataFrame([{"task": t.task, "variant": c.variant, "pairs": t.pairs, "baseline_reward": t.baseline_mean,
                          "variant_reward": t.variant_mean, "delta": t.delta, "ci_low": t.ci_low,
                          "ci_high": t.ci_high, "outcome": t.outcome} for c in comparisons for t in c.tasks],
                        columns=_PAIRED_COLUMNS)


def _deltas(comparisons: list[Comparison]) -> pd.DataFrame:
    """Per variant, the overall paired figures over all its tasks."""
    return pd.DataFrame([{"variant": c.variant, "tasks": o.tasks, "mean_delta": o.delta, "wins": o.wins,
                          "losses": o.losses, "ties": o.ties, "ci_low": o.ci_low, "ci_high": o.ci_high}
                         for c in comparisons for o in (c.headline,)], columns=_DELTA_COLUMNS)


def _fingerprints(att: pd.DataFrame) -> pd.DataFrame:
    columns = ["failure_class", "fingerprint", "attempts", "cells", "message"]
    failed = _failed(att)
    if not len(failed):
        return pd.DataFrame(columns=columns)
    grouped = failed.groupby(["failure_class", "fingerprint"]).agg(
        attempts=("attempt_id", "count"), cells=("cell_id", "nunique"), message=("message", "last")
    )
    out = grouped.reset_index().sort_values(
        ["failure_class", "attempts", "fingerprint"], ascending=[True, False, True]
    )
    return out.reset_index(drop=True)[columns]


def _failures(att: pd.DataFrame) -> pd.DataFrame:
    columns = ["failure_class", "attempts", "cells", "top_fingerprints"]
    failed = _failed(att)
    if not len(failed):
        return pd.DataFrame(columns=columns)
    fps = _fingerprints(att)
    records = []
    for cls, group in failed.groupby("failure_class"):
        top = fps[fps.failure_class == cls].head(TOP_FINGERPRINTS)
        records.append(
            {
                "failure_class": cls,
                "attempts": len(group),
                "cells": group.cell_id.nunique(),
                "top_fingerprints": ", ".join(
                    f"{r.fingerprint} ({r.attempts})" for r in top.itertuples()
                ),
            }
        )
    return (
        pd.DataFrame(records, columns=columns)
        .sort_values(["attempts", "failure_class"], ascending=[False, True])
        .reset_index(drop=True)
    )


def _epochs(evidence: Evidence) -> pd.DataFrame:
    records = []
    for epoch in evidence.epochs:
        mine = [r for r in evidence.rows.values() if r.epoch == epoch.identity]
        finished = [a.finished_at for a in epoch.attempts if a.finished_at is not None]
        records.append(
            {
                "epoch": epoch.identity,
                "run_id": epoch.run_id,
                "run_root": str(epoch.run_root),
                "suite": epoch.plan.suite,
                "in_cohort": epoch.identity in evidence.cohort.epochs,
                "cells_planned": len(epoch.plan.cells),
                "attempts": len(epoch.attempts),
                "valid_attempts": sum(1 for a in epoch.attempts if a.valid),
                "accepted_rows": len(mine),
                "first_start": min((a.started_at for a in epoch.attempts), default=float("nan")),
                "last_finish": max(finished, default=float("nan")),
            }
        )
    return pd.DataFrame(records)


def _num(value: float, spec: str = ".3f") -> str:
    return "-" if pd.isna(value) else format(value, spec)


def _lower_bound(usd: float, unknown: int, spec: str, least: int = 0) -> str:
    """A cost sum that leaves out attempts of unknown cost, or holds one cut mid-turn (``least``),
    is a lower bound, and looks like one; one of unknown costs alone is ``unknown``."""
    return said_spend(usd, unknown, least, spec, unit="", at_least=">= ")


def _count(value: Any, least: int = 0) -> str:
    """A token count, ``-`` when no attempt of the group recorded it; ``>= n`` when ``least``
    of its attempts were cut mid-turn (their usage a lower bound)."""
    return "-" if value is None or pd.isna(value) else cost.at_least(str(int(value)), bool(least))


def render_markdown(report: Report) -> str:
    least = int(report.usage.lower_bound_attempts.sum()) if len(report.usage) else 0
    out = [
        f"# {report.title}",
        "",
        sections.status_line(report.category, report.promotions),
        "",
        "Rebuilt from accepted rows only: per (cohort, arm, task, repetition) the earliest started "
        "valid attempt, never the best one. Strict denominator: every planned cell (a cell "
        "without a valid row counts as a failure); headline denominator: cells with a valid row. "
        "Solved means reward >= 1. "
        f"{len(report.rows)} of {report.cells_planned} planned cells have "
        f"a valid row; {len(report.attempts)} attempts in all"
        + (f"; {len(report.exclusions)} cells excluded." if len(report.exclusions) else "."),
        "",
        "## Epochs",
        "",
        "| epoch | run | in cohort | cells planned | attempts | valid attempts | accepted rows |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in report.epochs.itertuples():
        out.append(
            f"| `{e.epoch}` | {e.run_id} | {'yes' if e.in_cohort else 'no'} | {e.cells_planned} | "
            f"{e.attempts} | {e.valid_attempts} | {e.accepted_rows} |"
        )
    out += [
        "",
        "## Arms",
        "",
        "| arm | cells (strict) | valid rows (headline) | missing | solved | mean reward | "
        "strict rate | headline rate | invalid attempts | cost estimated (USD) | "
        "cost settled (USD) | attempts of unknown cost |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.arms.itertuples():
        out.append(
            f"| {r.arm} | {r.cells} | {r.valid_rows} | {r.missing} | {r.solved} | "
            f"{_num(r.mean_reward)} | {_num(r.strict_rate)} | {_num(r.headline_rate)} | "
            f"{r.invalid_attempts} | "
            f"{_lower_bound(r.cost_usd, r.unknown_cost_attempts, '.3f', r.lower_bound_attempts)} | "
            f"{_num(r.settled_usd)} | "
            f"{r.unknown_cost_attempts} |"
        )
    if len(report.deltas):
        out += [
            "",
            f"## Paired deltas (variant - {report.baseline}, per task, mean over the task's pairs)",
            "",
            f"Interval: {CONFIDENCE:.0%} percentile bootstrap ({BOOTSTRAP_RESAMPLES} resamples, seed "
            f"{BOOTSTRAP_SEED}) of the mean paired delta, over tasks overall and over a task's pairs per "
            "task (a pair: one repetition with a row in both arms).",
            "",
            "| variant | tasks | mean delta | wins | losses | ties | CI low | CI high |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for d in report.deltas.itertuples():
            out.append(
                f"| {d.variant} | {d.tasks} | {_num(d.mean_delta, '+.3f')} | "
                f"{d.wins} | {d.losses} | "
                f"{d.ties} | {_num(d.ci_low, '+.3f')} | {_num(d.ci_high, '+.3f')} |"
            )
        if len(report.paired):
            out += [
                "",
                "| task | variant | pairs | baseline | variant | delta | 95% interval | |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for p in report.paired.itertuples():
                out.append(
                    f"| {table_cell(str(p.task))} | {p.variant} | {p.pairs} | "
                    f"{p.baseline_reward:.2f} | {p.variant_reward:.2f} | "
                    f"{p.delta:+.3f} | {span(p.ci_low, p.ci_high, '1 pair')} | {p.outcome} |"
                )
    if report.paired_stats is not None:
        out += markdown_lines(report.paired_stats, report.baseline)
    out += [
        "",
        "## Usage and cost (every attempt)",
        "",
        "Input tokens are fresh input; cache reads and writes are counted apart. Cost: settled "
        "where the latest settlement matched the provider's charge, else the agent's estimate (the "
        "CLI's own figure, or its tokens at list price when it printed none); unknown where an attempt "
        "left no usage or no cost (never counted as 0). An attempt whose CLI was cut mid-turn "
        "counts what had arrived: its usage is a lower bound, and a sum it is in reads >=. "
        + (f"Attempts by cost: {cost.split_line(report.usage)}. Estimated in all: "
           f"{_lower_bound(float(report.usage.cost_usd.sum()), int(report.usage.unknown_attempts.sum()), '.4f', least)}"
           f"{unknown_cost_note(int(report.usage.unknown_attempts.sum()), least)}." if len(report.usage) else ""),
        "",
        "| account | arm | attempts | input tokens | output tokens | cache read tokens | "
        "cache write tokens | cost estimated (USD) | cost settled (USD) | settled | estimated | "
        "unknown |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for u in report.usage.itertuples():
        # Attempts whose usage is unknown add nothing to the sums: the last column says how many.
        # One cut mid-turn adds a lower bound: the sums read >=.
        n = u.lower_bound_attempts
        out.append(
            f"| {u.account} | {u.arm} | {u.attempts} | {_count(u.input_tokens, n)} | "
            f"{_count(u.output_tokens, n)} | {_count(u.cache_read_tokens, n)} | "
            f"{_count(u.cache_write_tokens, n)} | {_lower_bound(u.cost_usd, u.unknown_attempts, '.4f', n)} | "
            f"{_num(u.settled_usd, '.4f')} | "
            f"{u.settled_attempts} | {u.estimated_attempts} | {u.unknown_attempts} |"
        )
    if len(report.regraded):
        out += [
            "",
            "## Regraded rows",
            "",
            "These rows' rewards are their latest valid regrade's: `ray-bench regrade` ran the task's "
            "changed tests/ on the workspace the row's agent left, in a fresh sandbox, as a new attempt "
            "(no agent ran again). The row is still the attempt it was.",
            "",
            "| task | arm | rep | row | regraded by | reward graded then | reward now |",
            "|---|---|---|---|---|---|---|",
        ]
        for g in report.regraded.itertuples():
            out.append(f"| {table_cell(str(g.task))} | {g.arm} | {g.rep} | {g.attempt_id} | {g.regraded_by} | "
                       f"{_num(g.graded_reward, '.2f')} | {_num(g.reward, '.2f')} |")
    out += ["", "## Failure classes", ""]
    if len(report.failures):
        out += ["| class | attempts | cells | top fingerprints |", "|---|---|---|---|"]
        for f in report.failures.itertuples():
            out.append(f"| {f.failure_class} | {f.attempts} | {f.cells} | {f.top_fingerprints} |")
        out += ["", "| class | fingerprint | attempts | cells | message |", "|---|---|---|---|---|"]
        for g in report.fingerprints.itertuples():
            message = table_cell(str(g.message)[:120])
            out.append(
                f"| {g.failure_class} | `{g.fingerprint}` | {g.attempts} | {g.cells} | {message} |"
            )
    else:
        out.append("none")
    out += sections.markdown_sections(report.exclusions, report.settlement, report.executions,
                                      report.roles)
    return "\n".join(out) + "\n"


def write_report(run_root: Path, roots: list[Path] | None = None) -> Report:
    report = build_report(run_root, roots)
    write_files(report, run_root)
    return report


def write_lineage_report(paths: list[Path], out_dir: Path) -> Report:
    """The lineage report of the named run roots into ``out_dir`` (bad input writes nothing)."""
    refuse_output_in_run_root(out_dir, "report --out")
    report = build_lineage_report(paths)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_files(report, out_dir)
    return report


def write_files(report: Report, out_dir: Path) -> None:
    from ray_bench.reports.html import render_html

    files = report.files(out_dir)
    files["md"].write_text(render_markdown(report))
    report.rows.to_csv(files["csv"], index=False)
    report.rows.to_parquet(files["parquet"], index=False)
    files["html"].write_text(render_html(report))
    if report.paired_stats is not None:
        report.paired_stats.stats.to_csv(files["paired csv"], index=False)
    else:  # a one-arm report: no pairs, and no stale file of an earlier build beside it
        files["paired csv"].unlink(missing_ok=True)
