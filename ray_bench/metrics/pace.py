"""Observed pace, from the timestamps of valid rows only.

Pace is what the run has *delivered*, so it is computed from when valid rows finished,
never from scheduler state (in-flight cells, admitted slots): a run whose every account
is cooling has a high in-flight count and a pace of zero, and the dashboard must say so.

Everything here is pure: the clock is injected and no I/O happens, so the arithmetic is
tested on a fake clock and reused by ``status`` and the simulator.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

#: The pace windows exported as ``raybench_pace_rows_per_minute{window=...}``, in seconds.
WINDOWS: Mapping[str, float] = {"5m": 300.0, "15m": 900.0, "60m": 3600.0}

#: The window whose pace drives the finish estimate and the deadline gap. Fifteen minutes
#: spans several cells of a typical suite (cells take minutes) without lagging an hour.
ESTIMATE_WINDOW = "15m"

#: The shortest span a pace is divided by. Without it, the first row one second after
#: start would read as 60 rows/minute.
MIN_SPAN_SECONDS = 60.0


@dataclass(frozen=True)
class PaceSnapshot:
    """Everything derived from pace at one instant; ``None`` where it is not defined."""

    now: float
    rows_per_minute: Mapping[str, float]
    remaining_cells: int
    deadline: float | None
    #: remaining cells / minutes left; ``None`` without a deadline, ``inf`` once it passed
    #: with cells remaining.
    required_rows_per_minute: float | None
    #: seconds until the remaining cells are done at the observed pace; ``None`` while
    #: the observed pace is zero.
    finish_estimate_seconds: float | None
    #: rows short of the deadline at the observed pace (0 when reachable); ``None`` without
    #: a deadline.
    deadline_gap_rows: int | None


class PaceTracker:
    """Rows per minute over sliding windows, from valid-row finish times.

    ``started_at`` is when the run (or this driver session) began; a window longer than
    the time since then is divided by the elapsed time instead, so the 60m pace is not
    underestimated during the first hour.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        started_at: float | None = None,
        windows: Mapping[str, float] = WINDOWS,
        estimate_window: str = ESTIMATE_WINDOW,
    ) -> None:
        if estimate_window not in windows:
            raise ValueError(f"estimate_window {estimate_window!r} is not one of {sorted(windows)}")
        self._clock = clock
        self.started_at = clock() if started_at is None else started_at
        self.windows = dict(windows)
        self.estimate_window = estimate_window
        self._horizon = max(self.windows.values())
        # Kept sorted: rows finish on many workers and are reported out of order.
        self._times: list[float] = []
        self.total_rows = 0

    def record(self, finished_at: float) -> None:
        """Record one valid row that finished at ``finished_at`` (unix seconds)."""
        bisect.insort(self._times, finished_at)
        self.total_rows += 1

    def rows_per_minute(self, window: str, now: float | None = None) -> float:
        """Valid rows per minute over the last ``window`` (a key of :data:`WINDOWS`)."""
        now = self._clock() if now is None else now
        self._prune(now)
        length = self.windows[window]
        count = bisect.bisect_right(self._times, now) - bisect.bisect_right(
            self._times, now - length
        )
        span = min(length, max(now - self.started_at, MIN_SPAN_SECONDS))
        return count / (span / 60.0)

    def rates(self, now: float | None = None) -> dict[str, float]:
        now = self._clock() if now is None else now
        return {window: self.rows_per_minute(window, now) for window in self.windows}

    def snapshot(
        self, remaining_cells: int, deadline: float | None, now: float | None = None
    ) -> PaceSnapshot:
        now = self._clock() if now is None else now
        rates = self.rates(now)
        pace = rates[self.estimate_window]
        return PaceSnapshot(
            now=now,
            rows_per_minute=rates,
            remaining_cells=remaining_cells,
            deadline=deadline,
            required_rows_per_minute=required_pace(remaining_cells, deadline, now),
            finish_estimate_seconds=finish_estimate(remaining_cells, pace),
            deadline_gap_rows=deadline_gap(remaining_cells, pace, deadline, now),
        )

    def _prune(self, now: float) -> None:
        # Rows older than the longest window can never count again.
        cut = bisect.bisect_right(self._times, now - self._horizon)
        if cut:
            del self._times[:cut]


def required_pace(remaining_cells: int, deadline: float | None, now: float) -> float | None:
    """Rows per minute needed to finish ``remaining_cells`` by ``deadline``."""
    if deadline is None:
        return None
    if remaining_cells <= 0:
        return 0.0
    minutes_left = (deadline - now) / 60.0
    if minutes_left <= 0:
        return math.inf
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
