"""The pace gauges, computed when Prometheus scrapes (from the exporter's clock): if the
driver blocks for a while, the pace still decays towards zero instead of freezing at its last
value, which is exactly when the stall alert needs it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ray_bench.metrics.pace import PaceSnapshot


class PaceCollector:
    """Computes the pace gauges at scrape time, from the exporter's clock."""

    def __init__(self, run_id: str, refresh: Callable[[], PaceSnapshot], note_scrape: Callable[[float], None]) -> None:
        self._run_id = run_id
        self._refresh = refresh
        self._note_scrape = note_scrape

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        began = time.monotonic()
        yield from self._families(self._refresh())
        self._note_scrape(began)

    def _families(self, snap: PaceSnapshot | None = None) -> Iterator[Metric]:
        run = self._run_id
        pace = GaugeMetricFamily(
            "raybench_pace_rows_per_minute",
            "Valid rows per minute over a sliding window (from valid rows only).",
            labels=["run", "window"],
        )
        remaining = GaugeMetricFamily(
            "raybench_remaining_cells", "Cells pending or running.", labels=["run"]
        )
        required = GaugeMetricFamily(
            "raybench_required_pace_rows_per_minute",
            "Rows per minute needed to meet the deadline (only with a deadline).",
            labels=["run"],
        )
        gap = GaugeMetricFamily(
            "raybench_deadline_gap_rows",
            "Rows short of the deadline at the estimated pace; 0 when reachable (absent without "
            "a deadline or an estimate).",
            labels=["run"],
        )
        estimate = GaugeMetricFamily(
            "raybench_finish_estimate_seconds",
            "Seconds to finish at the estimated pace (absent until a window holds enough rows).",
            labels=["run"],
        )
        basis = GaugeMetricFamily(
            "raybench_pace_estimate_rows_per_minute",
            "The pace estimates use: the shortest of the 15m and 60m windows holding enough "
            "rows (absent until one does).",
            labels=["run", "window"],
        )
        if snap is not None:
            for window, value in snap.rows_per_minute.items():
                pace.add_metric([run, window], value)
            remaining.add_metric([run], snap.remaining_cells)
            if snap.required_rows_per_minute is not None:
                required.add_metric([run], snap.required_rows_per_minute)
            if snap.deadline_gap_rows is not None:
                gap.add_metric([run], snap.deadline_gap_rows)
            if snap.finish_estimate_seconds is not None:
                estimate.add_metric([run], snap.finish_estimate_seconds)
            if snap.estimate is not None:
                basis.add_metric([run, snap.estimate.window], snap.estimate.rows_per_minute)
        yield from (pace, remaining, required, gap, estimate, basis)
