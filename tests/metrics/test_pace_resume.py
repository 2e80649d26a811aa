"""One pace across a pause and a resume, on a real Prometheus: the recording rule reads what
the exporter (and `status`, through the same ray_bench.metrics.pace) reads, the rows this
session made in its span, not those of the session before it (issue 56: the rule read 17.6
rows/min where the session made 8.2)."""

from __future__ import annotations

import time

import pytest
from support.prometheus import PrometheusServer

from ray_bench.metrics import MetricsExporter

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

RUN = "resumed"
RULE = f'run:raybench_valid_rows_per_minute:rate5m{{run="{RUN}"}}'


def make_rows(exporter: MetricsExporter, n: int, every: float) -> list[float]:
    made = []
    for _ in range(n):
        exporter.attempt_started("baseline", "a", "local")
        made.append(time.time())
        exporter.attempt_finished("baseline", "a", "local", outcome="valid", failure_class=None, valid=True,
                                  reward=1.0, phase_seconds={}, cost_usd=0.0, finished_at=made[-1])
        time.sleep(every)
    return made


def test_the_pace_rule_after_a_resume_is_the_sessions_pace(prometheus: PrometheusServer) -> None:
    # The first session makes 24 rows and is paused (its exporter goes; its samples stay in
    # the window).
    with MetricsExporter(RUN, prometheus.state_root, arms=["baseline"]) as first:
        first.session_started(time.time())
        prometheus.wait_for_target(RUN)
        make_rows(first, 24, 0.1)
        prometheus.wait_for_value(f'sum(raybench_valid_rows_total{{run="{RUN}"}})', 24)
        first.stop(final_scrape_timeout=5)
    prometheus.wait_for_target_gone(RUN)

    # The resume: a new exporter (a new process, on a new port, as `execute` does by default)
    # makes 6 rows.
    with MetricsExporter(RUN, prometheus.state_root, arms=["baseline"]) as second:
        resumed_at = time.time()
        second.session_started(resumed_at)
        prometheus.wait_for_target(RUN)
        made = make_rows(second, 6, 0.3)
        this_session = f'sum(raybench_valid_rows_total{{run="{RUN}",instance="{second.url.split("/")[2]}"}})'
        prometheus.wait_for_value(this_session, 6)

        def truth(now: float) -> float:
            """The rows really made in the window's span of this session, per minute (a span
            under a minute counted as one, the shared rule's floor)."""
            in_window = [t for t in made if max(now - 300, resumed_at) <= t <= now]
            return len(in_window) / (max(now - resumed_at, 60.0) / 60.0)

        def settled() -> tuple[float, float] | None:
            # the rule is evaluated every second, after the scrape; a wrong one never settles here
            now, value = time.time(), prometheus.scalar(RULE)
            return (value, now) if value is not None and abs(value - truth(now)) <= 0.1 * truth(now) else None

        rule, at = prometheus.wait_for(settled, "the recording rule within 10 % of this session's pace",
                                       timeout=15)
        exporter = second.refresh(at).rows_per_minute["5m"]

    assert truth(at) == pytest.approx(6.0)
    assert rule == pytest.approx(truth(at), rel=0.10)
    assert exporter == pytest.approx(truth(at), rel=0.10)
    # The old rule's arithmetic (every series' increase over the window, divided by this
    # session's age) counts the first session's rows too: what this test would have caught.
    naive = prometheus.scalar(f'sum(increase(raybench_valid_rows_total{{run="{RUN}"}}[5m])) / 60 * 60')
    assert naive is not None and naive > 2 * truth(at)
