"""The state of a run's cells, rebuilt from the plan and the ledger. Pure: no Ray, no I/O.

A cell is *valid* once it has a valid row, *failed* once it used up its counted attempts,
*running* while an attempt is in flight, and *pending* otherwise. Pending cells wait in a
:class:`~ray_bench.scheduler.order.CellQueue` (longest expected first, unknown tasks explored
at a high quantile, the arms of a pair together). Every failure is bounded (:func:`attempt_cap`):
one about the cell (:data:`~ray_bench.evidence.classify.COUNTING_CLASSES`) uses up one of its
``max_attempts``; one about the world around it (stack, provider, capacity, auth, a lost runner)
uses up one of its absolute cap of ``2 x max_attempts`` failures, which the cell's own failures
count against too. A cell
that failed goes back ahead of new pairs, and its next attempt avoids the account of its
last one when another has room (and waits for another when that account was at fault).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from ray_bench.evidence.classify import Verdict
from ray_bench.ledger.store import RUN, AttemptRow
from ray_bench.models.plan import Plan, PlanCell
from ray_bench.scheduler.order import CellQueue, CellRef, DurationBook

#: Every failure class is bounded: a cell is failed after ``ABSOLUTE_ATTEMPTS_FACTOR x
#: max_attempts`` failed attempts of any class (a stop's cancellations are not failures). Two:
#: with every Daytona create timing out (stack, which does not count against ``max_attempts``)
#: a run made 11 sandboxes for 4 cells at the old factor of 4 before its circuit opened, and
#: uncapped runs 20 and 28 (issue 53); at 2 a cell pays for at most 6 sandboxes at the default
#: of 3, while a world failure that clears (a provider's 5xx minute) still leaves it a retry
#: past its own three.
ABSOLUTE_ATTEMPTS_FACTOR = 2


def attempt_cap(max_attempts: int) -> int:
    """The absolute number of failed attempts of a cell, of every class (the receipt shows it)."""
    return max_attempts * ABSOLUTE_ATTEMPTS_FACTOR

#: What a failure did to its account when it was the account's fault (a 5xx, a refused login):
#: the cell's next attempt shuns that account while another could take it. Not a rate limit:
#: the account cools, and once it is back it is as good as any.
SHUNNING_EFFECTS = frozenset({"server_error", "auth_failed"})


@dataclass(frozen=True)
class PreflightGate:
    """Where a plan's preflight stands: ``todo`` its cells that may still start, ``spent``
    those that used every attempt without a valid row (no session can pass it any more),
    ``failed`` every cell of it without a valid row, in plan order."""

    todo: tuple[str, ...]
    spent: tuple[str, ...]
    failed: tuple[str, ...]


@dataclass
class CellState:
    cell: PlanCell
    attempts: int = 0
    counted: int = 0
    failures: int = 0
    """Failed attempts of every class (bounded by :func:`attempt_cap`)."""
    running: bool = False
    valid: bool = False
    failed: bool = False
    cancelled: bool = False
    last_failure: str | None = None
    last_account: str | None = None
    shuns: bool = False
    """Its last attempt failed by ``last_account``'s fault (:data:`SHUNNING_EFFECTS`)."""

    @property
    def state(self) -> str:
        return cell_phase(valid=self.valid, running=self.running, failed=self.failed)


def cell_phase(*, valid: bool, running: bool, failed: bool) -> str:
    """A cell's state: ``valid`` first, then ``running``, ``failed``, else ``pending``."""
    if valid:
        return "valid"
    if running:
        return "running"
    if failed:
        return "failed"
    return "pending"


def exhausted(counted: int, failures: int, max_attempts: int) -> bool:
    """A cell without a valid row is failed: its counted attempts or all its failures are spent."""
    return counted >= max_attempts or failures >= attempt_cap(max_attempts)


class RunState:
    def __init__(self, plan: Plan, history: Iterable[AttemptRow],
                 expected: Mapping[str, float] | None = None) -> None:
        """``expected``: task -> expected seconds from earlier runs (default: the plan's)."""
        self.max_attempts = plan.max_attempts
        self.cells: dict[str, CellState] = {c.id: CellState(c) for c in plan.cells}
        if expected is None:
            expected = {t.id: t.expected_sec for t in plan.tasks if t.expected_sec}
        self.book = DurationBook(expected)
        for row in history:
            state = self.cells.get(row.cell_id)
            if state is None or row.kind != RUN:  # a regrade ran no agent: not an attempt of the cell's
                continue
            state.attempts += 1
            if row.valid:
                state.valid = True
                if row.finished_at is not None:
                    self.book.observe(row.task, max(0.0, row.finished_at - row.started_at))
            elif row.status == "finished":
                state.failures += 1
                if row.counts:
                    state.counted += 1
                    state.last_failure = row.failure_class
            if not row.valid:
                state.last_account = row.account
        for state in self.cells.values():
            self._settle(state)
        self.pending = CellQueue([_ref(c) for c in plan.cells if self.cells[c.id].state == "pending"],
                                 self.book)
        self._starts: dict[str, float] = {}

    def _settle(self, state: CellState) -> None:
        if not state.valid and exhausted(state.counted, state.failures, self.max_attempts):
            state.failed = True

    def preflight(self, cell_ids: Iterable[str]) -> PreflightGate:
        cells = [self.cells[c] for c in cell_ids]
        return PreflightGate(tuple(s.cell.id for s in cells if s.state == "pending"),
                             tuple(s.cell.id for s in cells if s.state == "failed"),
                             tuple(s.cell.id for s in cells if not s.valid))

    def restrict(self, cell_ids: set[str]) -> Aside:
        """Keep only ``cell_ids`` in the queue (preflight); return the ones set aside, in the
        order the queue pops them (:class:`Aside`)."""
        aside: list[str] = []
        keep: list[CellRef] = []
        whole = self.pending
        while len(keep) < len(cell_ids) and (ref := whole.pop(0.0)) is not None:
            (keep.append(ref) if ref.cell_id in cell_ids else aside.append(ref.cell_id))
        whole.book = self.book.snapshot()
        self.pending = CellQueue(keep, self.book)
        return Aside(aside, whole)

    def fail(self, cell_ids: Iterable[str], failure_class: str, reason: str) -> None:
        """Fail cells that cannot start at all (their snapshot's build failed): once, as
        ``failure_class``, without an attempt each; they leave the queue."""
        doomed = {c for c in cell_ids if self.cells[c].state == "pending"}
        for cell_id in doomed:
            state = self.cells[cell_id]
            state.failed, state.last_failure = True, f"{failure_class}: {reason}"
        if doomed:
            self.restrict({c for c, s in self.cells.items() if s.state == "pending"})

    def failure_detail(self) -> str:
        """The run's final line for failed cells: those that used up their attempts, and those
        that never started (their snapshot's build failed) with the reason, which the line used
        to hide behind "failed after N attempts"."""
        failed = [s for s in self.cells.values() if s.state == "failed"]
        tried = sum(1 for s in failed if s.attempts)
        never = sorted({s.last_failure or "unknown" for s in failed if not s.attempts})
        parts = [f"{tried} after {self.max_attempts} attempts"] if tried else []
        if never:
            shown = "; ".join(never[:2]) + (f"; {len(never) - 2} more reasons" if len(never) > 2 else "")
            parts.append(f"{len(failed) - tried} never started ({shown})")
        if not never:
            return f"{len(failed)} cells failed after {self.max_attempts} attempts"
        return f"{len(failed)} cells failed: " + ", ".join(parts)

    def extend(self, cell_ids: Iterable[str]) -> None:
        self.pending.add(_ref(self.cells[c].cell) for c in cell_ids if self.cells[c].state == "pending")

    def take(self, now: float, split: float | None = None, long: bool = False) -> PlanCell | None:
        """The next cell to start (it stays pending until :meth:`started` or :meth:`put_back`);
        ``split``, ``long``: which length to prefer (see :meth:`CellQueue.pop`)."""
        ref = self.pending.pop(now, split, long)
        return None if ref is None else self.cells[ref.cell_id].cell

    def put_back(self, cells: list[PlanCell]) -> None:
        """Cells taken but not started (no account admitted them): first in line again, in order."""
        for cell in reversed(cells):
            self.pending.requeue(_ref(cell))

    def expected(self, cell: PlanCell, now: float) -> float:
        return self.book.estimate(cell.task, now)

    def started(self, cell_id: str, lease_id: str = "", now: float = 0.0) -> None:
        state = self.cells[cell_id]
        state.running = True
        state.attempts += 1
        self.book.started(state.cell.task, lease_id or cell_id, now)

    def finished(self, cell_id: str, verdict: Verdict | None, lease_id: str = "", now: float = 0.0,
                 account: str | None = None) -> str:
        """Record an attempt's end (``None``: cancelled or stale). Returns the cell's state."""
        state = self.cells[cell_id]
        state.running = False
        task = state.cell.task
        began = self.book.stopped(task, lease_id or cell_id)
        if verdict is not None and verdict.valid:
            state.valid = True
            if began is not None:
                self.book.observe(task, max(0.0, now - began))
            self.pending.reprioritise(task)
            return state.state
        self.pending.reprioritise(task)
        if verdict is not None:
            state.last_failure = verdict.failure_class
            state.last_account = account
            state.shuns = account is not None and verdict.effect in SHUNNING_EFFECTS
            state.failures += 1
            if verdict.counts:
                state.counted += 1
        self._settle(state)
        if state.state == "pending":
            self.pending.requeue(_ref(state.cell))
        return state.state

    def counts(self) -> dict[str, int]:
        counter = Counter(s.state for s in self.cells.values())
        return {k: counter.get(k, 0) for k in ("pending", "running", "valid", "failed")}

    @property
    def done(self) -> bool:
        return all(s.state in ("valid", "failed") for s in self.cells.values())

    @property
    def remaining(self) -> int:
        return sum(1 for s in self.cells.values() if s.state in ("pending", "running"))


class Aside:
    """The cells a preflight set aside, in the order the whole queue pops them: those popped
    before the last kept cell came out, then the rest of that queue, popped on first use (after
    the preflight, not before the first cell: at 100,000 cells the pops were 0.35-0.45 s of
    ``execute``'s start). The rest pops on the book as it stood when the queue was set aside, so
    the order is the one popping it all at once gave. Iterated once."""

    def __init__(self, popped: list[str], rest: CellQueue) -> None:
        self._popped = popped
        self._rest: CellQueue | None = rest

    def __iter__(self) -> Iterator[str]:
        yield from self._popped
        rest, self._rest = self._rest, None
        while rest is not None and (ref := rest.pop(0.0)) is not None:
            yield ref.cell_id


def _ref(cell: PlanCell) -> CellRef:
    return CellRef(cell.id, cell.task, cell.arm, cell.rep)
