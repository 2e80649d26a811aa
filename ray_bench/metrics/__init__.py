"""Observability: the Prometheus exporter the driver owns, and pace arithmetic.

The metric names and label keys are a fixed contract (DESIGN.md, "Metrics"); ``ops/``
holds the scrape config, alert rules and Grafana dashboard built on them.
"""

from __future__ import annotations

from ray_bench.metrics.exporter import (
    ACCOUNT_STATES,
    CELL_STATES,
    PHASES,
    SANDBOX_STATES,
    AccountState,
    AccountView,
    CellState,
    MetricsExporter,
    Phase,
)
from ray_bench.metrics.pace import WINDOWS, PaceSnapshot, PaceTracker, pace_snapshot
from ray_bench.metrics.targets import prune_stale_targets, target_file

__all__ = [
    "ACCOUNT_STATES",
    "CELL_STATES",
    "PHASES",
    "SANDBOX_STATES",
    "WINDOWS",
    "AccountState",
    "AccountView",
    "CellState",
    "MetricsExporter",
    "PaceSnapshot",
    "PaceTracker",
    "Phase",
    "pace_snapshot",
    "prune_stale_targets",
    "target_file",
]
