"""Rolling-window quotas: at most N cell starts and/or D dollars in any window of H hours.

A cell start counts at its start time; dollars count when the attempt reports its cost
(at finish). The window is *rolling*, not calendar-aligned: it is what subscription plans
with a "5-hour limit" enforce, and it is the stricter reading.
"""

from __future__ import annotations

from collections import deque


class RollingWindowQuota:
    """Cells and dollars used in the trailing ``window_s`` seconds."""

    def __init__(self, window_s: float, *, max_cells: int | None = None,
                 max_usd: float | None = None) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self.max_cells = max_cells
        self.max_usd = max_usd
        self._cells: deque[float] = deque()
        self._usd: deque[tuple[float, float]] = deque()
        self._usd_sum = 0.0

    def _expire(self, now: float) -> None:
        # ``at + window_s <= now``, not ``at <= now - window_s``: the same expression as
        # the free-at times below, so that waking at a free-at time always finds the start
        # expired (the other form differs by one rounding and admitted over the cap).
        w = self.window_s
        while self._cells and self._cells[0] + w <= now:
            self._cells.popleft()
        while self._usd and self._usd[0][0] + w <= now:
            self._usd_sum -= self._usd.popleft()[1]
        if not self._usd:
            self._usd_sum = 0.0

    def cells_used(self, now: float) -> int:
        self._expire(now)
        return len(self._cells)

    def usd_used(self, now: float) -> float:
        self._expire(now)
        return self._usd_sum

    def cells_left(self, now: float) -> int | None:
        """Starts still allowed in the current window (``None`` when uncapped)."""
        if self.max_cells is None:
            return None
        return max(0, self.max_cells - self.cells_used(now))

    def restore(self, starts: list[float], spend: list[tuple[float, float]]) -> None:
        """Start from what an earlier holder of this account used (sorted by time)."""
        self._cells.extend(starts)
        for at, usd in spend:
            self._usd.append((at, usd))
            self._usd_sum += usd

    def reset(self, starts: list[float], spend: list[tuple[float, float]]) -> None:
        """Hold exactly these starts and spend (sorted by time): what every run used."""
        self._cells.clear()
        self._usd.clear()
        self._usd_sum = 0.0
        self.restore(starts, spend)

    def record_start(self, now: float) -> None:
        self._expire(now)
        self._cells.append(now)

    def record_usd(self, now: float, usd: float) -> None:
        if usd > 0:
            self._expire(now)
            self._usd.append((now, usd))
            self._usd_sum += usd

    def cells_free_at(self, now: float) -> float:
        """When the next start fits the cell cap (``now`` if it fits already)."""
        self._expire(now)
        if self.max_cells is None or len(self._cells) < self.max_cells:
            return now
        # The start that must expire is the one that brings us back under the cap.
        return self._cells[len(self._cells) - self.max_cells] + self.window_s

    def usd_free_at(self, now: float) -> float:
        """When spend in the window drops under the dollar cap (``now`` if it is under)."""
        self._expire(now)
        if self.max_usd is None or self._usd_sum < self.max_usd:
            return now
        total = self._usd_sum
        for at, usd in self._usd:
            total -= usd
            if total < self.max_usd:
                return at + self.window_s
        return now  # pragma: no cover - the loop always returns once total reaches 0
