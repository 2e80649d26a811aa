"""Which cell next: the order of a run's pending cells, as pure code.

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

Account choice is :func:`ray_bench.scheduler.core.assign`.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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

    def typical(self) -> float:
        """The median expected task length: of what finished, else of the history."""
        values = self._seen or sorted(self.history.values())
        return values[len(values) // 2] if values else self.prior_s

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
        self.add(cells)

    def add(self, cells: Iterable[CellRef]) -> None:
        """Queue new cells (at the start, or after a preflight)."""
        touched = set()
        for cell in cells:
            self._add_new(cell)
            touched.add(cell.task)
        for task in touched:
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
