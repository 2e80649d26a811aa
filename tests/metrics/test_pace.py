"""PaceTracker on a fake clock: pace from valid-row timestamps only."""

from __future__ import annotations

import pytest

from ray_bench.metrics.pace import (
    MIN_ROWS,
    PaceTracker,
    deadline_gap,
    finish_estimate,
    pace_snapshot,
    required_pace,
)

T0 = 1_700_000_000.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def tracker(clock: FakeClock) -> PaceTracker:
    return PaceTracker(clock)


def test_no_rows_means_zero_pace_and_no_estimate(tracker: PaceTracker, clock: FakeClock) -> None:
    clock.advance(600)
    assert tracker.rates() == {"5m": 0.0, "15m": 0.0, "60m": 0.0}
    snap = tracker.snapshot(remaining_cells=10, deadline=None)
    assert snap.finish_estimate_seconds is None
    assert snap.required_rows_per_minute is None
    assert snap.deadline_gap_rows is None


def test_steady_pace_over_full_windows(tracker: PaceTracker, clock: FakeClock) -> None:
    # One row a minute for two hours: every window reads 1 row/minute.
    for _ in range(120):
        clock.advance(60)
        tracker.record(clock.now)
    assert tracker.rates() == pytest.approx({"5m": 1.0, "15m": 1.0, "60m": 1.0})


def test_windows_slide(tracker: PaceTracker, clock: FakeClock) -> None:
    clock.advance(3600)
    for i in range(10):  # ten rows between 20 and 11 minutes ago
        tracker.record(clock.now - 1200 + i * 60)
    assert tracker.rows_per_minute("5m") == 0.0
    assert tracker.rows_per_minute("15m") == pytest.approx(4 / 15)  # rows 11..14 min ago
    assert tracker.rows_per_minute("60m") == pytest.approx(10 / 60)
    clock.advance(3600)
    assert tracker.rates() == {"5m": 0.0, "15m": 0.0, "60m": 0.0}


def test_early_in_the_run_windows_divide_by_elapsed_time(
    tracker: PaceTracker, clock: FakeClock
) -> None:
    # Ten minutes in, ten rows: the 60m window must not read 10/60.
    for _ in range(10):
        clock.advance(60)
        tracker.record(clock.now)
    assert tracker.rows_per_minute("60m") == pytest.approx(1.0)
    assert tracker.rows_per_minute("15m") == pytest.approx(1.0)
    assert tracker.rows_per_minute("5m") == pytest.approx(1.0)


def test_first_row_seconds_after_start_is_not_a_huge_pace(
    tracker: PaceTracker, clock: FakeClock
) -> None:
    clock.advance(1)
    tracker.record(clock.now)
    assert tracker.rows_per_minute("5m") == pytest.approx(1.0)


def test_rows_reported_out_of_order(tracker: PaceTracker, clock: FakeClock) -> None:
    clock.advance(3600)
    for offset in (30, 400, 10, 200, 1000):
        tracker.record(clock.now - offset)
    assert tracker.rows_per_minute("5m") == pytest.approx(3 / 5)
    assert tracker.rows_per_minute("15m") == pytest.approx(4 / 15)
    assert tracker.total_rows == 5


def test_rows_older_than_the_longest_window_are_forgotten(
    tracker: PaceTracker, clock: FakeClock
) -> None:
    tracker.record(clock.now)
    clock.advance(7200)
    tracker.rates()
    assert tracker._times == []
    assert tracker.total_rows == 1


def test_started_at_can_be_given(clock: FakeClock) -> None:
    tracker = PaceTracker(clock, started_at=clock.now - 3600)
    tracker.record(clock.now)
    assert tracker.rows_per_minute("60m") == pytest.approx(1 / 60)


def test_snapshot_with_deadline(tracker: PaceTracker, clock: FakeClock) -> None:
    for _ in range(30):  # 2 rows/minute for 15 minutes
        clock.advance(30)
        tracker.record(clock.now)
    snap = tracker.snapshot(remaining_cells=40, deadline=clock.now + 10 * 60)
    assert snap.rows_per_minute["15m"] == pytest.approx(2.0)
    assert snap.required_rows_per_minute == pytest.approx(4.0)
    assert snap.finish_estimate_seconds == pytest.approx(20 * 60)
    assert snap.deadline_gap_rows == 20
    assert snap.remaining_cells == 40
    assert snap.now == clock.now


def test_required_pace() -> None:
    assert required_pace(10, None, T0) is None
    assert required_pace(10, T0 + 300, T0) == pytest.approx(2.0)
    assert required_pace(0, T0 + 300, T0) == 0.0
    assert required_pace(0, T0 - 300, T0) == 0.0
    # Past the deadline no pace meets it: no value (the gap says how far short), never +Inf.
    assert required_pace(1, T0, T0) is None
    assert required_pace(1, T0 - 1, T0) is None


def test_finish_estimate_uses_observed_pace_only() -> None:
    assert finish_estimate(10, 0.0) is None
    assert finish_estimate(10, 2.0) == pytest.approx(300.0)
    assert finish_estimate(0, 0.0) is None
    assert finish_estimate(0, 1.0) == 0.0


def test_deadline_gap() -> None:
    assert deadline_gap(10, 1.0, None, T0) is None
    assert deadline_gap(10, 1.0, T0 + 600, T0) == 0  # exactly reachable
    assert deadline_gap(10, 2.0, T0 + 600, T0) == 0
    assert deadline_gap(10, 0.5, T0 + 600, T0) == 5
    assert deadline_gap(10, 0.55, T0 + 600, T0) == 5  # 4.5 rows short rounds up
    assert deadline_gap(10, 0.0, T0 + 600, T0) == 10
    assert deadline_gap(10, 5.0, T0 - 60, T0) == 10  # the deadline passed
    assert deadline_gap(0, 0.0, T0 + 600, T0) == 0
    # 0.1 * 100 is 10.000000000000002 in floats; still exactly reachable.
    assert deadline_gap(10, 0.1, T0 + 6000, T0) == 0


# -- the one rule that status, watch and the exporter share ---------------------------------


def test_a_young_run_is_divided_by_the_span_it_covers_not_the_window() -> None:
    # The case: 100 s into a run, 10 valid rows. Prometheus and status must both
    # read 6 rows/min (status used to divide by 15 minutes and say 0.667).
    snap = pace_snapshot([T0 + 10 * (i + 1) for i in range(10)], now=T0 + 100, started_at=T0,
                         remaining_cells=18, deadline=T0 + 280)
    assert snap.rows_per_minute == pytest.approx({"5m": 6.0, "15m": 6.0, "60m": 6.0})
    assert snap.estimate is not None and snap.estimate.window == "15m"
    assert snap.basis() == "from 10 rows in 100 s (15m window)"
    assert snap.finish_estimate_seconds == pytest.approx(180.0)
    assert snap.required_rows_per_minute == pytest.approx(6.0)
    assert snap.deadline_gap_rows == 0


def test_no_estimate_until_enough_rows() -> None:
    # Forty seconds and two rows: a pace exists, a forecast does not.
    snap = pace_snapshot([T0 + 20, T0 + 40], now=T0 + 40, started_at=T0, remaining_cells=30,
                         deadline=T0 + 3600)
    assert snap.estimate is None
    assert snap.finish_estimate_seconds is None and snap.deadline_gap_rows is None
    assert snap.required_rows_per_minute == pytest.approx(30 / (3560 / 60))
    assert snap.basis() == f"no estimate yet: 2 rows in 40 s, an estimate needs {MIN_ROWS}"
    # in the first minute the span covered is said, and what it was counted as
    early = pace_snapshot([T0 + 5 * i for i in range(1, 7)], now=T0 + 30, started_at=T0, remaining_cells=9,
                          deadline=None)
    assert early.basis() == "from 6 rows in 30 s, counted as 1 min (15m window)"


def test_hour_long_cells_fall_back_to_the_60m_window() -> None:
    # Six rows in the last hour, none in the last 15 minutes: 0.1 rows/min, not zero.
    start = T0 - 7200
    times = [T0 - 3000 + 400 * i for i in range(6)]  # the last one 1000 s ago
    snap = pace_snapshot(times, now=T0, started_at=start, remaining_cells=6, deadline=None)
    assert snap.windows["15m"].rows == 0
    assert snap.estimate is not None and snap.estimate.window == "60m"
    assert snap.estimate_rows_per_minute == pytest.approx(0.1)
    assert snap.finish_estimate_seconds == pytest.approx(3600.0)


def test_a_resumed_session_counts_from_its_own_start() -> None:
    # Rows of the session before a stop are not divided by the time since the resume.
    before = [T0 - 600 + 10 * i for i in range(30)]
    snap = pace_snapshot([*before, T0 + 30, T0 + 60], now=T0 + 120, started_at=T0,
                         remaining_cells=5, deadline=None)
    assert snap.windows["15m"].rows == 2
    assert snap.windows["15m"].span_seconds == 120


def test_the_tracker_and_the_function_agree() -> None:
    clock = FakeClock()
    tracker = PaceTracker(clock)
    times = [T0 + 7 * i for i in range(1, 40)]
    for t in times:
        tracker.record(t)
    clock.advance(400)
    assert tracker.snapshot(10, T0 + 1000) == pace_snapshot(
        times, now=clock.now, started_at=T0, remaining_cells=10, deadline=T0 + 1000)
