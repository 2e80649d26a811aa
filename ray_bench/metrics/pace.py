"""Observed pace, from the timestamps of valid rows only: the one formula that ``status``,
``watch`` and the Prometheus exporter all call, and that the recording rules
``run:raybench_valid_rows_per_minute:*`` (ops/prometheus/alerts.yml) compute in PromQL from
the newest session's ``raybench_valid_rows_total`` and ``raybench_run_started_timestamp_seconds``
(tests/metrics/test_pace_resume.py holds the two together on a real Prometheus).

Pace is what the run has *delivered*, so it is computed from when valid rows finished,
never from scheduler state (in-flight cells, admitted slots): a run whose every account
is cooling has a high in-flight count and a pace of zero, and the dashboard must say so.

The rule, in one place:

- a window's pace is the valid rows that finished inside the span it actually covers,
  divided by that span. The span starts at the later of the window's start and the start
  of this driver session (a resumed run does not count the hours it was stopped), and is
  never shorter than :data:`MIN_SPAN_SECONDS` (the first row one second in is not
  60 rows/min);
- a finish estimate and a deadline gap exist only once a window holds
  :data:`MIN_ROWS` rows; they use the shortest of :data:`ESTIMATE_WINDOWS` that does, and
  say so ("from 12 rows in 3 min"). Before that there is no estimate, and the text says
  why. Forty seconds of work is not a forecast.

Everything here is pure: the clock is injected and no I/O happens.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ray_bench.clock import human_span

#: The pace windows exported as ``raybench_pace_rows_per_minute{window=...}``, in seconds.
WINDOWS: Mapping[str, float] = {"5m": 300.0, "15m": 900.0, "60m": 3600.0}

#: Windows an estimate may come from, shortest first: the 15m pace follows a change of
#: speed within minutes; runs of hour-long cells fall back to the 60m one rather than
#: reading a 15-minute pause between finishes as a pace of zero.
ESTIMATE_WINDOWS: tuple[str, ...] = ("15m", "60m")

#: Rows a window needs before its pace is a basis for an estimate.
MIN_ROWS = 5

#: The shortest span a pace is divided by.
MIN_SPAN_SECONDS = 60.0


@dataclass(frozen=True)
class WindowPace:
    """Valid rows inside one window and the span they were counted over."""

    window: str
    rows: int
    #: What the rows are divided by: the span covered, at least MIN_SPAN_SECONDS.
    span_seconds: float
    #: The span actually covered (shorter than ``span_seconds`` in a session's first minute).
    covered_seconds: float = 0.0

    @property
    def rows_per_minute(self) -> float:
        return self.rows / (self.span_seconds / 60.0)

    def basis(self) -> str:
        """``from 12 rows in 3 min`` (``... in 25 s, counted as 1 min`` in the first minute)."""
        text = f"from {self.rows} row{'s' if self.rows != 1 else ''} in {human_span(self.covered_seconds)}"
        if self.covered_seconds < self.span_seconds:
            text += f", counted as {human_span(self.span_seconds)}"
        return text


@dataclass(frozen=True)
class PaceSnapshot:
    """Everything derived from pace at one instant; ``None`` where it is not defined."""

    now: float
    started_at: float
    windows: Mapping[str, WindowPace]
    remaining_cells: int
    deadline: float | None
    #: The window the estimate comes from, ``None`` until one holds MIN_ROWS rows.
    estimate: WindowPace | None
    #: remaining cells / minutes left; ``None`` without a deadline or once it passed.
    required_rows_per_minute: float | None
    #: seconds until the remaining cells are done at the estimate's pace.
    finish_estimate_seconds: float | None
    #: rows short of the deadline at the estimate's pace (0 when reachable); ``None``
    #: without a deadline or an estimate.
    deadline_gap_rows: int | None

    @property
    def rows_per_minute(self) -> dict[str, float]:
        return {name: w.rows_per_minute for name, w in self.windows.items()}

    @property
    def estimate_rows_per_minute(self) -> float | None:
        return None if self.estimate is None else self.estimate.rows_per_minute

    def history(self) -> PaceSnapshot:
        """The pace of a session that is over (paused, stopped, finished) or not yet begun: what
        it had, and no finish estimate nor deadline gap from it (``status`` and the exporter
        alike; a paused run's linger kept serving a finish estimate, issue 56)."""
        return replace(self, finish_estimate_seconds=None, deadline_gap_rows=None)

    def basis(self) -> str:
        """Where the estimate comes from, or why there is none yet."""
        if self.estimate is not None:
            return f"{self.estimate.basis()} ({self.estimate.window} window)"
        longest = self.windows[ESTIMATE_WINDOWS[-1]]
        return (f"no estimate yet: {longest.rows} row{'s' if longest.rows != 1 else ''} in "
                f"{human_span(longest.covered_seconds)}, an estimate needs {MIN_ROWS}")


def pace_snapshot(
    finish_times: Iterable[float],
    *,
    now: float,
    started_at: float,
    remaining_cells: int,
    deadline: float | None,
    windows: Mapping[str, float] = WINDOWS,
) -> PaceSnapshot:
    """The pace of valid rows that finished at ``finish_times`` (unix seconds, any order)."""
    times = sorted(finish_times)
    measured = {name: _window(times, name, length, now, started_at) for name, length in windows.items()}
    estimate = next((measured[w] for w in ESTIMATE_WINDOWS
                     if w in measured and measured[w].rows >= MIN_ROWS), None)
    rate = None if estimate is None else estimate.rows_per_minute
    return PaceSnapshot(
        now=now, started_at=started_at, windows=measured, remaining_cells=remaining_cells,
        deadline=deadline, estimate=estimate,
        required_rows_per_minute=required_pace(remaining_cells, deadline, now),
        finish_estimate_seconds=None if rate is None else finish_estimate(remaining_cells, rate),
        deadline_gap_rows=None if rate is None else deadline_gap(remaining_cells, rate, deadline, now),
    )


def _window(times: Sequence[float], name: str, length: float, now: float, started_at: float) -> WindowPace:
    start = max(now - length, started_at)
    # A sliding window excludes its start instant; the session's start belongs to it.
    first = bisect.bisect_left(times, start) if start == started_at else bisect.bisect_right(times, start)
    rows = bisect.bisect_right(times, now) - first
    return WindowPace(name, max(0, rows), max(now - start, MIN_SPAN_SECONDS), max(0.0, now - start))


class PaceTracker:
    """Valid-row finish times of one driver session, for the exporter (which answers scrapes
    between ledger reads). ``started_at`` is when this driver session began."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        started_at: float | None = None,
        windows: Mapping[str, float] = WINDOWS,
    ) -> None:
        self._clock = clock
        self.started_at = clock() if started_at is None else started_at
        self.windows = dict(windows)
        self._horizon = max(self.windows.values())
        # Kept sorted: rows finish on many workers and are reported out of order.
        self._times: list[float] = []
        self.total_rows = 0

    def record(self, finished_at: float) -> None:
        """Record one valid row that finished at ``finished_at`` (unix seconds)."""
        bisect.insort(self._times, finished_at)
        self.total_rows += 1

    def rows_per_minute(self, window: str, now: float | None = None) -> float:
        return self.rates(now)[window]

    def rates(self, now: float | None = None) -> dict[str, float]:
        return self.snapshot(0, None, now).rows_per_minute

    def snapshot(self, remaining_cells: int, deadline: float | None, now: float | None = None) -> PaceSnapshot:
        now = self._clock() if now is None else now
        # Rows older than the longest window can never count again.
        del self._times[: bisect.bisect_right(self._times, now - self._horizon)]
        return pace_snapshot(self._times, now=now, started_at=self.started_at,
                             remaining_cells=remaining_cells, deadline=deadline, windows=self.windows)


def required_pace(remaining_cells: int, deadline: float | None, now: float) -> float | None:
    """Rows per minute needed to finish ``remaining_cells`` by ``deadline``; ``None`` without
    a deadline and once it has passed (no pace meets it then: the deadline gap says how
    many rows are short, and a gauge of +Inf breaks every panel and ratio)."""
    if deadline is None:
        return None
    if remaining_cells <= 0:
        return 0.0
    minutes_left = (deadline - now) / 60.0
    if minutes_left <= 0:
        return None
    return remaining_cells / minutes_left


def finish_estimate(remaining_cells: int, rows_per_minute: float) -> float | None:
    """Seconds to finish at the observed pace; ``None`` while there is no pace."""
    if rows_per_minute <= 0:
        return None
    return max(0, remaining_cells) / rows_per_minute * 60.0


def deadline_gap(
    remaining_cells: int, rows_per_minute: float, deadline: float | None, now: float
) -> int | None:
    """Rows the observed pace leaves undone at the deadline; 0 when it is reachable."""
    if deadline is None:
        return None
    minutes_left = max(0.0, (deadline - now) / 60.0)
    # A tolerance keeps a float product like 9.999999 from counting as one row short.
    short = remaining_cells - rows_per_minute * minutes_left
    return max(0, math.ceil(short - 1e-9))
