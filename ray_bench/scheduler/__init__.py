"""Scheduling policy (which cell next, on which account) and clocks. Pure: no Ray, no I/O."""

from ray_bench.scheduler.clock import Clock, FakeClock, SystemClock
from ray_bench.scheduler.policy import (
    CellQueue,
    CellRef,
    Dispatcher,
    DurationBook,
    Start,
    choose_account,
    healthy_capacity,
    plan_starts,
)

__all__ = [
    "CellQueue",
    "CellRef",
    "Clock",
    "Dispatcher",
    "DurationBook",
    "FakeClock",
    "Start",
    "SystemClock",
    "choose_account",
    "healthy_capacity",
    "plan_starts",
]
