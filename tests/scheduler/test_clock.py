import pytest

from ray_bench.scheduler import Clock, FakeClock, SystemClock


def test_fake_clock_moves_only_forward() -> None:
    c = FakeClock(10.0, epoch=1000.0)
    assert c.now() == 10.0
    assert c.wall() == 1010.0
    assert c.advance(5) == 15.0
    c.set(20.0)
    assert c.now() == 20.0
    with pytest.raises(ValueError, match="backwards"):
        c.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        c.set(19.0)


def test_system_clock_is_a_clock_and_monotonic() -> None:
    c = SystemClock()
    assert isinstance(c, Clock)
    assert isinstance(FakeClock(), Clock)
    a = c.now()
    assert c.now() >= a
    assert c.wall() > 1.6e9
