"""``ray-bench rerun runs/ID --failed``: a new plan for the cells of a run without a valid row.

A run's *family* (:mod:`ray_bench.evidence.family`) is its run root and the reruns planned from
it (``ID-rerun-1``, ...): their epochs form one cohort, so a rerun never repeats a cell that a
previous rerun recovered.
A rerun is a plan like any other (new run root, new identity, its own receipt and
confirmation); its cells are selected by (task, arm, repetition) through a selection file
written into the new run root, which also records the failure signatures and the hypothesis,
so that both are covered by the plan identity and re-checked for drift.

The recovery rule: a failure signature that failed the last time (in the latest epoch that
attempted the cell) and whose cell is unchanged (same cell id: same task content, arm config
and repetition) is refused unless ``--hypothesis`` records what changed. Stale and cancelled
attempts carry no signature: they say nothing about the cell.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_bench.commands.receipt import render_receipt
from ray_bench.config.secrets import refuse_operator_text, refuse_secret_text
from ray_bench.errors import PlanError, UserInputError
from ray_bench.evidence.catalog import FAILURE_CLASSES
from ray_bench.evidence.decisions import refuse_official
from ray_bench.evidence.family import RERUN_NAME, run_family
from ray_bench.evidence.rows import Evidence, build_evidence, load_epoch
from ray_bench.ledger.rows import start_order
from ray_bench.ledger.store import AttemptRow
from ray_bench.models.plan import Plan
from ray_bench.plan.compile import PlanRequest, compile_plan
from ray_bench.plan.store import sealed_plan, write_plan
from ray_bench.runroot import RunPaths

RERUN_SELECTION = "rerun-selection.json"

Key = tuple[str, str, int]  # (task, arm, rep)


class RepeatedSignatureError(UserInputError):
    """A rerun would repeat a failure signature of the last time with nothing changed."""


@dataclass(frozen=True)
class Signature:
    failure_class: str
    fingerprint: str
    message: str
    attempts: int  # failed attempts with this signature among the selected cells, all epochs
    cells: int  # selected cells that failed with it
    last_time: bool  # it failed in the latest epoch that attempted one of those cells


@dataclass
class RerunResult:
    run_root: Path
    identity: str
    cells: int
    base_run: str
    signatures: list[Signature]
    hypothesis: str | None
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Failed:
    key: Key
    history: list[AttemptRow]  # every attempt of the key in the family, in start order

    @property
    def last_epoch(self) -> str | None:
        return self.history[-1].epoch if self.history else None

    @property
    def failures(self) -> list[AttemptRow]:
        return [
            a for a in self.history if a.status == "finished" and not a.valid and a.failure_class
        ]

    @property
    def last_class(self) -> str | None:
        failures = self.failures
        return failures[-1].failure_class if failures else None


def _failed_cells(evidence: Evidence) -> list[_Failed]:
    """(task, arm, rep) keys planned in the family that have no accepted row under any cell id
    (an edited task's new cell that recovered counts as recovered)."""
    covered = {(r.task, r.arm, r.rep) for r in evidence.rows.values()}
    keys: dict[Key, None] = {}
    for cell in evidence.planned.values():
        key = (cell.task, cell.arm, cell.rep)
        if key not in covered:
            keys.setdefault(key, None)
    history: dict[Key, list[AttemptRow]] = {k: [] for k in keys}
    for row in evidence.attempts():
        key = (row.task, row.arm, row.rep)
        if key in history:
            history[key].append(row)
    return [_Failed(k, sorted(history[k], key=start_order)) for k in keys]


def _signatures(failed: list[_Failed], messages: Mapping[tuple[str, str], str]) -> list[Signature]:
    stats: dict[tuple[str, str], dict[str, Any]] = {}
    for item in failed:
        for row in item.failures:
            sig = (row.failure_class or "", row.fingerprint or "")
            entry = stats.setdefault(sig, {"attempts": 0, "cells": set(), "last": False, "msg": ""})
            entry["attempts"] += 1
            entry["cells"].add(item.key)
            entry["last"] = entry["last"] or row.epoch == item.last_epoch
            entry["msg"] = messages.get((row.epoch, row.attempt_id), entry["msg"])
    out = [
        Signature(cls, fp, str(e["msg"])[:160], e["attempts"], len(e["cells"]), bool(e["last"]))
        for (cls, fp), e in stats.items()
    ]
    return sorted(out, key=lambda s: (-s.attempts, s.failure_class, s.fingerprint))


def _messages(evidence: Evidence) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for epoch in evidence.epochs:
        for attempt_id, summary in epoch.summaries().items():
            out[(epoch.identity, attempt_id)] = summary.verdict.message if summary.verdict is not None else ""
    return out


def rerun_failed(
    run_root: Path,
    *,
    failure_class: str | None = None,
    hypothesis: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> RerunResult:
    """Plan ``runs/<base>-rerun-<n>`` for the family's cells without a valid row."""
    if failure_class is not None and failure_class not in FAILURE_CLASSES:
        raise UserInputError(
            f"unknown failure class {failure_class!r}",
            where="--class",
            fix=f"use one of {', '.join(FAILURE_CLASSES)}",
        )
    hypothesis = (hypothesis or "").strip() or None
    refuse_secret_text(hypothesis, "--hypothesis")
    family = run_family(run_root)
    for root in family:
        refuse_official(root, "rerun (its report would change)")
    named = load_epoch(run_root.resolve())
    refuse_operator_text({"--hypothesis": hypothesis}, [a.route.env for a in named.plan.accounts], environ)
    if not RunPaths(family[0]).ledger.is_file():
        raise UserInputError(
            "this run has not started: there is nothing to rerun",
            where=str(run_root),
            fix="execute its plan first",
        )
    evidence = build_evidence([load_epoch(p) for p in family])
    failed = _failed_cells(evidence)
    if failure_class is not None:
        failed = [f for f in failed if f.last_class == failure_class]
    if not failed:
        what = (
            f"no cell whose last failure is {failure_class}"
            if failure_class
            else "every planned cell has a valid row"
        )
        raise UserInputError(
            f"nothing to rerun: {what}",
            where=str(run_root),
            fix="check `ray-bench status` or `ray-bench report`",
        )

    base = family[0]
    n = 1 + max((int(m["n"]) for p in family[1:] if (m := RERUN_NAME.match(p.name))), default=0)
    new_id = f"{base.name}-rerun-{n}"
    new_root = base.parent / new_id
    if new_root.exists():
        raise PlanError(
            "run root already exists", where=str(new_root), fix="remove it or rerun its plan"
        )

    messages = _messages(evidence)
    signatures = _signatures(failed, messages)
    inputs = {i.kind: Path(i.path) for i in named.plan.inputs if i.kind in ("suite", "accounts")}
    context = _Rerun(base.name, family, failed, signatures, failure_class, hypothesis)
    selection_doc = _selection_doc(named.plan, context)
    new_root.mkdir(parents=True)
    try:
        selection = new_root / RERUN_SELECTION
        selection.write_text(json.dumps(selection_doc, indent=2) + "\n")
        plan = compile_plan(
            PlanRequest(
                suite=inputs["suite"],
                accounts=inputs["accounts"],
                run_id=new_id,
                selection=selection,
                only_cells=frozenset(f.key for f in failed),
                run_root=new_root,
                environ=dict(os.environ) if environ is None else environ,
            )
        )
        warnings = _check_repeats(plan, failed, signatures, evidence, hypothesis)
        plan = plan.model_copy(update={"warnings": [*plan.warnings, *warnings]})
        data, identity = sealed_plan(plan)
        receipt = _with_rerun_section(render_receipt(plan, identity), context)
        write_plan(plan, new_root, receipt, data)
    except BaseException:
        shutil.rmtree(new_root, ignore_errors=True)  # refused or failed: nothing written
        raise
    return RerunResult(
        new_root, identity, len(plan.cells), base.name, signatures, hypothesis, plan.warnings
    )


def _check_repeats(
    plan: Plan,
    failed: list[_Failed],
    signatures: list[Signature],
    evidence: Evidence,
    hypothesis: str | None,
) -> list[str]:
    """Refuse the unchanged repeats of the last time's signatures unless a hypothesis is given;
    return the plan warnings that record what was decided."""
    new_ids = {(c.task, c.arm, c.rep): c.id for c in plan.cells}
    repeated: dict[tuple[str, str], set[Key]] = {}
    changed: set[str] = set()
    for item in failed:
        last = [a for a in item.history if a.epoch == item.last_epoch]
        if last and new_ids.get(item.key) not in {a.cell_id for a in last}:
            changed.add(item.key[0])  # new inputs: a new cell, not a repeat
            continue
        for row in item.failures:
            if row.epoch == item.last_epoch:
                repeated.setdefault((row.failure_class or "", row.fingerprint or ""), set()).add(
                    item.key
                )
    warnings = [
        f"task {t}: its content or arm config changed since it last ran; its rerun cells are "
        "new cells, not rows of the old ones"
        for t in sorted(changed)
    ]
    if not repeated:
        return warnings
    by_sig = {(s.failure_class, s.fingerprint): s for s in signatures}
    shown = "; ".join(
        f"{cls}:{fp} ({by_sig[(cls, fp)].message[:80] or 'no message'}) on {len(keys)} cell(s)"
        for (cls, fp), keys in sorted(repeated.items(), key=lambda kv: -len(kv[1]))[:3]
    )
    if hypothesis is None:
        last_runs = sorted({evidence.run_id_of(f.last_epoch) for f in failed if f.last_epoch})
        raise RepeatedSignatureError(
            f"rerun refused: {len(repeated)} failure signature(s) failed the last time "
            f"(run {', '.join(last_runs)}) with nothing changed: {shown}",
            where="rerun",
            fix="record what changed with --hypothesis TEXT, or narrow with --class",
        )
    return [
        *warnings,
        f"rerun repeats {len(repeated)} failure signature(s) of the last time under "
        f"the hypothesis: {hypothesis}",
    ]


@dataclass(frozen=True)
class _Rerun:
    """What the selection file and the receipt's rerun section both record."""

    base: str
    family: list[Path]
    failed: list[_Failed]
    signatures: list[Signature]
    failure_class: str | None
    hypothesis: str | None


def _selection_doc(plan: Plan, rerun: _Rerun) -> dict[str, Any]:
    base, family, failed, signatures = rerun.base, rerun.family, rerun.failed, rerun.signatures
    failure_class, hypothesis = rerun.failure_class, rerun.hypothesis
    per_task: dict[str, dict[str, set[Any]]] = {}
    for task, arm, rep in (f.key for f in failed):
        entry = per_task.setdefault(task, {"reps": set(), "arms": set()})
        entry["reps"].add(rep)
        entry["arms"].add(arm)
    return {
        "generated_by": "ray-bench rerun --failed",
        "rerun_of": base,
        "run_roots": [p.name for p in family],
        "failure_class": failure_class,
        "hypothesis": hypothesis,
        "cells": sorted([t, a, r] for t, a, r in (f.key for f in failed)),
        "signatures": [s.__dict__ for s in signatures],
        "tasks": [
            {
                "task_id": task,
                "benchmark": plan.suite,
                "reps": sorted(e["reps"]),
                "arms": sorted(e["arms"]),
            }
            for task, e in sorted(per_task.items())
        ],
    }


def _with_rerun_section(receipt: str, rerun: _Rerun) -> str:
    base, family, failed, signatures = rerun.base, rerun.family, rerun.failed, rerun.signatures
    failure_class, hypothesis = rerun.failure_class, rerun.hypothesis
    lines = [
        "## Rerun",
        "",
        f"- rerun of: `{base}` (cohort of run roots: {', '.join(p.name for p in family)})",
        f"- cells without a valid row selected: {len(failed)}"
        + (f" (last failure class {failure_class})" if failure_class else ""),
        f"- hypothesis: {hypothesis or 'none recorded'}",
        f"- never attempted, stale or cancelled only: {sum(1 for f in failed if not f.failures)}",
        "",
        "| class | fingerprint | message | attempts | cells | failed last time |",
        "|---|---|---|---|---|---|",
    ]
    for s in signatures:
        message = s.message.replace("|", "\\|") or "-"
        lines.append(
            f"| {s.failure_class} | `{s.fingerprint}` | {message} | {s.attempts} | {s.cells} | "
            f"{'yes' if s.last_time else 'no'} |"
        )
    if not signatures:
        lines.append("| - | - | no failure signature | 0 | 0 | - |")
    section = "\n".join(lines) + "\n\n"
    marker = "## Confirm"
    at = receipt.find(marker)
    return receipt[:at] + section + receipt[at:] if at >= 0 else receipt + "\n" + section
