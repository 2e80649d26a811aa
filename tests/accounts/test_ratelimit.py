import math

import pytest

from ray_bench.accounts import TokenBucket


def test_burst_then_refill_at_rate() -> None:
    b = TokenBucket(6, burst=2, now=0.0)  # one token per 10 s
    assert b.try_take(0.0)
    assert b.try_take(0.0)
    assert not b.try_take(0.0)
    assert b.wait_s(0.0) == pytest.approx(10.0)
    assert not b.try_take(9.9)
    assert b.try_take(10.0)


def test_refill_is_capped_at_burst() -> None:
    b = TokenBucket(60, burst=3, now=0.0)
    for _ in range(3):
        assert b.try_take(0.0)
    assert b.tokens(1000.0) == pytest.approx(3.0)


def test_default_burst_is_one_minute_and_at_least_one() -> None:
    assert TokenBucket(30).burst == 30
    slow = TokenBucket(0.5)
    assert slow.burst == 1
    assert slow.try_take(0.0)
    assert slow.wait_s(0.0) == pytest.approx(120.0)


def test_unlimited() -> None:
    b = TokenBucket(None)
    assert all(b.try_take(0.0) for _ in range(1000))
    assert b.tokens(0.0) == math.inf
    assert b.wait_s(0.0) == 0.0


@pytest.mark.parametrize(("rate", "burst"), [(0, None), (-1, None), (10, 0.5)])
def test_rejects_bad_config(rate: float, burst: float | None) -> None:
    with pytest.raises(ValueError, match="must be"):
        TokenBucket(rate, burst=burst)
