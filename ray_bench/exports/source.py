"""What an export reads: finished run roots, grouped by suite, one record per cell.

Both exporters (:mod:`ray_bench.exports.harbor`, :mod:`ray_bench.exports.inspect`) count what the
report counts, because they read the same :class:`~ray_bench.evidence.rows.Evidence`: a cell's
*shown* attempt is its accepted row when it has one, else its last attempt (invalid, and marked so
that a peer's viewer leaves it out of its mean); every attempt before the shown one is a retry.
Excluded cells are exported with the operator's decision and count nowhere.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ray_bench.errors import UserInputError
from ray_bench.evidence.decisions import Exclusion
from ray_bench.evidence.family import run_family
from ray_bench.evidence.rows import Evidence, build_evidence, default_cohort, load_epoch
from ray_bench.ledger.store import READ_SCHEMAS, SCHEMA_VERSION, AttemptRow, Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import Plan
from ray_bench.runroot import RunPaths, refuse_output_in_run_root
from ray_bench.status.read import read_status


@dataclass(frozen=True)
class CellExport:
    """One planned cell as an export shows it."""

    cell_id: str
    task: str
    arm: str
    rep: int
    shown: AttemptRow | None  # None: no attempt ever ran (never in a finished run, kept for safety)
    summary: AttemptSummary
    attempt_dir: Path | None
    retries: tuple[AttemptRow, ...]  # the attempts before the shown one, oldest first
    accepted: bool  # the shown attempt is the cell's accepted row: its reward counts
    excluded: Exclusion | None = None
    #: Where the verifier's output is: the shown attempt's directory, or its regrade's.
    verifier_dir: Path | None = None
    #: The summary of every attempt of the cell (retries, the shown one, any other), oldest
    #: first: what the cell spent, as the report and the ledger count it.
    spent: tuple[AttemptSummary, ...] = ()


@dataclass(frozen=True)
class Spend:
    """Tokens and cost summed over attempts, as the report sums them (:func:`ray_bench.reports.
    cost.attempt_usage`, one reading of a usage record): known counts only (None when none is
    known), cache reads and writes apart from fresh input; ``unknown`` attempts of unknown cost
    are left out of ``cost_usd``, which is then a lower bound."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_usd: float | None = None
    unknown: int = 0

    @property
    def prompt_tokens(self) -> int | None:
        """Every input token, fresh or cached (read or written): Harbor's ``n_input_tokens``."""
        counts = [c for c in (self.input_tokens, self.cache_read_tokens, self.cache_write_tokens) if c is not None]
        return sum(counts) if counts else None


def spend_of(summaries: Iterable[AttemptSummary]) -> Spend:
    """What these attempts spent, each read as the report reads it."""
    from ray_bench.reports.cost import TOKEN_COLUMNS, attempt_usage

    sums: dict[str, int | None] = dict.fromkeys(TOKEN_COLUMNS)
    cost: float | None = None
    unknown = 0
    for summary in summaries:
        usage = attempt_usage(summary, None)
        for column in TOKEN_COLUMNS:
            if usage[column] is not None:
                sums[column] = (sums[column] or 0) + usage[column]
        if usage["cost_status"] == "unknown":
            unknown += 1
        else:
            cost = (cost or 0.0) + usage["cost_usd"]
    return Spend(sums["input_tokens"], sums["output_tokens"], sums["cache_read_tokens"], sums["cache_write_tokens"],
                 cost, unknown)


@dataclass(frozen=True)
class SuiteExport:
    suite: str
    evidence: Evidence
    plan: Plan  # the first plan of the cohort: arms, tasks, suite
    cells: tuple[CellExport, ...] = field(default_factory=tuple)

    def arm_cells(self, arm: str) -> list[CellExport]:
        return [c for c in self.cells if c.arm == arm]

    def arm_spend(self, arm: str) -> Spend:
        """What the arm's attempts spent, retries included: the ledger's and the report's figure."""
        return spend_of(s for c in self.arm_cells(arm) for s in c.spent)


def export_roots(runs: list[Path]) -> list[Path]:
    """The run roots an export reads: each named run with its reruns (as its report does), in
    order, each once. Bad input: a path that is not a run root, a run that has not finished, a
    ledger of a format this version does not know."""
    if not runs:
        raise UserInputError("no run named", where="RUN", fix="pass runs/ID (one or more)")
    roots: list[Path] = []
    for run in runs:
        for root in run_family(run):
            if root not in roots:
                roots.append(root)
    for root in roots:
        _refuse_unfinished(root)
    return roots


def _refuse_unfinished(root: Path) -> None:
    if not RunPaths(root).ledger.is_file():
        raise UserInputError("the run has not started, so there is nothing to export", where=str(root),
                             fix="execute the plan first (its receipt names the command)")
    with Ledger.reading(root) as ledger:
        schema = ledger.meta().get("schema")
    if schema not in READ_SCHEMAS - {"1"}:  # version 1's costs are read again only by a migration
        raise UserInputError(f"ledger format {schema!r} is not one this version reads ({SCHEMA_VERSION!r})",
                             where=str(RunPaths(root).ledger), fix="export it with the ray-bench that wrote it")
    state = read_status(root).state
    if state != "finished":
        raise UserInputError(f"the run is {state}, not finished: an export of it would be partial",
                             where=str(root), fix=f"let it finish (ray-bench status {root}), then export")


def load_suites(roots: list[Path]) -> list[SuiteExport]:
    """One :class:`SuiteExport` per suite of ``roots``, in the order the suites first appear."""
    epochs = [load_epoch(r) for r in roots]
    suites: list[str] = []
    for epoch in epochs:
        if epoch.plan.suite not in suites:
            suites.append(epoch.plan.suite)
    out: list[SuiteExport] = []
    for suite in suites:
        evidence = build_evidence(epochs, default_cohort(epochs, suite))
        members = [e for e in evidence.epochs if e.identity in evidence.cohort.epochs]
        summaries: dict[str, AttemptSummary] = {}
        dirs: dict[str, Path] = {}
        for epoch in members:
            summaries.update(epoch.summaries())
            dirs.update({a.attempt_id: RunPaths(epoch.run_root).attempt(a) for a in epoch.attempts})
        by_cell: dict[str, list[AttemptRow]] = {}
        every: dict[str, list[AttemptSummary]] = {}
        for attempt in sorted(evidence.attempts(), key=lambda a: (a.started_at, a.epoch, a.attempt_id)):
            every.setdefault(attempt.cell_id, []).append(summaries.get(attempt.attempt_id, AttemptSummary()))
            if attempt.terminal:
                by_cell.setdefault(attempt.cell_id, []).append(attempt)
        cells: list[CellExport] = []
        planned = dict(evidence.planned)
        for epoch in members:  # excluded cells left planned; they are shown with the decision
            for cell in epoch.plan.cells:
                if cell.id in evidence.excluded:
                    planned.setdefault(cell.id, cell)
        for cell in planned.values():
            attempts = by_cell.get(cell.id, [])
            row = evidence.rows.get(cell.id)
            shown = row if row is not None else (attempts[-1] if attempts else None)
            before = tuple(a for a in attempts if shown is not None and a.attempt_id != shown.attempt_id
                           and (a.started_at, a.attempt_id) < (shown.started_at, shown.attempt_id))
            summary = summaries.get(shown.attempt_id, AttemptSummary()) if shown else AttemptSummary()
            verifier_dir = dirs.get(shown.attempt_id) if shown else None
            if row is not None and row.regraded_by:  # the agent's run, graded by its regrade's verifier
                graded = summaries.get(row.regraded_by, AttemptSummary())
                summary = summary.model_copy(update={k: getattr(graded, k) for k in
                                                     ("reward", "rewards", "reward_source", "verifier")})
                verifier_dir = dirs.get(row.regraded_by)
            cells.append(CellExport(
                cell_id=cell.id, task=cell.task, arm=cell.arm, rep=cell.rep, shown=shown, summary=summary,
                attempt_dir=dirs.get(shown.attempt_id) if shown else None, retries=before,
                accepted=row is not None, excluded=evidence.excluded.get(cell.id), verifier_dir=verifier_dir,
                spent=tuple(every.get(cell.id, ()))))
        out.append(SuiteExport(suite, evidence, members[0].plan, tuple(cells)))
    return out


def refuse_out(out: Path) -> None:
    if out.exists() or out.is_symlink():
        raise UserInputError(f"{out} exists and is never written over", where="--out",
                             fix="name a directory that does not exist yet")
    refuse_output_in_run_root(out, "--out")


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A directory beside ``out`` to write into, renamed to ``out`` when the export succeeds and
    removed when it fails: a failed export leaves nothing behind."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.rename(out)


def mean_reward(cells: list[CellExport]) -> float:
    """The report's mean reward of these cells: over accepted rows of cells not excluded."""
    rewards = [c.shown.reward or 0.0 for c in cells if c.accepted and c.excluded is None and c.shown]
    return sum(rewards) / len(rewards) if rewards else float("nan")
