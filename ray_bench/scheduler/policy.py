"""Which cell next, and on which account: the scheduling policy as pure code.

**Cell order (LPT with history).** Cells of long tasks start first, so that a four-hour
straggler is not the last thing to start. A task's expected duration is, in order of trust:
the mean of its attempts finished in this run, the duration an earlier run recorded
(``history``), else a prior (the mean of everything finished so far, or ``prior_s``). A task
with a cell running longer than that is known to be long: its estimate becomes
``RUNNING_BOOST`` x the elapsed time. With no history, this makes the first repetition of
every task an exploration and starts the remaining repetitions of the long ones early.
Ties go to the task with fewer started cells, then to suite order.

**Pairs.** Both arms of a pair (task, repetition) are launched together: once one arm has
started, its siblings are next in line, ahead of any new pair. A cell sent back to the queue
(rate-limited, auth failure) keeps that priority and is retried at once, on another account.

**Account choice.** Among the accounts that admit a start now, prefer the one with the most
headroom (free fraction of its adaptive limit, then free slots); a degraded account's single
probe start comes last.

**Capacity.** No parallelism flag: capacity is the smaller of the usable accounts' limits and
the backend pools (:func:`healthy_capacity`).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ray_bench.accounts.core import (
    AccountCore,
    AccountSnapshot,
    Admit,
    Lease,
    Refusal,
    RefusalReason,
)
from ray_bench.accounts.outcome import Outcome, OutcomeKind

RUNNING_BOOST = 1.5
"""A task running for t seconds is expected to take about 1.5 t: with a lognormal of sigma
1.2 (real agent runs), E[X | X > t] is 1.5-2.5 t above the median, and the lower end keeps
one slow start from jumping a task ahead of ones known to be longer."""


@dataclass(frozen=True, slots=True)
class CellRef:
    """What the scheduler needs to know about a cell."""

    cell_id: str
    task: str
    arm: str
    rep: int = 0

    @property
    def pair(self) -> tuple[str, int]:
        return (self.task, self.rep)


class DurationBook:
    """Expected task durations: what this run observed, else history, else a guess."""

    def __init__(self, history: Mapping[str, float] | None = None, *,
                 prior_s: float = 600.0, unknown_quantile: float = 0.9) -> None:
        self.history = dict(history or {})
        self.prior_s = prior_s
        self.unknown_quantile = unknown_quantile
        self._sum: dict[str, float] = {}
        self._n: dict[str, int] = {}
        self._seen: list[float] = []
        self.running: dict[str, dict[str, float]] = {}
        """task -> {lease_id: started_at}"""

    def known(self, task: str) -> bool:
        return task in self._n or task in self.history

    def unknown_estimate(self) -> float:
        """What to expect of a task never seen: a high quantile of what has finished, not
        the mean. An unknown task may be a four-hour straggler, and exploring it early is
        cheap, while exploring it last sets the makespan (measured on the reference
        workload without history: the mean gave 1.11-1.27 x the lower bound)."""
        if not self._seen:
            return self.prior_s
        i = min(len(self._seen) - 1, int(self.unknown_quantile * len(self._seen)))
        return max(self.prior_s, self._seen[i])

    def base(self, task: str) -> float:
        """The estimate that does not depend on the time."""
        n = self._n.get(task)
        if n:
            return self._sum[task] / n
        h = self.history.get(task)
        return h if h is not None else self.unknown_estimate()

    def estimate(self, task: str, now: float) -> float:
        est = self.base(task)
        runs = self.running.get(task)
        if runs:
            est = max(est, RUNNING_BOOST * (now - min(runs.values())))
        return est

    def observe(self, task: str, seconds: float) -> None:
        self._sum[task] = self._sum.get(task, 0.0) + seconds
        self._n[task] = self._n.get(task, 0) + 1
        bisect.insort(self._seen, seconds)

    def started(self, task: str, lease_id: str, now: float) -> None:
        self.running.setdefault(task, {})[lease_id] = now

    def stopped(self, task: str, lease_id: str) -> float | None:
        runs = self.running.get(task)
        if not runs or lease_id not in runs:
            return None
        started = runs.pop(lease_id)
        if not runs:
            del self.running[task]
        return started


class CellQueue:
    """Pending cells, popped in the order described in the module docstring."""

    def __init__(self, cells: Iterable[CellRef], book: DurationBook | None = None) -> None:
        self.book = book or DurationBook()
        self._order: dict[str, int] = {}
        self._fresh: dict[str, deque[tuple[str, int]]] = {}
        """task -> pairs none of whose arms has started, in repetition order."""
        self._pending: dict[tuple[str, int], list[CellRef]] = {}
        self._opened: set[tuple[str, int]] = set()
        self._open: deque[tuple[str, int]] = deque()
        self._started: dict[str, int] = {}
        self._version: dict[str, int] = {}
        self._known: list[tuple[float, int, int, int, str]] = []
        self._unknown: list[tuple[int, int, int, str]] = []
        self._len = 0
        for cell in cells:
            self._add_new(cell)
        for task in self._fresh:
            self._push(task)

    def __len__(self) -> int:
        return self._len

    def _add_new(self, cell: CellRef) -> None:
        pair = cell.pair
        if cell.task not in self._order:
            self._order[cell.task] = len(self._order)
            self._fresh[cell.task] = deque()
        if pair not in self._pending:
            self._pending[pair] = []
            self._fresh[cell.task].append(pair)
        self._pending[pair].append(cell)
        self._len += 1

    def _push(self, task: str) -> None:
        v = self._version.get(task, 0) + 1
        self._version[task] = v
        if not self._fresh.get(task):
            return
        started, order = self._started.get(task, 0), self._order[task]
        if self.book.known(task):
            heapq.heappush(self._known, (-self.book.base(task), started, order, v, task))
        else:
            heapq.heappush(self._unknown, (started, order, v, task))

    def _live(self, task: str, version: int) -> bool:
        return self._version[task] == version and bool(self._fresh[task])

    def _best_fresh_task(self, now: float) -> str | None:
        known, unknown, book = self._known, self._unknown, self.book
        while known and not self._live(known[0][4], known[0][3]):
            heapq.heappop(known)
        while unknown and not self._live(unknown[0][3], unknown[0][2]):
            heapq.heappop(unknown)
        candidates = [known[0][4]] if known else []
        if unknown:
            candidates.append(unknown[0][3])
        # Tasks with a running cell can outgrow their heap key as time passes.
        candidates.extend(t for t in book.running if self._fresh.get(t))
        best: tuple[float, int, int] | None = None
        best_task: str | None = None
        for task in candidates:
            key = (-book.estimate(task, now), self._started.get(task, 0), self._order[task])
            if best is None or key < best:
                best, best_task = key, task
        return best_task

    def pop(self, now: float) -> CellRef | None:
        """The next cell to start, or ``None`` when the queue is empty."""
        while self._open:
            pair = self._open[0]
            cells = self._pending.get(pair)
            if cells:
                return self._take(pair, cells)
            self._open.popleft()
            self._opened.discard(pair)
        task = self._best_fresh_task(now)
        if task is None:
            return None
        pair = self._fresh[task].popleft()
        return self._take(pair, self._pending[pair])

    def _take(self, pair: tuple[str, int], cells: list[CellRef]) -> CellRef:
        cell = cells.pop(0)
        self._len -= 1
        if not cells:
            del self._pending[pair]
        elif pair not in self._opened:
            self._opened.add(pair)
            self._open.append(pair)
        self._started[cell.task] = self._started.get(cell.task, 0) + 1
        self._push(cell.task)
        return cell

    def requeue(self, cell: CellRef) -> None:
        """Put a cell back at once, ahead of new pairs: its pair is already under way."""
        pair = cell.pair
        cells = self._pending.setdefault(pair, [])
        cells.append(cell)
        self._len += 1
        if pair not in self._opened:
            self._opened.add(pair)
            self._open.appendleft(pair)

    def reprioritise(self, task: str) -> None:
        """Tell the queue that the book's estimate for ``task`` changed."""
        self._push(task)


def choose_account(candidates: Sequence[AccountSnapshot]) -> str | None:
    """The account to start the next cell on, from fresh snapshots; ``None`` if none admits.

    Pure: the driver asks each ``AccountActor`` for ``snapshot(now)`` and calls this.
    """
    best: tuple[int, float, int, str] | None = None
    for snap in candidates:
        if not isinstance(snap.admit, Admit):
            continue
        key = (0 if snap.admit.probe else 1, snap.admit.headroom / max(1, snap.limit),
               snap.admit.headroom, snap.name)
        if best is None or key[:3] > best[:3]:
            best = key
    return best[3] if best is not None else None


def plan_starts(queue: CellQueue, snapshots: Sequence[AccountSnapshot], now: float,
                free_slots: int | None = None) -> list[tuple[CellRef, str]]:
    """Plan this round's starts from one snapshot per account: ``[(cell, account)]``.

    For a driver whose accounts live elsewhere (Ray actors): one round trip for the
    snapshots, then each planned start is confirmed by its account (``on_start`` raises
    :class:`~ray_bench.accounts.AdmissionRefused` if the account changed its mind, e.g.
    another run took the slot); a refused cell goes back with ``queue.requeue(cell)``.
    Pops the planned cells from ``queue``.
    """
    snaps = {s.name: s for s in snapshots}
    out: list[tuple[CellRef, str]] = []
    budget = math.inf if free_slots is None else free_slots
    while budget > 0 and len(queue):
        name = choose_account(list(snaps.values()))
        if name is None:
            break
        cell = queue.pop(now)
        if cell is None:
            break
        out.append((cell, name))
        budget -= 1
        snap = snaps[name]
        assert isinstance(snap.admit, Admit)
        left = snap.admit.headroom - 1
        admit: Admit | Refusal = (replace(snap.admit, headroom=left) if left > 0
                                  else Refusal(RefusalReason.CONCURRENCY, None))
        snaps[name] = replace(snap, inflight=snap.inflight + 1, admit=admit)
    return out


def healthy_capacity(snapshots: Iterable[AccountSnapshot], backend_slots: int | None) -> int:
    """Cells that may run at once: usable accounts' limits, capped by the backend pools."""
    total = sum(s.recommended_parallelism for s in snapshots)
    return total if backend_slots is None else min(total, backend_slots)


@dataclass(frozen=True, slots=True)
class Start:
    cell: CellRef
    lease: Lease


@dataclass(slots=True)
class Dispatcher:
    """The in-process scheduler loop body: cores + queue. Used by the simulator as is, and a
    model for the driver, which holds the same queue and asks actors instead of cores."""

    accounts: Sequence[AccountCore]
    queue: CellQueue
    _leases: dict[str, tuple[CellRef, float]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def inflight(self) -> int:
        return len(self._leases)

    def dispatch(self, now: float, free_slots: int | None = None) -> list[Start]:
        """Start as many cells as the accounts admit now, at most ``free_slots`` (backend)."""
        starts: list[Start] = []
        budget = math.inf if free_slots is None else free_slots
        by_name = {a.name: a for a in self.accounts}
        while budget > 0 and len(self.queue):
            snaps = [_light_snapshot(a, now) for a in self.accounts]
            name = choose_account(snaps)
            if name is None:
                break
            cell = self.queue.pop(now)
            if cell is None:
                break
            lease = Lease(f"{cell.cell_id}#{next(self._ids)}", cell.cell_id, name)
            by_name[name].on_start(now, lease)
            self.queue.book.started(cell.task, lease.lease_id, now)
            self._leases[lease.lease_id] = (cell, now)
            starts.append(Start(cell, lease))
            budget -= 1
        return starts

    def finish(self, now: float, lease: Lease, outcome: Outcome) -> bool:
        """Record a finish; return whether the cell went back to the queue."""
        cell, started = self._leases.pop(lease.lease_id)
        for a in self.accounts:
            if a.name == lease.account:
                a.on_finish(now, lease, outcome)
                break
        book = self.queue.book
        book.stopped(cell.task, lease.lease_id)
        if outcome.kind is OutcomeKind.SUCCESS:
            book.observe(cell.task, now - started)
        self.queue.reprioritise(cell.task)
        if outcome.requeue:
            self.queue.requeue(cell)
            return True
        return False

    def next_wakeup(self, now: float) -> float | None:
        """When a refusal lifts by itself (cooldown end, token, window); ``None`` if only a
        finish or an operator can unblock."""
        times = [t for a in self.accounts if (t := a.next_change(now)) is not None and t > now]
        return min(times) if times else None


def _light_snapshot(core: AccountCore, now: float) -> AccountSnapshot:
    """The fields :func:`choose_account` reads, without the cost of a full snapshot."""
    return AccountSnapshot(
        name=core.name, state=core.health.state, inflight=core.inflight,
        limit=core.concurrency.limit, tokens=0.0, cooldown_left=0.0, window_used=0,
        window_usd=0.0, spent_usd=core.spent_usd, last_error="", recommended_parallelism=0,
        admit=core.can_admit(now))
