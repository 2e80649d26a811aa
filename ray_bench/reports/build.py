"""The report, rebuilt only from accepted rows of the ledger."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ray_bench.ledger.rows import accepted_rows
from ray_bench.ledger.store import Ledger
from ray_bench.plan.store import PLAN_FILE, load_plan_file


@dataclass
class Report:
    run_id: str
    rows: pd.DataFrame  # one accepted row per cell
    attempts: pd.DataFrame  # every attempt
    arms: pd.DataFrame  # per arm
    paired: pd.DataFrame  # per task: baseline vs each variant
    baseline: str
    variants: list[str]
    cells_planned: int

    def files(self, run_root: Path) -> dict[str, Path]:
        return {"md": run_root / "report.md", "csv": run_root / "report.csv",
                "parquet": run_root / "report.parquet"}


def build_report(run_root: Path) -> Report:
    plan, _ = load_plan_file(run_root / PLAN_FILE)
    ledger = Ledger.open_readonly(run_root)
    try:
        attempts = ledger.attempts()
    finally:
        ledger.close()
    cohort = {plan_identity for plan_identity in {a.epoch for a in attempts}}
    accepted = accepted_rows(attempts, cohort)
    baseline = next(a.name for a in plan.arms if a.role == "baseline") if any(
        a.role == "baseline" for a in plan.arms) else plan.arms[0].name
    variants = [a.name for a in plan.arms if a.name != baseline]
    att = pd.DataFrame([a.__dict__ for a in attempts], columns=list(_ATTEMPT_COLUMNS))
    rows = pd.DataFrame([r.__dict__ for r in accepted.values()], columns=list(_ATTEMPT_COLUMNS))
    rows = rows.sort_values(["task", "arm", "rep"]).reset_index(drop=True)
    planned = pd.Series([c.arm for c in plan.cells]).value_counts()
    arm_rows: list[dict[str, Any]] = []
    for arm in [baseline, *variants]:
        mine = rows[rows.arm == arm]
        invalid = att[(att.arm == arm) & (att.status == "finished") & (~att.valid)]
        arm_rows.append({
            "arm": arm, "cells": int(planned.get(arm, 0)), "valid_rows": len(mine),
            "mean_reward": float(mine.reward.mean()) if len(mine) else float("nan"),
            "solved": int((mine.reward >= 1.0).sum()) if len(mine) else 0,
            "invalid_attempts": len(invalid),
            "cost_usd": float(att[att.arm == arm].cost_usd.sum()),
        })
    arms_df = pd.DataFrame(arm_rows)
    paired_rows: list[dict[str, Any]] = []
    if variants and len(rows):
        by = rows.groupby(["task", "arm"]).reward.mean().unstack("arm")
        for variant in variants:
            if baseline not in by or variant not in by:
                continue
            for task, values in by.iterrows():
                b, v = values.get(baseline), values.get(variant)
                if pd.isna(b) or pd.isna(v):
                    continue
                paired_rows.append({"task": task, "variant": variant, "baseline_reward": float(b),
                                    "variant_reward": float(v), "delta": float(v - b)})
    paired = pd.DataFrame(paired_rows, columns=["task", "variant", "baseline_reward", "variant_reward", "delta"])
    return Report(plan.run_id, rows, att, arms_df, paired, baseline, variants, len(plan.cells))


_ATTEMPT_COLUMNS = ("attempt_id", "cell_id", "task", "task_checksum", "arm", "rep", "seq", "account", "backend",
                    "epoch", "preflight", "started_at", "status", "finished_at", "valid", "reward",
                    "failure_class", "fingerprint", "counts", "cost_usd")


def render_markdown(report: Report) -> str:
    out = [f"# Report: {report.run_id}", "",
           f"Rebuilt from the ledger's accepted rows (earliest valid attempt per cell). "
           f"{len(report.rows)} of {report.cells_planned} cells have a valid row; "
           f"{len(report.attempts)} attempts in all.", "", "## Arms", "",
           "| arm | cells | valid rows | mean reward | solved | invalid attempts | cost (USD) |",
           "|---|---|---|---|---|---|---|"]
    for r in report.arms.itertuples():
        out.append(f"| {r.arm} | {r.cells} | {r.valid_rows} | {r.mean_reward:.3f} | {r.solved} | "
                   f"{r.invalid_attempts} | {r.cost_usd:.3f} |")
    if len(report.paired):
        out += ["", f"## Paired deltas (variant - {report.baseline}, per task, mean over repetitions)", "",
                "| task | variant | baseline | variant | delta |", "|---|---|---|---|---|"]
        for p in report.paired.itertuples():
            out.append(f"| {p.task} | {p.variant} | {p.baseline_reward:.2f} | {p.variant_reward:.2f} | "
                       f"{p.delta:+.2f} |")
        for variant, group in report.paired.groupby("variant"):
            wins, losses = int((group.delta > 0).sum()), int((group.delta < 0).sum())
            ties = len(group) - wins - losses
            out.append("")
            out.append(f"**{variant}**: mean paired delta {group.delta.mean():+.3f} over {len(group)} tasks "
                       f"({wins} wins, {losses} losses, {ties} ties)")
    failures = report.attempts[(report.attempts.status == "finished") & (~report.attempts.valid.astype(bool))]
    out += ["", "## Failure classes", ""]
    if len(failures):
        out += ["| class | attempts |", "|---|---|"]
        for cls, n in failures.failure_class.value_counts().items():
            out.append(f"| {cls} | {n} |")
    else:
        out.append("none")
    return "\n".join(out) + "\n"


def write_report(run_root: Path) -> Report:
    report = build_report(run_root)
    files = report.files(run_root)
    files["md"].write_text(render_markdown(report))
    report.rows.to_csv(files["csv"], index=False)
    report.rows.to_parquet(files["parquet"], index=False)
    return report
