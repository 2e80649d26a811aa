import pytest

from ray_bench.accounts import RollingWindowQuota


def test_cell_cap_is_rolling_not_calendar() -> None:
    q = RollingWindowQuota(3600, max_cells=2)
    q.record_start(0.0)
    q.record_start(1800.0)
    assert q.cells_left(1801.0) == 0
    # The first start leaves the window at 3600, the second at 5400.
    assert q.cells_free_at(1801.0) == 3600.0
    assert q.cells_left(3600.0) == 1
    q.record_start(3600.0)
    assert q.cells_free_at(3601.0) == 5400.0


def test_uncapped_is_always_free() -> None:
    q = RollingWindowQuota(60)
    for t in range(100):
        q.record_start(float(t) / 10)
    assert q.cells_left(9.9) is None
    assert q.cells_free_at(9.9) == 9.9
    assert q.cells_used(9.9) == 100
    assert q.cells_used(60.55) == 94  # starts at 0.0 .. 0.5 have left the window


def test_usd_cap_frees_when_enough_spend_expires() -> None:
    q = RollingWindowQuota(100, max_usd=10.0)
    q.record_usd(0.0, 6.0)
    q.record_usd(50.0, 6.0)
    assert q.usd_used(60.0) == pytest.approx(12.0)
    assert q.usd_free_at(60.0) == 100.0  # dropping the first $6 brings us under $10
    assert q.usd_used(100.0) == pytest.approx(6.0)
    assert q.usd_free_at(100.0) == 100.0


def test_rejects_empty_window() -> None:
    with pytest.raises(ValueError, match="window_s"):
        RollingWindowQuota(0)


def test_waking_at_the_free_time_finds_the_start_expired() -> None:
    # (0.1 + 18000) - 18000 < 0.1 in floating point: an expiry test written as
    # ``at <= now - window`` kept this start while ``cells_free_at`` said it had left.
    q = RollingWindowQuota(18000.0, max_cells=1)
    q.record_start(0.1)
    free = q.cells_free_at(1.0)
    assert free == 0.1 + 18000.0
    assert q.cells_left(free) == 1
    assert q.cells_free_at(free) == free
