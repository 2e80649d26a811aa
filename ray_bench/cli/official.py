"""Decisions about evidence: ``exclude``, ``include``, ``settle``, ``promote`` and ``demote``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from ray_bench.cli.app import app, err, guarded, out

RunRoot = Annotated[Path, typer.Argument(help="runs/ID")]
Cell = Annotated[str, typer.Option("--cell", help="A planned cell: its id (or an unambiguous prefix) or "
                                   "task/arm/rep.")]
By = Annotated[str | None, typer.Option("--by", help="Who decides (default: the operating-system user).")]


def _decide(run_root: Path, cell: str, reason: str, by: str | None, *, include: bool) -> None:
    from ray_bench.evidence.decisions import record_exclusion

    done = record_exclusion(run_root, cell, reason, include=include, by=by)
    verb = "included" if include else "excluded"
    out.print(f"{verb} {done.task}/{done.arm}/{done.rep} ({done.cell_id}) in run {done.run_id} by "
              f"{done.by}: {done.reason}", markup=False)


@app.command()
@guarded
def exclude(run_root: RunRoot, cell: Cell,
            reason: Annotated[str, typer.Option("--reason", help="Why (recorded with who and when).")],
            by: By = None) -> None:
    """Take a cell out of both denominators, on the record (nothing is deleted)."""
    _decide(run_root, cell, reason, by, include=False)


@app.command()
@guarded
def include(run_root: RunRoot, cell: Cell,
            reason: Annotated[str, typer.Option("--reason", help="Why (recorded with who and when).")],
            by: By = None) -> None:
    """Undo an exclusion, recorded in the ledger."""
    _decide(run_root, cell, reason, by, include=True)


@app.command()
@guarded
def settle(run_root: RunRoot,
           usage: Annotated[Path, typer.Option("--usage", help=(
               "A provider's per-request usage export: CSV with request_id and cost_usd (or spend) "
               "columns, LiteLLM spend logs JSON, or OpenRouter generations JSON. Anthropic's and "
               "OpenAI's organization usage/cost reports are time-bucketed, without request ids, and "
               "are refused."))],
           by: By = None) -> None:
    """Reconcile each attempt's estimated cost with the export's charges by request id."""
    from ray_bench.evidence.settle import settle_run
    from ray_bench.ledger.rows import said_spend, unknown_cost_note

    result = settle_run(run_root, usage, by=by)
    counts = result.counts()
    estimated, unknown = result.estimated()
    lower = result.lower_bounds()
    settled = sum(a.settled_usd or 0.0 for a in result.attempts.values())
    out.print(f"run {result.run_id}: {counts['settled']} settled, {counts['missing']} missing, "
              f"{counts['disputed']} disputed, {counts['n/a']} without cost; estimated "
              f"{said_spend(estimated, unknown, lower, '.4f')}{unknown_cost_note(unknown, lower)}, "
              f"settled ${settled:.4f} ({result.format} export {result.source}, "
              f"{result.unmatched_charges} charges matched no attempt)", markup=False)
    for attempt_id, a in sorted(result.attempts.items()):
        if a.status in ("missing", "disputed"):
            err.print(f"{a.status}: {attempt_id}: {a.detail}", markup=False)


@app.command()
@guarded
def promote(run_root: RunRoot,
            reason: Annotated[str, typer.Option("--reason", help="Why it is fit to be official (recorded).")],
            by: By = None,
            max_invalid_rate: Annotated[float, typer.Option(
                "--max-invalid-rate", help="Largest share of invalid attempts allowed.")] = 0.25,
            require_settlement: Annotated[bool, typer.Option(
                "--require-settlement", help="Refuse unless every run that spent money is settled.")] = False,
            ) -> None:
    """Make a staging run (and its reruns) official once its gates pass.

    Recorded in the ledger; `demote` undoes it, on the record. Exits 1 with the failed gates,
    recording nothing.
    """
    from ray_bench.evidence.promote import promote_run

    result = promote_run(run_root, reason=reason, by=by, max_invalid_rate=max_invalid_rate,
                         require_settlement=require_settlement)
    for gate in result.gates:
        out.print(f"{'pass' if gate.ok else 'FAIL'} {gate.name}: {gate.detail}", markup=False)
    if not result.promoted:
        err.print(f"run {result.run_id} stays staging: nothing recorded", markup=False)
        raise typer.Exit(1)
    out.print(f"run {', '.join(result.family)} official: promoted by {result.by} at "
              f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC", markup=False)


@app.command()
@guarded
def demote(run_root: RunRoot,
           reason: Annotated[str, typer.Option("--reason", help="Why the official evidence must change "
                                                              "(recorded with who and when).")],
           by: By = None) -> None:
    """Take an official run (and its official reruns) back to staging.

    Recorded in the ledger, so that it can be settled, excluded or rerun again; `promote` makes it
    official again.
    """
    from ray_bench.evidence.promote import demote_run

    result = demote_run(run_root, reason=reason, by=by)
    out.print(f"run {', '.join(result.family)} staging again: demoted by {result.by} at "
              f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC: {result.reason}", markup=False)
