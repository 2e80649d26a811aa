"""``ray-bench ledger rebuild RUN``: a ledger recreated from the attempt directories.

A run root whose ``ledger.sqlite`` was removed (a clean-up of "temp files", a partial copy)
still holds the evidence: every attempt directory's ``result.json`` is the runner's terminal
summary, the very record the driver classified into the ledger. Rebuilding classifies each
one again with the same classifier (:func:`ray_bench.evidence.classify.classify`), so a
finished cell keeps its row and the next ``execute`` resumes instead of starting over.

What cannot come back is what only the ledger held: events (pauses, stops, hypotheses, open
circuits, node halts, exclusions, promotions, settlements, the executions' options), and
attempts whose directory is gone (artifacts in a store: ``--artifacts s3://...``). An
attempt directory without ``result.json`` was in flight when its driver ended: it is recorded
as started only, so the next ``execute`` marks it stale and removes its sandboxes by label.
Its account is not known (recorded as an empty name, never as some account).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ray_bench.config.bounded import load_state_json
from ray_bench.errors import UserInputError
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.classify import Verdict, classify
from ray_bench.ledger.cost import attempt_cost
from ray_bench.ledger.events import LedgerRebuilt
from ray_bench.ledger.store import (
    REGRADE,
    RUN,
    STALE_CLASS,
    STALE_FINGERPRINT,
    STALE_STATUS,
    AttemptRow,
    Ledger,
    stale_summary,
)
from ray_bench.models.attempt import AttemptSummary
from ray_bench.plan.store import load_plan_file
from ray_bench.runroot import RESULT_FILE, RunPaths, attempt_dir_key, attempt_id_of, parse_attempt_dir

#: A result.json is a few kB; a cap keeps a damaged one from costing memory.
MAX_RESULT_BYTES = 16 * 1024 * 1024


@dataclass
class RebuildResult:
    ledger: Path
    finished: int = 0
    valid: int = 0
    open: int = 0  # in flight when the driver ended: stale on the next execute
    stale: int = 0  # superseded by a later attempt of its cell: stale, as the resume recorded it
    skipped: list[str] = field(default_factory=list)  # "<dir>: why"

    def line(self) -> str:
        skipped = f", {len(self.skipped)} directories skipped" if self.skipped else ""
        stale = f", {self.stale} stale (superseded by a later attempt)" if self.stale else ""
        return (f"rebuilt {self.ledger}: {self.finished} finished attempts ({self.valid} valid){stale}, "
                f"{self.open} left in flight (stale on the next execute){skipped}")


def rebuild_ledger(run_root: Path, catalog: Catalog | None = None) -> RebuildResult:
    """Recreate the ledger of ``run_root`` from its attempt directories. Refuses (exit 2,
    nothing written) a run root that has a ledger, or no attempt directory."""
    paths = RunPaths(run_root)
    plan, identity = load_plan_file(paths.plan)
    for existing in paths.ledger_files():
        if existing.exists():
            raise UserInputError(f"{existing} exists: the ledger is never written over", where=str(run_root),
                                 fix="nothing to rebuild (move a damaged ledger's files aside first)")
    dirs = paths.attempt_dirs()
    if not dirs:
        raise UserInputError("no attempt directories to rebuild a ledger from", where=str(paths.attempts),
                             fix=f"a run that never started needs no ledger: `ray-bench execute --plan {paths.plan}`")
    cells = {c.id: c for c in plan.cells}  # a directory named before issue 56: by attempt id
    cells.update({attempt_dir_key(c.task, c.arm, c.rep, c.id): c for c in plan.cells})
    tasks = {t.id: t for t in plan.tasks}
    catalog = catalog or Catalog.default()
    result = RebuildResult(paths.ledger)
    records: list[tuple[AttemptRow, AttemptSummary | None]] = []
    for path in dirs:
        found = parse_attempt_dir(path.name)
        if found is None or found[0] not in cells:
            result.skipped.append(f"{path.name}: not an attempt of this plan's cells")
            continue
        cell, seq = cells[found[0]], found[1]
        attempt_id = attempt_id_of(cell.id, seq)
        summary = _summary(path)
        if summary is not None and summary.attempt_id not in ("", attempt_id):
            result.skipped.append(f"{path.name}: its result.json is of attempt {summary.attempt_id}")
            continue
        started = summary.started_at if summary is not None and summary.started_at else path.stat().st_mtime
        records.append((AttemptRow(
            attempt_id=attempt_id, cell_id=cell.id, task=cell.task,
            task_checksum=(summary.regrade_task_sha256 if summary is not None and summary.regrade_task_sha256
                           else tasks[cell.task].checksum),
            arm=cell.arm, rep=cell.rep, seq=seq, account=summary.account if summary else "",
            backend=cell.backend, epoch=identity, preflight=cell.id in plan.preflight, started_at=started,
            kind=REGRADE if summary is not None and summary.regrade_of else RUN,
            source_attempt=summary.regrade_of if summary is not None else None), summary))
    superseded = _superseded(records, catalog)
    ledger = Ledger.create(run_root, run_id=plan.run_id, plan_identity=identity)
    done = False
    try:
        for row, summary in sorted(records, key=lambda r: (r[0].started_at, r[0].attempt_id)):
            ledger.restore_attempt(row)
            if row.attempt_id in superseded:  # what the resume that superseded it recorded
                ledger.finish_attempt(row.attempt_id, status=STALE_STATUS, valid=False, reward=None,
                                      failure_class=STALE_CLASS, fingerprint=STALE_FINGERPRINT, counts=False,
                                      cost_usd=None, summary=stale_summary(row, None), now=row.started_at)
                result.stale += 1
                continue
            if summary is None:
                result.open += 1
                continue
            finished = summary.finished_at or row.started_at
            if summary.cancelled:
                ledger.finish_attempt(row.attempt_id, status="cancelled", valid=False, reward=None,
                                      failure_class=None, fingerprint=None, counts=False,
                                      cost_usd=attempt_cost(summary), summary=summary, now=finished)
            else:
                # A regrade's verdict was made with its source's agent facts (ray_bench.commands.regrade)
                # and written into its result.json; a regrade without one is not evidence.
                verdict = (_regrade_verdict(summary) if row.kind == REGRADE else classify(summary, catalog))
                ledger.finish_attempt(
                    row.attempt_id, status="finished", valid=verdict.valid, reward=summary.reward,
                    failure_class=verdict.failure_class, fingerprint=verdict.fingerprint,
                    counts=verdict.counts and row.kind == RUN, cost_usd=attempt_cost(summary),
                    summary=summary.model_copy(update={"verdict": verdict.record()}), now=finished)
                result.valid += verdict.valid
            result.finished += 1
        ledger.append(LedgerRebuilt(finished=result.finished, valid=result.valid, open=result.open,
                                    skipped=result.skipped[:50]))
        done = True
    finally:
        ledger.close()
        if not done:  # a half-rebuilt ledger would pass for the whole record
            for made in paths.ledger_files():
                made.unlink(missing_ok=True)
    return result


def _superseded(records: list[tuple[AttemptRow, AttemptSummary | None]], catalog: Catalog) -> set[str]:
    """Attempts their driver gave up on: a later attempt of the cell exists, and this one either
    left no result.json, or classifies valid (a driver never starts a cell that has a valid row
    again), or wrote its result.json after the later one started (its runner outlived a killed
    driver). The resume that started the later attempt had recorded it ``stale``, of unknown
    cost (ray_bench.ledger.store.stale_summary); read as finished, the rebuild counted such
    attempts as valid rows and their costs as known (issue 58: 28 valid rows for 24 cells)."""
    later: dict[str, float] = {}  # cell -> the start of its latest attempt
    out = set()
    runs = sorted((r for r in records if r[0].kind == RUN), key=lambda r: r[0].seq, reverse=True)
    for row, summary in runs:
        next_start = later.get(row.cell_id)
        later[row.cell_id] = row.started_at if next_start is None else min(row.started_at, next_start)
        if next_start is None or (summary is not None and summary.cancelled):
            continue
        if summary is None or (summary.finished_at or 0.0) > next_start or classify(summary, catalog).valid:
            out.add(row.attempt_id)
    return out


def _regrade_verdict(summary: AttemptSummary) -> Verdict:
    record = summary.verdict
    if record is None:
        return Verdict(False, "executor", "regrade-no-verdict", "a regrade's result.json has no verdict", "none")
    return Verdict(record.valid, record.failure_class, record.fingerprint, record.message, "none",
                   flags=tuple(record.flags))


def _summary(attempt_dir: Path) -> AttemptSummary | None:
    """The runner's terminal summary, or None when it never wrote one (or it is unreadable)."""
    try:
        data = load_state_json(attempt_dir / RESULT_FILE, MAX_RESULT_BYTES)
    except (OSError, ValueError):
        return None
    return AttemptSummary.parse(data) if isinstance(data, dict) else None
