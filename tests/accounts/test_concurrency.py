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
