"""Evidence commands: ``ray-bench gaps``, ``ray-bench rerun`` and ``ray-bench regrade``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ray_bench.cli.app import app, err, guarded, out
from ray_bench.errors import UserInputError
from ray_bench.models.selection import SHAPES as SELECTION_SHAPES
from ray_bench.runroot import RunPaths, refuse_output_in_run_root


@app.command()
@guarded
def rerun(
    run_root: Annotated[Path, typer.Argument(help="runs/ID")],
    failed: Annotated[
        bool, typer.Option("--failed", help="Plan the cells without a valid row.")
    ] = False,
    failure_class: Annotated[
        str | None, typer.Option("--class", help="Only cells whose last failure has this class.")
    ] = None,
    hypothesis: Annotated[
        str | None,
        typer.Option(
            "--hypothesis", help="What changed since the last failure (recorded in the plan)."
        ),
    ] = None,
) -> None:
    """Plan runs/ID-rerun-N for failed cells; print its plan identity."""
    from ray_bench.commands.rerun import rerun_failed

    if not failed:
        raise UserInputError(
            "rerun needs --failed",
            where="rerun",
            fix="pass --failed (the cells of the run without a valid row)",
        )
    result = rerun_failed(run_root, failure_class=failure_class, hypothesis=hypothesis)
    for s in result.signatures:
        err.print(
            f"signature {s.failure_class}:{s.fingerprint} x{s.attempts} on {s.cells} cell(s)"
            f"{' (failed last time)' if s.last_time else ''}: {s.message[:100]}",
            markup=False,
        )
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False)
    paths = RunPaths(result.run_root)
    err.print(f"planned {result.cells} cells -> {paths.plan} (receipt: {paths.receipt})", markup=False)
    out.print(result.identity, markup=False)


@app.command()
@guarded
def gaps(
    suite: Annotated[Path, typer.Option("--suite", help="Suite YAML.")],
    runs: Annotated[list[Path], typer.Option("--runs", help="Run roots, or a directory of them.")],
    out_path: Annotated[
        Path,
        typer.Option(
            "--out", help="selections/NAME.json; one-arm gaps go to NAME-<arm>-only.json beside it."
        ),
    ],
    target: Annotated[
        int | None, typer.Option("--target", min=1, help="Valid repetitions wanted per task and arm.")
    ] = None,
    target_mde: Annotated[
        float | None, typer.Option("--target-mde", help="Plan the repetitions whose mean paired delta "
                                   "detects this delta (alpha 0.05, power 0.8), from the runs' spread.")
    ] = None,
    selection_file: Annotated[
        Path | None, typer.Option("--selection-file", help=f"Only the tasks of this selection file: {SELECTION_SHAPES} "
                                  "(its reps and arms are not read).")
    ] = None,
) -> None:
    """Select the repetitions missing to reach --target (or --target-mde)."""
    from ray_bench.evidence.gaps import find_gaps, next_commands, target_for_mde, write_selections

    if (target is None) == (target_mde is None):
        raise UserInputError("give exactly one of --target and --target-mde", where="gaps",
                             fix="--target N (repetitions) or --target-mde D (a paired delta)")
    refuse_output_in_run_root(out_path, "gaps --out", runs=runs)  # before the report lines: nothing is written
    if target_mde is not None:
        mde = target_for_mde(suite, runs, target_mde, selection_file)
        basis = (f"the runs' spread ({mde.spread.pairs} paired rows)" if mde.spread is not None
                 else "the assumed spread (no paired rows yet)")
        err.print(f"--target-mde {target_mde:g}: {mde.reps} repetitions per task and arm over {mde.tasks} tasks, "
                  f"from {basis}", markup=False)
        target = mde.reps
    assert target is not None
    result = find_gaps(suite, runs, target, selection_file)
    err.print(
        f"suite {result.suite}: {len(result.run_roots)} compatible run roots, target {target}",
        markup=False,
    )
    for task in sorted({t for t, _ in result.valid}):
        cells = ", ".join(f"{arm} {len(result.valid[(task, arm)])}/{target}" for arm in result.arms)
        stale = sum(result.incompatible.get((task, arm), 0) for arm in result.arms)
        excluded = ", ".join(f"{arm} rep {','.join(map(str, result.excluded[(task, arm)]))}"
                             for arm in result.arms if result.excluded.get((task, arm)))
        out.print(
            f"{task}: {cells}" + (f" ({stale} rows of older content ignored)" if stale else "")
            + (f" (excluded, not refilled: {excluded})" if excluded else ""),
            markup=False,
        )
    written = write_selections(result, out_path)
    if not written:
        out.print("no gaps: every task and arm has its target of valid rows", markup=False)
    for path in written:
        out.print(f"wrote {path}", markup=False)
    for command in next_commands(result, written, suite, runs):
        out.print(f"next: {command}", markup=False)


@app.command()
@guarded
def regrade(
    run_root: Annotated[Path, typer.Argument(help="runs/ID (finished)")],
    tasks: Annotated[
        list[str] | None,
        typer.Option("--tasks", help="Only these tasks (repeat the option, or separate with commas)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List reuse / regrade / rerun per cell; write nothing.")
    ] = False,
) -> None:
    """Grade kept workspaces again with a task's changed tests/ (no agent runs).

    Each regrade is a new attempt of the cell; the accepted row keeps its source attempt.
    """
    from ray_bench.commands.regrade import choose, regrade_run

    names = [n.strip() for t in tasks or [] for n in t.split(",") if n.strip()] or None
    if dry_run:
        _, _, choices = choose(run_root, names)
        for c in choices:
            out.print(f"{c.action:<8} {c.cell.task}/{c.cell.arm}/{c.cell.rep}  {c.reason}", markup=False)
        counts = {a: sum(1 for c in choices if c.action == a) for a in ("reuse", "regrade", "rerun")}
        err.print(", ".join(f"{n} {a}" for a, n in counts.items()) + " (dry run: nothing written)", markup=False)
        return
    result = regrade_run(run_root, names)
    for c in result.of("rerun"):
        err.print(f"rerun    {c.cell.task}/{c.cell.arm}/{c.cell.rep}  {c.reason}", markup=False)
    if not result.regraded:
        err.print("nothing to regrade: "
                  + ("no task's tests/ changed since its rows were graded" if not result.of("rerun")
                     else "the changed cells need a rerun (above)"), markup=False)
        return
    failed = 0
    for source, row in result.regraded.items():
        before = next((c.row.reward for c in result.choices if c.row and c.row.attempt_id == source), None)
        failed += not row.valid
        out.print(f"regraded {row.task}/{row.arm}/{row.rep}: {source} -> {row.attempt_id}, reward {before} -> "
                  f"{row.reward}{'' if row.valid else f' (invalid: {row.failure_class})'}", markup=False)
    err.print(f"{len(result.regraded)} regraded as new attempts (report: ray-bench report {run_root})", markup=False)
    if failed:
        raise typer.Exit(1)
