"""Clocks: the one place the scheduler learns the time.

The functional core takes ``now`` (seconds, monotonic) as an argument; drivers read it from
a :class:`Clock`. Tests and the simulator use :class:`FakeClock`.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds: for durations, cooldowns and windows."""
        ...

    def wall(self) -> float:
        """Unix seconds: for records that humans and other hosts read."""
        ...


class SystemClock:
    """``time.monotonic`` for scheduling, ``time.time`` for records."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to. ``wall`` is ``now`` plus a fixed epoch."""

    def __init__(self, start: float = 0.0, *, epoch: float = 1_700_000_000.0) -> None:
        self._now = start
        self._epoch = epoch

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._epoch + self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds
        return self._now

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError("a clock does not go backwards")
        self._now = t
