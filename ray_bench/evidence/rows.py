"""Evidence across run roots: epochs, cohorts, accepted rows and the two denominators.

The rules, in the order they apply:

- **Epoch.** An attempt's epoch is the identity of the plan it ran under (``attempts.epoch``).
  A run root holds one plan, so it holds one epoch.
- **Cohort.** A declared set of compatible epochs. The default cohort of a suite is every
  epoch whose plan names that suite. Rows of different epochs are compared cell by cell,
  and a cell id already hashes the task's content checksum, the arm's resolved config (the
  agent directory by its content) and the repetition: the same cell id in two run roots is
  the same work under the same inputs, while an edited task or arm gets new cell ids whose
  rows never mix with the old ones. Declare a narrower cohort with :func:`declare_cohort`.
- **Accepted row.** Per (cohort, cell), i.e. per (cohort, arm, task content, repetition):
  the valid attempt that *started* first, ties broken by epoch then attempt id.
  Deterministic and blind to rewards: never the best attempt.
- **Denominators.** The strict denominator is every cell planned by an epoch of the cohort;
  a cell without an accepted row counts as a failure. The headline denominator is the
  planned cells that have an accepted row. Both are recomputed from the rows every time.
- **Exclusions.** A cell excluded by an operator (``ray-bench exclude``, recorded in the ledger
  with who, when and why) in any epoch of the cohort leaves *both* denominators and the rows;
  its attempts stay in the ledger and in the attempt counts. See
  :mod:`ray_bench.evidence.decisions`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_bench.errors import UserInputError
from ray_bench.evidence.decisions import Exclusion, Promotion, exclusions_of, promotion_of
from ray_bench.ledger.events import RunStarted
from ray_bench.ledger.rows import accepted_rows
from ray_bench.ledger.store import AttemptRow, Event, Ledger
from ray_bench.models.attempt import AttemptSummary
from ray_bench.models.plan import Plan, PlanCell
from ray_bench.plan.store import PLAN_FILE, load_plan_file
from ray_bench.runroot import RunPaths

#: A row solves its task at this reward; rewards between 0 and 1 count towards mean reward.
SOLVED_AT = 1.0


@dataclass(frozen=True)
class Epoch:
    """One plan identity and the attempts that ran under it (one run root)."""

    identity: str
    run_id: str
    run_root: Path
    plan: Plan
    attempts: tuple[AttemptRow, ...]
    events: tuple[Event, ...] = ()

    @property
    def exclusions(self) -> dict[str, Exclusion]:
        return exclusions_of(self.run_id, self.events)

    @property
    def promotion(self) -> Promotion | None:
        return promotion_of(self.run_id, self.events)

    def executions(self) -> list[dict[str, Any]]:
        """The data of each ``run_started`` event: one per execute (or resume) of the plan,
        with the options that shaped it."""
        return [e.data for e in self.events if isinstance(e.event, RunStarted)]

    def summaries(self, fields: Collection[str] | None = None) -> dict[str, AttemptSummary]:
        """attempt id -> terminal summary (read from the ledger on demand; ``fields``: only these)."""
        return dict(self.each_summary(fields))

    def each_summary(self, fields: Collection[str] | None = None) -> Iterator[tuple[str, AttemptSummary]]:
        """(attempt id, terminal summary), one at a time from the ledger: a reader that keeps a
        few figures of each need not hold 100,000 models at once (issue 57)."""
        if not RunPaths(self.run_root).ledger.is_file():
            return
        with Ledger.reading(self.run_root) as ledger:
            yield from ledger.summaries(fields)


@dataclass(frozen=True)
class Cohort:
    name: str
    epochs: frozenset[str]


def declare_cohort(name: str, epochs: Iterable[str]) -> Cohort:
    return Cohort(name, frozenset(epochs))


def find_run_roots(paths: Iterable[Path]) -> list[Path]:
    """Each path is a run root (it holds a plan) or a directory of run roots."""
    roots: list[Path] = []
    for path in paths:
        if RunPaths(path).plan.is_file():
            roots.append(path)
        elif path.is_dir():
            found = sorted(p.parent for p in path.glob(f"*/{PLAN_FILE}"))
            if not found:  # an empty or mistyped directory would read as "no rows anywhere"
                raise UserInputError("holds no run root (no */launch-plan.json)", where=str(path),
                                     fix="pass runs/ or runs/ID")
            roots.extend(found)
        else:
            raise UserInputError(
                "not a run root or a directory of run roots",
                where=str(path),
                fix="pass runs/ or runs/ID",
            )
    unique: dict[Path, None] = {}
    for root in roots:
        unique.setdefault(root.resolve(), None)
    return list(unique)


def load_epoch(run_root: Path) -> Epoch:
    plan, identity = load_plan_file(RunPaths(run_root).plan)
    attempts: tuple[AttemptRow, ...] = ()
    events: tuple[Event, ...] = ()
    if RunPaths(run_root).ledger.is_file():
        with Ledger.reading(run_root) as ledger:
            attempts = tuple(ledger.attempts())
            events = tuple(ledger.events())
    return Epoch(identity, plan.run_id, run_root, plan, attempts, events)


def load_epochs(paths: Iterable[Path]) -> list[Epoch]:
    return [load_epoch(root) for root in find_run_roots(paths)]


def default_cohort(epochs: list[Epoch], suite: str | None = None) -> Cohort:
    """Every epoch of ``suite`` (of the one suite the epochs share when None)."""
    suites = sorted({e.plan.suite for e in epochs})
    if suite is None:
        if len(suites) > 1:
            raise UserInputError(
                f"run roots of several suites ({', '.join(suites)})",
                where="--runs",
                fix="name the run roots of one suite",
            )
        suite = suites[0] if suites else ""
    return Cohort(suite, frozenset(e.identity for e in epochs if e.plan.suite == suite))


def accepted(attempts: Iterable[AttemptRow], cohort: Cohort) -> dict[str, AttemptRow]:
    """cell id -> its accepted row: the earliest started valid attempt of the cohort (the rule
    lives in :func:`ray_bench.ledger.rows.accepted_rows`)."""
    return accepted_rows(attempts, set(cohort.epochs))


@dataclass(frozen=True)
class ArmDenominators:
    arm: str
    planned: int  # strict denominator
    valid: int  # headline denominator
    solved: int
    reward_sum: float

    @property
    def missing(self) -> int:
        """Planned cells without a valid row: failures in the strict rate."""
        return self.planned - self.valid

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.valid if self.valid else float("nan")

    @property
    def strict_rate(self) -> float:
        return self.solved / self.planned if self.planned else float("nan")

    @property
    def headline_rate(self) -> float:
        return self.solved / self.valid if self.valid else float("nan")


@dataclass
class Evidence:
    """The accepted rows of one cohort, with every loaded epoch kept for the record."""

    cohort: Cohort
    epochs: list[Epoch]
    planned: dict[str, PlanCell]
    rows: dict[str, AttemptRow]
    arms: list[str] = field(default_factory=list)
    #: Cells out of both denominators by an operator's decision (cell id -> the decision).
    excluded: dict[str, Exclusion] = field(default_factory=dict)

    def attempts(self, *, cohort_only: bool = True) -> Iterator[AttemptRow]:
        for epoch in self.epochs:
            if cohort_only and epoch.identity not in self.cohort.epochs:
                continue
            yield from epoch.attempts

    def run_id_of(self, epoch: str) -> str:
        return next((e.run_id for e in self.epochs if e.identity == epoch), epoch)

    def missing(self) -> list[PlanCell]:
        """Planned cells without an accepted row, in plan order."""
        return [c for c in self.planned.values() if c.id not in self.rows]

    def denominators(self) -> list[ArmDenominators]:
        out: list[ArmDenominators] = []
        for arm in self.arms:
            cells = [c.id for c in self.planned.values() if c.arm == arm]
            rows = [self.rows[c] for c in cells if c in self.rows]
            out.append(
                ArmDenominators(
                    arm=arm,
                    planned=len(cells),
                    valid=len(rows),
                    solved=sum(1 for r in rows if (r.reward or 0.0) >= SOLVED_AT),
                    reward_sum=sum(r.reward or 0.0 for r in rows),
                )
            )
        return out


def build_evidence(epochs: list[Epoch], cohort: Cohort | None = None) -> Evidence:
    cohort = cohort or default_cohort(epochs)
    planned: dict[str, PlanCell] = {}
    arms: list[str] = []
    members = [e for e in epochs if e.identity in cohort.epochs]
    for epoch in members:
        for cell in epoch.plan.cells:
            planned.setdefault(cell.id, cell)
        # baseline first, then the variants in the order the plans name them
        for arm in sorted(epoch.plan.arms, key=lambda a: a.role != "baseline"):
            if arm.name not in arms:
                arms.append(arm.name)
    excluded: dict[str, Exclusion] = {}
    for epoch in members:
        for cell_id, decision in epoch.exclusions.items():
            if cell_id in planned:
                excluded.setdefault(cell_id, decision)
    for cell_id in excluded:
        planned.pop(cell_id)
    rows = accepted((a for e in members for a in e.attempts), cohort)
    rows = {c: r for c, r in rows.items() if c not in excluded}
    return Evidence(cohort, epochs, planned, rows, arms, excluded)
