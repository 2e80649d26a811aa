"""Scheduling: the pure core (cell order, account choice) and clocks; the driver loop lives in
:mod:`ray_bench.scheduler.driver`. The core is pure: no Ray, no I/O."""

from ray_bench.clock import Clock, FakeClock, SystemClock
from ray_bench.scheduler.core import Candidate, LeaseRequest, assign
from ray_bench.scheduler.order import CellQueue, CellRef, DurationBook

__all__ = [
    "Candidate",
    "CellQueue",
    "CellRef",
    "Clock",
    "DurationBook",
    "FakeClock",
    "LeaseRequest",
    "SystemClock",
    "assign",
]
