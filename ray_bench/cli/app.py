"""The ray-bench command line: parse, call one library function, print.

User errors print one line per problem (what, where, how to fix) and exit 2 with no
traceback. A command's body imports the library it calls: importing this module costs ~290 ms
of CPU, and each body's imports cost 20-3,800 ms more on top of it (measured one by one under
load, `time.process_time()` around the import in a fresh process after `import ray_bench.cli`:
`ray_bench.api` ~520, `reports.build` ~3,070 and `cli.quickstart` ~3,840 (pandas, scipy),
`sim` ~1,110, `plan.compile` ~450, `status.read` ~165, `scheduler.signals` ~34, `validate` ~22).
What costs under 5 ms is imported here at the top.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from ray_bench import __version__
from ray_bench.cells.spec import DEFAULT_RUNNERS_PER_NODE
from ray_bench.errors import MultipleInputErrors, RayBenchError, UserInputError
from ray_bench.models.selection import SHAPES as SELECTION_SHAPES
from ray_bench.models.task.explain import explain_key
from ray_bench.numbers import strict_json
from ray_bench.state import default_state_root
from ray_bench.textsafe import escape_controls

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Run LLM-agent benchmark suites across many accounts on Ray.")
class SafeConsole(Console):
    """A console whose plain-string output has its control characters escaped (lines kept):
    a task name or reason holding ESC/OSC bytes reaches the operator's terminal as text."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(escape_controls(o, keep="\n") if isinstance(o, str) else o for o in objects), **kwargs)


out = SafeConsole(highlight=False, soft_wrap=True)
err = SafeConsole(stderr=True, highlight=False, soft_wrap=True)


def fail_input(exc: UserInputError) -> NoReturn:
    lines = exc.lines() if isinstance(exc, MultipleInputErrors) else [exc.line()]
    for line in lines:  # one line each: a newline in a value cannot start a line of its own
        err.print(f"error: {escape_controls(line)}", markup=False)
    if len(lines) > 1:  # every problem was listed in one pass: say so, so none is taken for the last
        err.print(f"{len(lines)} problems; nothing was written", markup=False)
    raise typer.Exit(2)


def guarded(fn: Any) -> Any:
    """Map the exception tree to exit codes: user input 2, other ray-bench errors 1."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserInputError as exc:
            fail_input(exc)
        except RayBenchError as exc:
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(1) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt, SystemExit):
            raise
        except MemoryError:
            err.print("error: out of memory (an input may be far larger than it looks; "
                      "check the files named on the command line)", markup=False)
            raise typer.Exit(1) from None
        except Exception as exc:
            # Never a traceback for the operator: one line, and the traceback on request.
            if os.environ.get("RAY_BENCH_DEBUG"):
                raise
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            err.print(f"error: unexpected {type(exc).__name__}: {first} (a bug in ray-bench: "
                      "set RAY_BENCH_DEBUG=1 for the traceback and report it)", markup=False)
            raise typer.Exit(1) from None
    return wrapper


def _version(value: bool) -> None:
    if value:
        out.print(f"ray-bench {__version__}", markup=False)
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """Run LLM-agent benchmark suites across many accounts on Ray."""


RunsDir = Annotated[Path, typer.Option("--runs-dir", help="Where run roots are created.")]


@app.command()
@guarded
def plan(
    suite: Annotated[Path, typer.Option("--suite", help="Suite YAML.")],
    accounts: Annotated[Path, typer.Option("--accounts", help="Accounts YAML.")],
    selection_file: Annotated[Path | None, typer.Option("--selection-file",
                                                        help=f"Tasks to select: {SELECTION_SHAPES}.")] = None,
    reps: Annotated[int | None, typer.Option("--reps", min=1, help="Repetitions (default: the suite's).")] = None,
    baseline_only: Annotated[bool, typer.Option("--baseline-only", help="Gap-fill the baseline arm only.")] = False,
    full_only: Annotated[bool, typer.Option("--full-only", help="Gap-fill the variant arm(s) only.")] = False,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Run id (default: suite-timestamp).")] = None,
    runs: Annotated[list[Path] | None, typer.Option("--runs", help="Run roots holding counterpart rows "
                                                     "(pairing guard of one-arm plans).")] = None,
    parallel: Annotated[int | None, typer.Option("--parallel", min=1, help="Cap parallelism.")] = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="Only this task (repeatable): a quick "
                                                   "trial without a selection file.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N tasks (by id) of "
                                              "what is selected.")] = None,
    history: Annotated[list[Path] | None, typer.Option("--history", help="Run roots (or a directory of them) "
                                                       "whose durations order the cells, longest first, "
                                                       "whose recorded costs price the receipt's estimate "
                                                       "(dollar windows, budgets, spend limit) and whose "
                                                       "paired rewards give the receipt's power (default: the "
                                                       "runs a gap-fill selection tops up).")] = None,
    force_build: Annotated[bool, typer.Option("--force-build", help="Build each task's Dockerfile even "
                                              "where task.toml names a prebuilt docker_image.")] = False,
    skip_unsupported: Annotated[bool, typer.Option("--skip-unsupported", help="Leave out the tasks the "
                                                   "backend cannot run (listed in the receipt) instead "
                                                   "of refusing the plan.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Refuse the plan where execute would trip (an "
                                         "absent image, an agent CLI not installed here, a probe host not "
                                         "reachable) instead of warning in the receipt.")] = False,
    runs_dir: RunsDir = Path("runs"),
) -> None:
    """Compile a model-free plan and its receipt; print the plan identity."""
    from ray_bench.api import plan_run
    from ray_bench.plan.compile import ArmFilter
    from ray_bench.runroot import RunPaths

    if baseline_only and full_only:
        raise UserInputError("--baseline-only and --full-only exclude each other", where="plan",
                             fix="pick one, or neither for a paired plan")
    arms: ArmFilter = "baseline-only" if baseline_only else "full-only" if full_only else "all"
    result = plan_run(suite=suite, accounts=accounts, runs_dir=runs_dir, run_id=run_id, selection=selection_file,
                      reps=reps, arms=arms, parallel=parallel, counterpart_runs=runs or [],
                      task_ids=tuple(task or ()), limit=limit, force_build=force_build,
                      skip_unsupported=skip_unsupported, history_runs=history, strict=strict)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False)
    paths = RunPaths(result.run_root)
    err.print(f"planned {result.cells} cells -> {paths.plan} (receipt: {paths.receipt})", markup=False)
    out.print(result.identity, markup=False)


@app.command()
@guarded
def execute(
    plan_path: Annotated[Path, typer.Option("--plan", help="runs/ID/launch-plan.json")],
    confirm: Annotated[str | None, typer.Option("--confirm", help="The exact plan identity, sha256:...")] = None,
    address: Annotated[str | None, typer.Option("--address", help="Join this Ray cluster "
                                                "(default: start a local Ray instance).")] = None,
    parallel: Annotated[int | None, typer.Option("--parallel", min=1, help="Cap parallelism further.")] = None,
    runners_per_node: Annotated[int, typer.Option(
        "--runners-per-node", min=1, max=64, help="Cell runner processes per Ray node.")] = DEFAULT_RUNNERS_PER_NODE,
    hypothesis: Annotated[str | None, typer.Option("--hypothesis", help="What changed (recorded in the "
                                                   "ledger): each open recovery circuit sends one probe cell on it "
                                                   "and reopens only if that cell gives a valid row.")] = None,
    clear_halt: Annotated[Path | None, typer.Option("--clear-halt", help="runs/ID/resource-halt.json to "
                                                    "archive before resuming.")] = None,
    clearance_reason: Annotated[str | None, typer.Option("--clearance-reason", help="Why it is safe to "
                                                         "go on (recorded with the archived halt).")] = None,
    metrics_host: Annotated[str, typer.Option("--metrics-host", help="Exporter address.")] = "127.0.0.1",
    metrics_port: Annotated[int, typer.Option("--metrics-port", help="Exporter port (0: any free).")] = 0,
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Do not export metrics.")] = False,
    state_root: Annotated[Path | None, typer.Option("--state-root", help="Where the file_sd target is "
                                                    "written (default $RAY_BENCH_STATE_ROOT or ~/.ray-bench).")] = None,
    deadline: Annotated[str | None, typer.Option("--deadline", help="When the run must finish: an ISO "
                                                 "time or a duration like 36h; gives a required pace.")] = None,
    metrics_linger: Annotated[str, typer.Option("--metrics-linger", envvar="RAY_BENCH_METRICS_LINGER",
                                                help="At most how long a finished run's target keeps "
                                                "serving its final figures: it ends once Prometheus has "
                                                "scraped them (0: withdraw at once).")]
    = "15m",
    metrics_final_scrape: Annotated[str, typer.Option(
        "--metrics-final-scrape", envvar="RAY_BENCH_METRICS_FINAL_SCRAPE",
        help="With --metrics-linger 0: how long to wait at the end for a scrape of the final figures "
        "(at least two scrape intervals; 0: do not wait).")] = "30s",
    artifacts: Annotated[str, typer.Option(
        "--artifacts", help="Where attempt directories go: auto (the run root; nodes that do not see it "
        "send them back through Ray), ray (always through Ray), or a store: an absolute path or "
        "s3://bucket/prefix (credentials from each node's environment).")] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the final line.")] = False,
) -> None:
    """Execute a confirmed plan (or resume it: finished cells are never run again)."""
    from ray_bench.api import MetricsSettings, execute_run, parse_deadline, parse_duration
    from ray_bench.cli.progress import ConsoleProgress
    from ray_bench.scheduler.driver import RunOptions
    from ray_bench.scheduler.signals import SignalStop

    deadline_ts = parse_deadline(deadline) if deadline else None
    linger = parse_duration(metrics_linger, "--metrics-linger")
    final_scrape = parse_duration(metrics_final_scrape, "--metrics-final-scrape")
    options = RunOptions(address=address, parallel=parallel, hypothesis=hypothesis, deadline=deadline_ts,
                         runners_per_node=runners_per_node, state_root=state_root, artifacts=artifacts)
    metrics = None if no_metrics else MetricsSettings(
        host=metrics_host, port=metrics_port, state_root=state_root or default_state_root(),
        # Without a linger, wait (by default two 15 s scrape intervals) so the final state is scraped.
        deadline=deadline_ts, linger_sec=linger, final_scrape_sec=0.0 if linger else final_scrape)
    outcome = execute_run(plan_path=plan_path, confirm=confirm, options=options,
                          observer=ConsoleProgress(err, quiet=quiet), clear_halt=clear_halt,
                          clearance_reason=clearance_reason, metrics=metrics,
                          on_metrics=lambda e: err.print(f"metrics: {e.url} (target {e.target_file})",
                                                         markup=False),
                          say=None if quiet else (lambda line: err.print(line, markup=False)),
                          signals=SignalStop(say=lambda line: err.print(line, markup=False)))
    c = outcome.counts
    line = (f"run {outcome.run_id}: {c['valid']} valid, {c['failed']} failed, {c['pending']} pending "
            f"in {outcome.wall_sec:.1f}s")
    if outcome.stopped == "paused":
        line += f"; paused (resume: {outcome.detail.split('resume action: ', 1)[-1]})"
    elif outcome.stopped:
        line += f"; stopped: {outcome.detail}"
    elif outcome.detail:
        line += f"; {outcome.detail}"
    out.print(line, markup=False)
    raise typer.Exit(outcome.exit_code)


@app.command()
@guarded
def status(
    run_root: Annotated[Path, typer.Argument(help="runs/ID")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    watch: Annotated[bool, typer.Option(
        "--watch", help="A live view until the run ends (a run not yet started or resumed is waited for).")] = False,
    state_root: Annotated[Path | None, typer.Option(
        "--state-root", help="Where the accounts' durable state is (default $RAY_BENCH_STATE_ROOT or "
        "~/.ray-bench).")] = None,
) -> None:
    """Where a run is, its pace, and the next command that would do something.

    The state (planned, running, paused, stopped, finished), the cell counts, the pace, the accounts'
    durable state (cooling until, disabled, spend, window use).
    """
    if watch:
        from ray_bench.cli.watch import watch_run

        code = watch_run(run_root, state_root=state_root)
        if code:
            raise typer.Exit(code)
        return
    from ray_bench.status.read import read_status
    from ray_bench.status.text import status_lines

    data = read_status(run_root, accounts=True, state_root=state_root)
    if as_json:
        out.print(strict_json(data.to_json(), indent=2, default=str), markup=False)
        return
    for line in status_lines(data):
        out.print(line, markup=False)


@app.command()
@guarded
def pause(
    run_root: Annotated[Path, typer.Argument(help="runs/ID")],
    now: Annotated[bool, typer.Option("--now", help="Cancel running cells (recorded as cancelled).")] = False,
    reason: Annotated[str, typer.Option("--reason", help="Why, for the ledger.")] = "",
) -> None:
    """Stop launching; running cells finish (or are cancelled with --now)."""
    from ray_bench.commands.pause import pause_run

    pause_run(run_root, now=now, reason=reason)
    out.print("pause requested: " + ("running cells are cancelled" if now else "running cells finish")
              + f"; `ray-bench status {run_root}` shows when it is paused and how to resume", markup=False)


@app.command()
@guarded
def report(
    run_roots: Annotated[list[Path] | None, typer.Argument(help="runs/ID (or, after --runs, more run roots)")] = None,
    runs: Annotated[list[Path] | None, typer.Option("--runs", help="A lineage: --runs runs/A runs/B ... "
                                                    "(one paired report over exactly these run roots).")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where a lineage report is written.")] = None,
) -> None:
    """Write the paired report of a run (or of a lineage of runs) from its ledger.

    report.md, .csv, .parquet and .html, rebuilt from the accepted rows of the run and its reruns,
    or with --runs of the named run roots.
    """
    from ray_bench.reports.build import render_markdown, write_lineage_report, write_report

    if runs:
        if out_dir is None:
            raise UserInputError("a lineage report needs --out", where="report --runs",
                                 fix="pass --out DIR (reports are not written into one of the runs)")
        roots = [*runs, *(run_roots or [])]
        result = write_lineage_report(roots, out_dir)
        target = out_dir
    else:
        if not run_roots or len(run_roots) != 1 or out_dir is not None:
            raise UserInputError("name one run root, or a lineage with --runs A B ... --out DIR",
                                 where="report", fix="ray-bench report runs/ID")
        target = run_roots[0]
        result = write_report(target)
    out.print(render_markdown(result), markup=False)
    err.print("wrote " + ", ".join(str(p) for p in result.files(target).values()), markup=False)


@app.command()
@guarded
def audit(
    run_root: Annotated[Path, typer.Argument(help="runs/ID")],
    cleanup: Annotated[bool, typer.Option("--cleanup", help="Remove what is found.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List (with --cleanup remove) the sandboxes a run left; exit 1 while any remain.

    Every sandbox, volume and network labelled with the run, on every backend.
    """
    from ray_bench.api import audit_run, parse_duration
    from ray_bench.metrics.targets import prune_stale_targets

    # how long the count is served (execute's --metrics-linger default); read before any removal
    linger = parse_duration(os.environ.get("RAY_BENCH_METRICS_LINGER", "15m"), "RAY_BENCH_METRICS_LINGER")
    result = audit_run(run_root, cleanup=cleanup)
    if not result.errors and linger > 0:  # a backend that did not answer leaves the count unknown
        from ray_bench.metrics.linger import publish_audit

        # Served for a while beside the run's target, so RayBenchSandboxResidue follows this audit.
        publish_audit(default_state_root(), result.run_id, residue=len(result.residue), at=time.time(),
                      linger_sec=linger)
    # this run's dead target goes at once (its operator is on it); others' once DriverDown could fire
    for gone in prune_stale_targets(default_state_root(), over=(result.run_id,)):
        err.print(f"removed the metrics target of run {gone}: its driver is gone", markup=False)
    if as_json:
        out.print(strict_json(result.to_json(), indent=2), markup=False)
    else:
        for line in result.lines():
            out.print(line, markup=False)
    raise typer.Exit(0 if result.clean else 1)


@app.command()
@guarded
def validate(files: Annotated[list[Path] | None, typer.Argument(help="Suite, accounts, selection or task dirs.")]
             = None,
             explain: Annotated[str | None, typer.Option("--explain", help="What a task.toml key means "
                                                         "(e.g. environment.memory_mb), and the keys "
                                                         "below it.")] = None) -> None:
    """Check config files, selection files and task directories without planning."""
    from ray_bench.validate import validate_paths

    if explain is not None:
        for line in explain_key(explain):
            out.print(line, markup=False)
        if not files:
            return
    if not files:
        raise UserInputError("nothing to validate", where="validate",
                             fix="name suite, accounts or selection files or task directories, or --explain KEY")
    problems: list[UserInputError] = []
    for checked in validate_paths(files):
        if checked.tally is not None:
            out.print(checked.tally, markup=False)
        elif checked.error is None:
            out.print(f"ok: {checked.path} ({checked.kind})", markup=False)
        else:
            error = checked.error
            problems.extend(error.errors if isinstance(error, MultipleInputErrors) else [error])
        for warning in checked.warnings:
            out.print(f"warning: {checked.path}: {warning}", markup=False)
    if problems:
        fail_input(MultipleInputErrors(problems) if len(problems) > 1 else problems[0])


@app.command()
@guarded
def quickstart(
    workdir: Annotated[Path, typer.Option("--workdir", help="Where to copy the example and write runs.")]
    = Path("ray-bench-quickstart"),
    backend: Annotated[str, typer.Option("--backend", help="local, docker or daytona.")] = "local",
    address: Annotated[str | None, typer.Option("--address", help="Run it on this Ray cluster "
                                                "(default: start a local Ray instance).")] = None,
) -> None:
    """The whole path on a bundled example: plan, confirm, execute, report."""
    from ray_bench.cli.quickstart import run_quickstart

    raise typer.Exit(run_quickstart(workdir, backend=backend, console=out, address=address))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
