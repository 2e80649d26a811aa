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

**Reserved long cells.** ``pop(now, split=theta)`` prefers tasks expected to take less
than ``theta`` and ``pop(now, split=theta, long=True)`` the others (each takes the other kind
when none is left): the driver asks so for the slots of accounts without a cell-count window
and for those of the window-bound ones, while the long cells are worth more to the latter
(:func:`ray_bench.scheduler.core.reserve_below`); :meth:`CellQueue.profile` is what that
decision reads.

Account choice is :func:`ray_bench.scheduler.core.assign`.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
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
        self._typical: float | None = None
        #: What :meth:`typical` is the median of, kept sorted as tasks are observed (sorting
        #: it again after every finish made a long run quadratic): task -> its value.
        self._values = sorted(self.history.values())
        self._value = dict(self.history)
        self._history_mean = sum(self.history.values()) / len(self.history) if self.history else None
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
        """The median expected task length over the tasks known (this run's mean for a task
        that finished here, else its history). Not the median of what finished: longest
        first finishes the long cells first, and that median was 2-3 h on a workload whose
        median task takes 9 min."""
        if self._typical is None:
            values = self._values
            self._typical = values[len(values) // 2] if values else self.prior_s
        return self._typical

    def mean(self) -> float:
        """The mean expected task length: of what finished, else of the history."""
        if self._seen:
            return sum(self._sum.values()) / sum(self._n.values())
        return self._history_mean if self._history_mean is not None else self.prior_s

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

    def residual(self, now: float) -> float:
        """Expected seconds still to run of the cells running now."""
        total = 0.0
        for task, runs in self.running.items():
            estimate = self.estimate(task, now)
            total += sum(max(0.0, estimate - (now - started)) for started in runs.values())
        return total

    def observe(self, task: str, seconds: float) -> None:
        self._sum[task] = self._sum.get(task, 0.0) + seconds
        self._n[task] = self._n.get(task, 0) + 1
        bisect.insort(self._seen, seconds)
        old = self._value.get(task)
        if old is not None:
            del self._values[bisect.bisect_left(self._values, old)]
        self._value[task] = self._sum[task] / self._n[task]
        bisect.insort(self._values, self._value[task])
        self._typical = None

    def started(self, task: str, lease_id: str, now: float) -> None:
        self.running.setdefault(task, {})[lease_id] = now

    def snapshot(self) -> DurationBook:
        """A copy that nothing later observed or started changes (what a queue that must pop in
        the order of this moment reads)."""
        copy = DurationBook.__new__(DurationBook)
        copy.__dict__.update(self.__dict__)
        copy._sum, copy._n, copy._seen = dict(self._sum), dict(self._n), list(self._seen)
        copy._values, copy._value = list(self._values), dict(self._value)
        copy.running = {task: dict(runs) for task, runs in self.running.items()}
        return copy

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
        self._fresh_tasks: dict[str, None] = {}
        """The tasks with a fresh pair (those of ``_fresh`` not empty)."""
        self._pending: dict[tuple[str, int], list[CellRef]] = {}
        self._opened: set[tuple[str, int]] = set()
        self._open: deque[tuple[str, int]] = deque()
        self._started: dict[str, int] = {}
        self._version: dict[str, int] = {}
        self._known: list[tuple[float, int, int, str]] = []
        """Known tasks with fresh pairs, sorted: (-expected, started, suite order, task)."""
        self._known_key: dict[str, tuple[float, int, int, str]] = {}
        self._fresh_cells: dict[str, int] = {}
        """task -> cells of its fresh pairs."""
        self._known_n: dict[str, int] = {}
        self._known_cells = 0
        self._known_work = 0.0
        """Cells of the known tasks' fresh pairs, and their expected seconds."""
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
            self._fresh_tasks[cell.task] = None
        if pair not in self._opened:
            self._fresh_cells[cell.task] = self._fresh_cells.get(cell.task, 0) + 1
        self._pending[pair].append(cell)
        self._len += 1

    def _push(self, task: str) -> None:
        v = self._version.get(task, 0) + 1
        self._version[task] = v
        old = self._known_key.pop(task, None)
        if old is not None:
            del self._known[bisect.bisect_left(self._known, old)]
            cells = self._known_n.pop(task)
            self._known_cells -= cells
            self._known_work += old[0] * cells
        if not self._fresh.get(task):
            return
        started, order = self._started.get(task, 0), self._order[task]
        if self.book.known(task):
            key = (-self.book.base(task), started, order, task)
            bisect.insort(self._known, key)
            self._known_key[task] = key
            cells = self._known_n[task] = self._fresh_cells.get(task, 0)
            self._known_cells += cells
            self._known_work -= key[0] * cells
        else:
            heapq.heappush(self._unknown, (started, order, v, task))

    def _live(self, task: str, version: int) -> bool:
        return self._version[task] == version and bool(self._fresh[task])

    def _best_fresh_task(self, now: float, split: float | None = None, long: bool = False) -> str | None:
        known, unknown, book = self._known, self._unknown, self.book
        while unknown and not self._live(unknown[0][3], unknown[0][2]):
            heapq.heappop(unknown)
        candidates = []
        if known:
            i = 0 if split is None or long else bisect.bisect_right(known, (-split, 1 << 62))
            candidates.append(known[i][3] if i < len(known) else known[0][3])
        if unknown:
            candidates.append(unknown[0][3])
        # Tasks with a running cell can outgrow their key as time passes. (The choice does
        # not depend on their order: the keys below differ by suite order.)
        running, fresh = book.running, self._fresh_tasks
        if len(fresh) < len(running):
            candidates.extend(t for t in fresh if t in running)
        else:
            candidates.extend(t for t in running if t in fresh)
        best: tuple[bool, float, int, int] | None = None
        best_task: str | None = None
        for task in candidates:
            estimate = book.estimate(task, now)
            other = not self._wanted(task, now, split, long)
            key = (other, -estimate, self._started.get(task, 0), self._order[task])
            if best is None or key < best:
                best, best_task = key, task
        return best_task

    def profile(self) -> Iterator[tuple[float, int]]:
        """(expected seconds, cells of fresh pairs) of the known tasks, longest first."""
        for neg, _, _, task in self._known:
            yield -neg, self._known_n[task]

    def work(self) -> float:
        """Expected seconds of all pending cells (tasks not known yet at the book's mean)."""
        return max(0.0, self._known_work) + (self._len - self._known_cells) * self.book.mean()

    def pop(self, now: float, split: float | None = None, long: bool = False) -> CellRef | None:
        """The next cell to start, or ``None`` when the queue is empty. ``split``: prefer a
        cell of a task expected to take less than this (``long``: at least this), of a
        started pair first, then of a fresh one; the others only when none is left."""
        while self._open and not self._pending.get(self._open[0]):
            self._opened.discard(self._open.popleft())
        if not self._len:
            return None
        if self._open and split is None:
            pair = self._open[0]
            return self._take(pair, self._pending[pair])
        for pair in self._open:
            cells = self._pending.get(pair)
            if cells and self._wanted(pair[0], now, split, long):
                return self._take(pair, cells)
        task = self._best_fresh_task(now, split, long)
        if self._open and (task is None or not self._wanted(task, now, split, long)):
            pair = self._open[0]  # of the other kind either way: a started pair's sibling first
            return self._take(pair, self._pending[pair])
        if task is None:
            return None
        pair = self._fresh[task].popleft()
        if not self._fresh[task]:
            del self._fresh_tasks[task]
        self._fresh_cells[task] -= len(self._pending[pair])
        return self._take(pair, self._pending[pair])

    def _wanted(self, task: str, now: float, split: float | None, long: bool) -> bool:
        """Whether ``task`` is of the kind asked for. A task never seen counts as short:
        exploring it is the other accounts' job: it may be a straggler, and holding it back
        for the window-bound accounts' few starts delays what the run learns about it, while
        most tasks are short and would waste those starts)."""
        if split is None:
            return True
        if not self.book.known(task):
            return True
        return (self.book.estimate(task, now) >= split) == long

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
