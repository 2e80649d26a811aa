"""Spend admission for a run's limit: a cell starts only if the run's spend so far, plus what
the cells running are expected to cost, plus this cell's expected cost stay within
``spend_limit_usd``. Without the reservation a $0.20 limit ended at $0.364 (issue 25): every
cell running when the limit was crossed finished on top of it. Pure: no Ray, no I/O.

A cell's expected cost (:meth:`SpendBook.expected`), the first known of:

1. history: the mean cost of this task's finished attempts in this run (every session), else
   its arm's cost per second of agent time times the cell's expected duration (cells run
   longest first, and an agent's cost grows with its time: the arm's mean cost held the first,
   longest cells at a third of what they cost, measured in tests/scheduler/test_spend_admission.py),
   else the arm's mean cost;
2. the bound of the arm's executor role (``roles: [{role: executor, max_spend_usd: ...}]``);
3. :data:`DEFAULT_CELL_USD` for a typical cell, scaled by the cell's expected duration over the
   run's typical one (the run's first cells are its longest).

The overshoot is then at most what the estimates miss. An account's own budget
(``limits.spend_usd``) is reserved against in the account core the same way, with the expected
cost each lease carries (:class:`~ray_bench.accounts.core.Lease`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ray_bench.ledger.store import AttemptRow
from ray_bench.models.plan import Plan, PlanCell

#: A cell's expected cost when this run has seen no cost of its task or arm and the arm's
#: executor role sets no ``max_spend_usd``: a coding agent's attempt on a small task with a
#: frontier model costs cents to a few dollars (issue 25's runs: $0.01-$0.07 a cell on a fake
#: provider; public Harbor runs ~$0.1-2); a quarter holds a small demo budget's first cells back
#: by little and is replaced by this run's own figures after its first finish.
DEFAULT_CELL_USD = 0.25


@dataclass(frozen=True, slots=True)
class Expected:
    usd: float
    basis: str
    """``history``, ``role bound`` or ``default``: said in a stop's detail."""


@dataclass
class _Mean:
    total: float = 0.0
    n: int = 0
    seconds: float = 0.0
    """Agent seconds of the attempts whose time is known (for the cost per second)."""
    timed_usd: float = 0.0

    def add(self, usd: float, seconds: float) -> None:
        self.total += usd
        self.n += 1
        if seconds > 0:
            self.seconds += seconds
            self.timed_usd += usd

    @property
    def value(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def per_second(self) -> float | None:
        return self.timed_usd / self.seconds if self.seconds > 0 else None


@dataclass
class SpendBook:
    """The run's spend, its reservations and its cost history."""

    limit_usd: float | None
    bounds: dict[str, float] = field(default_factory=dict)
    """Arm -> its executor role's ``max_spend_usd``."""
    spent: float = 0.0
    unknown: int = 0
    """Attempts of unknown cost, counted at their expected cost in ``spent``."""
    lower_bound: int = 0
    """Attempts whose cost is a lower bound (cut mid-turn): counted in ``spent`` in full, which
    is then at least that."""
    _running: dict[str, tuple[PlanCell, float]] = field(default_factory=dict)
    _task: dict[str, _Mean] = field(default_factory=dict)
    _arm: dict[str, _Mean] = field(default_factory=dict)

    @classmethod
    def of(cls, plan: Plan, history: Iterable[AttemptRow]) -> SpendBook:
        bounds = {arm.name: role.max_spend_usd for arm in plan.arms for role in arm.roles
                  if role.role == "executor" and role.max_spend_usd is not None}
        book = cls(plan.spend_limit_usd, bounds)
        cells = {cell.id: cell for cell in plan.cells}
        for row in history:
            if row.cost_usd is None:
                # What admission charged it then; a ledger that did not record it (version 1, a
                # rebuilt one) is charged the cell's expected cost by the history read so far.
                cell = cells.get(row.cell_id)
                charged = row.charged_usd if row.charged_usd is not None else (
                    book.expected(cell).usd if cell is not None else 0.0)
                book.spent += charged
                book.unknown += 1
                continue
            took = row.finished_at - row.started_at if row.finished_at is not None else 0.0
            book.observe(row.task, row.arm, row.cost_usd, took, partial=row.status == "cancelled",
                         lower_bound=row.lower_bound)
        return book

    def observe(self, task: str, arm: str, usd: float, seconds: float = 0.0, *, partial: bool = False,
                lower_bound: bool = False) -> None:
        """A finished attempt's cost (and agent seconds, 0: unknown). Zero dollars is no
        evidence of cost (an agent that never started, or usage that is unknown) and teaches
        nothing; nor does a ``partial`` cost (an attempt cut short: cancelled, lost, a full disk),
        which counts in the spend but is no measure of what a whole cell costs; nor a
        ``lower_bound`` one (its CLI cut mid-turn: at least ``usd`` was spent), which counts in
        full."""
        self.spent += usd
        self.lower_bound += int(lower_bound)
        if usd > 0 and not partial and not lower_bound:
            self._task.setdefault(task, _Mean()).add(usd, seconds)
            self._arm.setdefault(arm, _Mean()).add(usd, seconds)

    typical_sec: float = 0.0
    """The run's typical cell length (0: unknown), which :data:`DEFAULT_CELL_USD` is for."""

    def expected(self, cell: PlanCell, seconds: float = 0.0) -> Expected:
        """The cell's expected cost; ``seconds``: its expected duration when its task's is known
        (0: unknown; an unknown task's exploration estimate is no measure of its cost)."""
        task = self._task.get(cell.task)
        if task is not None and task.value is not None:
            return Expected(task.value, "history")
        arm = self._arm.get(cell.arm)
        if arm is not None and arm.value is not None:
            rate = arm.per_second
            return Expected(rate * seconds if rate is not None and seconds > 0 else arm.value, "history")
        bound = self.bounds.get(cell.arm)
        if bound is not None:
            return Expected(bound, "role bound")
        scale = seconds / self.typical_sec if seconds > 0 and self.typical_sec > 0 else 1.0
        return Expected(DEFAULT_CELL_USD * scale, "default")

    def reserved(self) -> float:
        """What the cells running are expected to cost, by what is known now: a cell started
        on the default estimate is held at its history once the first costs come in (the first
        wave is where the estimates miss most). O(cells running): once per launch round."""
        return sum(self.expected(cell, seconds).usd for cell, seconds in self._running.values())

    def room(self) -> float | None:
        """What the run may still commit to new cells (None: no limit)."""
        if self.limit_usd is None:
            return None
        return self.limit_usd - self.spent - self.reserved()

    def reserve(self, lease_id: str, cell: PlanCell, seconds: float = 0.0) -> None:
        """``cell`` started, expected to take ``seconds``."""
        self._running[lease_id] = (cell, seconds)

    def finish(self, lease_id: str, task: str, arm: str, usd: float | None, seconds: float = 0.0, *,
               partial: bool = False, lower_bound: bool = False) -> float:
        """The attempt ended: its reservation becomes its cost (:func:`ray_bench.ledger.cost.
        attempt_cost`; ``partial``: cut short, see :meth:`observe`). A cost that is unknown
        (``None``: usage with no cost and no price for its model, a cancelled agent whose usage
        could not be read) is never counted as $0: the run is charged what the cell was expected
        to cost, which teaches the history nothing. A ``lower_bound`` cost counts as it is (at
        least that was spent) and teaches nothing either. Returns what was charged (the account's
        budget counts the same)."""
        running = self._running.pop(lease_id, None)
        if usd is None:
            charged = self.expected(running[0], running[1]).usd if running is not None else 0.0
            self.spent += charged
            self.unknown += 1
            return charged
        self.observe(task, arm, usd, seconds, partial=partial, lower_bound=lower_bound)
        return usd

    def refusal(self, expected: Expected) -> str:
        """The stop's detail when nothing runs and the next cell does not fit."""
        assert self.limit_usd is not None
        least = "at least " if self.lower_bound else ""
        return (f"run spend {least}${self.spent:.2f} plus the next cell's expected ${expected.usd:.2f} "
                f"({expected.basis}) would pass the run's limit ${self.limit_usd:.2f} "
                "(spend_limit_usd, this run only)")
