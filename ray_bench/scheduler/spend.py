"""Spend admission for a run's limit: a cell starts only if the run's spend so far, plus what
the cells running are expected to cost, plus this cell's expected cost stay within
``spend_limit_usd``. Without the reservation a $0.20 limit ended at $0.364 (issue 25): every
cell running when the limit was crossed finished on top of it. Pure: no Ray, no I/O.

A cell's expected cost (:meth:`SpendBook.expected`), the first known of:

1. history: the mean cost of this task's finished attempts in this run (every session), else
   the mean of its arm's;
2. the bound of the arm's executor role (``roles: [{role: executor, max_spend_usd: ...}]``);
3. :data:`DEFAULT_CELL_USD`.

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

    def add(self, usd: float) -> None:
        self.total += usd
        self.n += 1

    @property
    def value(self) -> float | None:
        return self.total / self.n if self.n else None


@dataclass
class SpendBook:
    """The run's spend, its reservations and its cost history."""

    limit_usd: float | None
    bounds: dict[str, float] = field(default_factory=dict)
    """Arm -> its executor role's ``max_spend_usd``."""
    spent: float = 0.0
    reserved: float = 0.0
    """What the cells running are expected to cost (a sum kept as they start and end)."""
    _reserved: dict[str, float] = field(default_factory=dict)
    _task: dict[str, _Mean] = field(default_factory=dict)
    _arm: dict[str, _Mean] = field(default_factory=dict)

    @classmethod
    def of(cls, plan: Plan, history: Iterable[AttemptRow]) -> SpendBook:
        bounds = {arm.name: role.max_spend_usd for arm in plan.arms for role in arm.roles
                  if role.role == "executor" and role.max_spend_usd is not None}
        book = cls(plan.spend_limit_usd, bounds)
        for row in history:
            book.observe(row.task, row.arm, row.cost_usd)
        return book

    def observe(self, task: str, arm: str, usd: float) -> None:
        """A finished attempt's cost. Zero is no evidence of cost (a cancelled attempt, or
        one whose usage is unknown) and teaches nothing."""
        self.spent += usd
        if usd > 0:
            self._task.setdefault(task, _Mean()).add(usd)
            self._arm.setdefault(arm, _Mean()).add(usd)

    def expected(self, cell: PlanCell) -> Expected:
        for mean in (self._task.get(cell.task), self._arm.get(cell.arm)):
            if mean is not None and mean.value is not None:
                return Expected(mean.value, "history")
        bound = self.bounds.get(cell.arm)
        if bound is not None:
            return Expected(bound, "role bound")
        return Expected(DEFAULT_CELL_USD, "default")

    def admits(self, usd: float) -> bool:
        """Whether a cell expected to cost ``usd`` may start within the run's limit."""
        return self.limit_usd is None or self.spent + self.reserved + usd <= self.limit_usd

    def reserve(self, lease_id: str, usd: float) -> None:
        self._reserved[lease_id] = usd
        self.reserved += usd

    def finish(self, lease_id: str, task: str, arm: str, usd: float) -> None:
        """The attempt ended: its reservation becomes its cost (0 for a cancelled one)."""
        held = self._reserved.pop(lease_id, None)
        if held is not None:
            self.reserved = self.reserved - held if self._reserved else 0.0
        self.observe(task, arm, usd)

    def refusal(self, expected: Expected) -> str:
        """The stop's detail when nothing runs and the next cell does not fit."""
        assert self.limit_usd is not None
        return (f"run spend ${self.spent:.2f} plus the next cell's expected ${expected.usd:.2f} "
                f"({expected.basis}) would pass the run's limit ${self.limit_usd:.2f} "
                "(spend_limit_usd, this run only)")
