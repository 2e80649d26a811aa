import pytest

from ray_bench.accounts import AimdLimit


def test_starts_at_ceiling_and_halves_once_per_episode() -> None:
    c = AimdLimit(floor=1, ceiling=8)
    assert c.limit == 8
    assert c.on_rate_limited(now=100.0, started_at=90.0)
    assert c.limit == 4
    # Attempts that were in flight before the decrease are the same episode.
    assert not c.on_rate_limited(now=101.0, started_at=95.0)
    assert c.limit == 4
    # An attempt started after the decrease is a new episode.
    assert c.on_rate_limited(now=200.0, started_at=150.0)
    assert c.limit == 2


def test_never_below_floor() -> None:
    c = AimdLimit(floor=3, ceiling=8)
    for t in range(1, 10):
        c.on_rate_limited(now=float(10 * t), started_at=float(10 * t - 1))
    assert c.limit == 3


def test_increases_only_when_saturated_and_stops_at_ceiling() -> None:
    c = AimdLimit(floor=1, ceiling=6, initial=3)
    assert not c.on_success(inflight_at_start=0)  # 1 of 3 used: says nothing
    assert c.limit == 3
    assert c.on_success(inflight_at_start=2)  # 3 of 3 used
    assert c.limit == 4
    for _ in range(10):
        c.on_success(inflight_at_start=c.limit)
    assert c.limit == 6


@pytest.mark.parametrize(("floor", "ceiling"), [(0, 4), (5, 4)])
def test_rejects_bad_bounds(floor: int, ceiling: int) -> None:
    with pytest.raises(ValueError, match="floor"):
        AimdLimit(floor=floor, ceiling=ceiling)


def test_regrows_one_step_per_quiet_interval_after_the_cooldown() -> None:
    c = AimdLimit(floor=1, ceiling=8, recovery_s=60.0)
    assert c.on_rate_limited(now=100.0, started_at=90.0)
    c.quiet_from(1000.0)  # the cooldown the signal imposed ends here
    assert c.tick(999.0) == 4
    assert c.tick(1059.0) == 4
    assert c.tick(1060.0) == 5
    assert c.tick(1000.0 + 4 * 60) == 8
    assert c.tick(99_999.0) == 8  # never above the ceiling


def test_any_signal_restarts_the_quiet_time() -> None:
    c = AimdLimit(floor=1, ceiling=8, recovery_s=60.0)
    c.on_rate_limited(now=100.0, started_at=90.0)
    c.quiet_from(160.0)
    assert c.tick(220.0) == 5
    c.quiet_from(250.0)  # a probe's signal: no shrink, but no growth for a while either
    assert c.tick(309.0) == 5
    assert c.tick(310.0) == 6
    # A late signal of the same episode shrinks nothing, but it is not quiet either.
    assert not c.on_rate_limited(now=320.0, started_at=95.0)
    assert c.tick(370.0) == 6
    assert c.tick(380.0) == 7


def test_no_growth_by_time_without_a_recovery_interval() -> None:
    c = AimdLimit(floor=1, ceiling=8)
    c.on_rate_limited(now=100.0, started_at=90.0)
    assert c.tick(1e9) == 4


def test_rejects_a_non_positive_recovery_interval() -> None:
    with pytest.raises(ValueError, match="recovery_s"):
        AimdLimit(floor=1, ceiling=4, recovery_s=0.0)
