"""The backend pool learnt from quota refusals: down to what runs, back up one per create."""

from __future__ import annotations

from ray_bench.scheduler.quota_fit import QuotaFit


def test_a_refusal_drops_the_limit_to_what_runs_and_creates_grow_it_back() -> None:
    fit = QuotaFit(ceiling=10)
    assert fit.limit("daytona") == 10 and fit.admits("daytona", 9)
    assert fit.on_quota("daytona", running=4) == 4
    assert not fit.admits("daytona", 4) and fit.admits("daytona", 3)
    assert fit.on_quota("daytona", running=6) == 4  # never raised by a refusal
    assert fit.limit("docker") == 10  # per backend
    for _ in range(5):
        fit.on_created("daytona")
    assert fit.limit("daytona") == 9
    fit.on_created("daytona")
    fit.on_created("daytona")
    assert fit.limit("daytona") == 10 and fit.limits == {}


def test_a_refusal_with_nothing_running_keeps_one_slot() -> None:
    fit = QuotaFit(ceiling=3)
    assert fit.on_quota("daytona", running=0) == 1
    assert fit.refusals == 1


def test_creates_are_paced_at_the_pools_rate_per_backend() -> None:
    fit = QuotaFit(ceiling=100, creates_per_minute={"daytona": 60.0})  # one a second, burst 6
    assert fit.creates_available("daytona", 0.0) == 6
    assert fit.creates_available("docker", 0.0) == 100 and fit.create_wait("docker", 0.0) == 0.0
    for _ in range(6):
        fit.on_create_sent("daytona", 0.0)
    assert fit.creates_available("daytona", 0.0) == 0
    assert fit.create_wait("daytona", 0.0) == 1.0
    assert fit.creates_available("daytona", 2.5) == 2
    assert fit.creates_available("daytona", 600.0) == 6  # never more than the burst


def test_a_slow_pool_still_admits_a_first_create() -> None:
    fit = QuotaFit(ceiling=10, creates_per_minute={"daytona": 0.5})
    assert fit.creates_available("daytona", 0.0) == 1
    fit.on_create_sent("daytona", 0.0)
    assert fit.create_wait("daytona", 0.0) == 120.0
