"""Clocks: the one place the scheduler learns the time.

The functional core takes ``now`` (seconds) as an argument; the driver reads it, and waits,
only through a :class:`Clock`. ``execute`` uses :class:`SystemClock` (wall time: admission
actors outlive any driver and compare against login expiries, both in unix seconds); tests
and the simulator use :class:`FakeClock`, where waiting moves time forward at once. Spans of
time are shown to operators by :func:`human_span`.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float:
        """Seconds: for durations, cooldowns, windows and admission."""
        ...

    def wall(self) -> float:
        """Unix seconds: for records that humans and other hosts read."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait (a fake clock just moves on)."""
        ...


class SystemClock:
    """Unix time for both; ``time.sleep`` to wait."""

    def now(self) -> float:
        return time.time()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that moves only when told to. ``wall`` is ``now`` plus a fixed epoch."""

    def __init__(self, start: float = 0.0, *, epoch: float = 1_700_000_000.0) -> None:
        self._now = start
        self._epoch = epoch

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._epoch + self._now

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds
        return self._now

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError("a clock does not go backwards")
        self._now = t


def human_span(seconds: float) -> str:
    """``40 s``, ``3 min``, ``2.5 h``: spans as an operator reads them."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 120:
        return "1 min" if round(seconds) == 60 else f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
