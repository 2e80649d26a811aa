"""``ray-bench regrade RUN``: run a task's changed verifier on the workspaces its agents left,
without paying for the agents again.

What Harbor's ``harbor job regrade`` does (the recorded agent execution held fixed, only the
verdict recomputed in a fresh verifier environment, source trials never modified), chosen per
planned cell: **reuse** (the task is as it was when the row was graded: nothing to do),
**regrade** (only the task's ``tests/`` changed and the row kept its workspace: run the new
verifier on it) or **rerun** (anything else changed, or nothing was kept: only the agent running again can say,
so a new plan is needed: ``ray-bench gaps`` or ``plan``). The parts' checksums the row ran
with are in its summary (``workspace.task_parts``); the task as it is now is read from its
directory.

A regrade is a new attempt of the same cell (``attempts.kind = regrade``, ``source_attempt``
naming the graded attempt, ``cost_usd`` 0: no model ran) in a fresh sandbox of the cell's backend,
through the runner's own verifier phase (:func:`ray_bench.cells.runner.run_attempt` with a
:class:`~ray_bench.cells.workspace.RegradeSource`). Its verdict is the classifier's on the source's
agent facts with the new verifier's; the source row is never touched. The accepted-row rule
(:func:`ray_bench.ledger.rows.accepted_rows`) gives the row its latest valid regrade's reward.

Refused (bad input, nothing written): a run that is not finished, one a live driver holds, an
official run, an unknown task name, a selected task that changed beyond its ``tests/`` (its
instruction, environment, solution or config: a rerun's case, not a regrade's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ray_bench.cells.workspace import RegradeSource, changed_parts, file_sha256, task_parts
from ray_bench.config.tasks import task_checksum
from ray_bench.errors import RayBenchError, UserInputError
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.classify import classify
from ray_bench.evidence.decisions import refuse_official
from ray_bench.files import write_whole
from ray_bench.ledger.events import Regraded
from ray_bench.ledger.rows import accepted_rows
from ray_bench.ledger.store import REGRADE, AttemptRow, Ledger
from ray_bench.models.attempt import ArtifactPlace, AttemptSummary
from ray_bench.models.plan import Plan, PlanCell, PlanTask
from ray_bench.plan.store import load_plan_file
from ray_bench.runroot import RESULT_FILE, RunPaths, hold_lock, lock_holder
from ray_bench.sandboxes import SandboxBackend, make_backend

Action = Literal["reuse", "regrade", "rerun"]


@dataclass(frozen=True)
class CellChoice:
    """What regrade does with one planned cell, and why."""

    cell: PlanCell
    action: Action
    reason: str
    row: AttemptRow | None = None
    tests_sha256: str = ""
    task_sha256: str = ""
    #: The task's parts other than tests/ that changed since the row was graded (a rerun's cause).
    beyond_tests: tuple[str, ...] = ()


@dataclass
class RegradeResult:
    run_root: Path
    choices: list[CellChoice]
    #: source attempt id -> the regrade attempt's row (after it finished)
    regraded: dict[str, AttemptRow] = field(default_factory=dict)

    def of(self, action: Action) -> list[CellChoice]:
        return [c for c in self.choices if c.action == action]


def choose(run_root: Path, tasks: list[str] | None = None) -> tuple[Plan, str, list[CellChoice]]:
    """Each planned cell's reuse / regrade / rerun (``tasks``: only those). Bad input raises."""
    paths = RunPaths(run_root)
    if not paths.plan.is_file():
        raise UserInputError("no plan in this run root", where=str(run_root), fix="pass runs/ID")
    plan, identity = load_plan_file(paths.plan)
    _refuse_unfinished(run_root)
    refuse_official(run_root, "regraded (its report would change)")
    known = {t.id for t in plan.tasks}
    unknown = sorted(set(tasks or []) - known)
    if unknown:
        raise UserInputError(f"no task {', '.join(unknown)} in this run's plan", where="--tasks",
                             fix=f"name tasks of the plan: {', '.join(sorted(known)[:8])}")
    with Ledger.reading(run_root) as ledger:
        attempts = ledger.attempts()
        rows = accepted_rows(attempts, {identity})
        summaries = {a: ledger.summary(a) for a in {r.attempt_id for r in rows.values()}}
    by_id = {t.id: t for t in plan.tasks}
    now: dict[str, tuple[str, dict[str, str]] | str] = {}
    choices: list[CellChoice] = []
    for cell in plan.cells:
        if tasks and cell.task not in tasks:
            continue
        task = by_id[cell.task]
        if cell.task not in now:
            now[cell.task] = _task_now(task)
        choices.append(_choice(cell, task, rows.get(cell.id), summaries, now[cell.task]))
    return plan, identity, choices


def _task_now(task: PlanTask) -> tuple[str, dict[str, str]] | str:
    """The task's checksum and parts as its directory is now, or why they cannot be read."""
    try:
        return task_checksum(Path(task.path)), task_parts(Path(task.path))
    except (OSError, RayBenchError) as exc:
        return f"its directory cannot be read now ({str(exc)[:120]})"


def _choice(cell: PlanCell, task: PlanTask, row: AttemptRow | None, summaries: dict[str, AttemptSummary | None],
            now: tuple[str, dict[str, str]] | str) -> CellChoice:
    if row is None:
        return CellChoice(cell, "rerun", "no valid row to regrade: `ray-bench rerun RUN --failed` plans it")
    if isinstance(now, str):
        return CellChoice(cell, "rerun", now, row)
    checksum, parts = now
    if checksum == row.task_checksum:
        return CellChoice(cell, "reuse", "the task is as it was graded"
                          + (f" (by regrade {row.regraded_by})" if row.regraded_by else ""), row)
    summary = summaries.get(row.attempt_id)
    workspace = summary.workspace if summary is not None else None
    if workspace is None or not workspace.task_parts:
        return CellChoice(cell, "rerun", "the task changed and its row kept no workspace (the arm's "
                          "keep_workspace was off): plan it again with `ray-bench gaps` or `plan`", row)
    changed = changed_parts(workspace.task_parts, parts)
    others = [p for p in changed if p != "tests"]
    if others:
        return CellChoice(cell, "rerun", f"the task's {', '.join(others)} changed, not only its tests: the agent "
                          "must run again (`ray-bench gaps` or `plan` a new run)", row, beyond_tests=tuple(others))
    if not workspace.kept or not workspace.file:
        return CellChoice(cell, "rerun", f"its tests changed but its workspace was not kept ({workspace.reason}, "
                          f"{workspace.workspace_bytes or 0:,} bytes): plan it again", row)
    if task.config.steps:
        return CellChoice(cell, "rerun", "a multi-step task is graded per step: regrade does not run those", row)
    return CellChoice(cell, "regrade", f"only tests/ changed; regrade the workspace of {row.attempt_id}", row,
                      tests_sha256=parts.get("tests", ""), task_sha256=checksum)


def _refuse_unfinished(run_root: Path) -> None:
    from ray_bench.status.read import read_status

    paths = RunPaths(run_root)
    if lock_holder(run_root).held:
        raise UserInputError("a live `ray-bench execute` holds this run", where=str(run_root),
                             fix="let it finish (or `ray-bench pause` it), then regrade")
    if not paths.ledger.is_file():
        raise UserInputError("the run has not started, so there is nothing to regrade", where=str(run_root),
                             fix="execute the plan first (its receipt names the command)")
    state = read_status(run_root).state
    if state != "finished":
        raise UserInputError(f"the run is {state}, not finished: its rows may still change", where=str(run_root),
                             fix=f"let it finish (ray-bench status {run_root}), then regrade")


def regrade_run(run_root: Path, tasks: list[str] | None = None, *, catalog: Catalog | None = None,
                backend_of: Callable[[str, dict[str, object]], SandboxBackend] | None = None) -> RegradeResult:
    """Regrade every cell :func:`choose` says to, each as a new attempt; return what was done."""
    plan, identity, choices = choose(run_root, tasks)
    _refuse_beyond_tests(run_root, choices)
    result = RegradeResult(run_root, choices)
    todo = [c for c in choices if c.action == "regrade"]
    if not todo:
        return result
    with hold_lock(run_root):  # no execute starts while the ledger takes regrades
        ledger = Ledger.create(run_root, run_id=plan.run_id, plan_identity=identity)
        try:
            asyncio.run(_regrade_all(ledger, plan, identity, result, todo, catalog or Catalog.default(),
                                     backend_of or _make))
        finally:
            ledger.close()
    return result


def _refuse_beyond_tests(run_root: Path, choices: list[CellChoice]) -> None:
    """A task whose instruction, environment, solution or config changed needs its agent run
    again: asking to regrade it is bad input, refused before anything is graded (so a run is never
    left half regraded by a command that could not do what it was asked)."""
    beyond = [c for c in choices if c.beyond_tests]
    if not beyond:
        return
    tasks = sorted({c.cell.task for c in beyond})
    parts = sorted({p for c in beyond for p in c.beyond_tests})
    others = sorted({c.cell.task for c in choices if c.action == "regrade"})
    raise UserInputError(
        f"{len(beyond)} cell{'s' if len(beyond) != 1 else ''} of {', '.join(tasks)} changed beyond tests/ "
        f"({', '.join(parts)}): they need a rerun, not a regrade", where=str(run_root),
        fix=(f"regrade the rest with --tasks {','.join(others)}; " if others else "")
        + "plan the changed tasks again (`ray-bench gaps` or `plan`); `--dry-run` lists every cell")


def _make(name: str, options: dict[str, object]) -> SandboxBackend:
    return make_backend(name, **options)


async def _regrade_all(ledger: Ledger, plan: Plan, identity: str, result: RegradeResult, todo: list[CellChoice],
                       catalog: Catalog, make: Callable[[str, dict[str, object]], SandboxBackend]) -> None:
    paths = RunPaths(result.run_root)
    backends: dict[str, SandboxBackend] = {}
    try:
        for choice in todo:
            assert choice.row is not None
            source = ledger.summary(choice.row.attempt_id) or AttemptSummary()
            workspace = source.workspace
            tarball = paths.attempt(choice.row) / (workspace.file or "-") if workspace else None
            if workspace is None or tarball is None or not _intact(tarball, workspace.sha256):
                result.choices[result.choices.index(choice)] = CellChoice(
                    choice.cell, "rerun", f"the kept workspace of {choice.row.attempt_id} is missing or does not "
                    "match the sha256 its summary recorded: plan it again", choice.row)
                continue
            backend_name = choice.cell.backend
            if backend_name not in backends:
                cfg = plan.backends.get(backend_name)
                backends[backend_name] = make(backend_name, dict(cfg.options) if cfg else {})
            where = RegradeSource(choice.row.attempt_id, tarball, workspace.workdir)
            result.regraded[choice.row.attempt_id] = await _regrade_one(
                ledger, plan, identity, paths, choice, backends[backend_name], catalog, source, where)
    finally:
        for backend in backends.values():
            await backend.close()


async def _regrade_one(ledger: Ledger, plan: Plan, identity: str, paths: RunPaths, choice: CellChoice,
                       backend: SandboxBackend, catalog: Catalog, source: AttemptSummary,
                       where: RegradeSource) -> AttemptRow:
    from ray_bench.cells.runner import run_attempt
    from ray_bench.plan.attempts import AttemptSpecs

    assert choice.row is not None
    src, cell = choice.row, choice.cell
    # The graded row's account, for the spec's shape only: a regrade resolves no credentials.
    account = next((a for a in plan.accounts if a.name == src.account), plan.accounts[0])
    row = ledger.start_attempt(cell_id=cell.id, task=cell.task, task_checksum=choice.task_sha256, arm=cell.arm,
                               rep=cell.rep, account=account.name, backend=cell.backend, epoch=identity,
                               preflight=False, kind=REGRADE, source_attempt=src.attempt_id,
                               taken=lambda seq: paths.attempt_of(cell.task, cell.arm, cell.rep, seq, cell.id).exists())
    attempt_dir = paths.attempt(row)
    spec = AttemptSpecs(plan, paths).of(row, cell)
    summary = await run_attempt(spec, backend, ArtifactPlace(via="run-root", uri=str(attempt_dir)), where)
    # Judged as the trial it stands for: the source's agent run, graded by the new verifier.
    judged = summary.model_copy(update={"agent": source.agent, "usage": source.usage,
                                        "agent_error": source.agent_error, "agent_kind": source.agent_kind,
                                        "model": source.model})
    verdict = classify(judged, catalog)
    summary = summary.model_copy(update={"verdict": verdict.record(), "regrade_task_sha256": choice.task_sha256})
    # rebuild reads the verdict from here (a regrade has no agent to classify); rendered as the runner renders it
    write_whole(attempt_dir / RESULT_FILE, summary.result_text())
    ledger.finish_attempt(row.attempt_id, status="finished", valid=verdict.valid, reward=summary.reward,
                          failure_class=verdict.failure_class, fingerprint=verdict.fingerprint, counts=False,
                          cost_usd=0.0, summary=summary)
    ledger.append(Regraded(source=src.attempt_id, attempt=row.attempt_id, task=cell.task, arm=cell.arm, rep=cell.rep,
                           valid=verdict.valid, reward_before=src.reward, reward_after=summary.reward,
                           tests_sha256=choice.tests_sha256), attempt_id=row.attempt_id, cell_id=cell.id)
    return next(a for a in ledger.attempts() if a.attempt_id == row.attempt_id)


def _intact(tarball: Path, sha256: str | None) -> bool:
    """The kept workspace is there and is the one its summary hashed (never grade another)."""
    return tarball.is_file() and sha256 is not None and file_sha256(tarball) == sha256

