import pytest
from pydantic import ValidationError

from ray_bench.accounts import (
    AccountCore,
    AccountLimits,
    AdmissionRefused,
    Admit,
    HealthPolicy,
    HealthState,
    Lease,
    Outcome,
    Refusal,
    RefusalReason,
    Tuning,
    WindowQuota,
)
from ray_bench.scheduler import FakeClock


def lease(i: int, account: str = "a") -> Lease:
    return Lease(f"l{i}", f"c{i}", account)


def test_admits_up_to_max_concurrent_then_waits_for_a_finish() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=2))
    assert core.can_admit(0.0) == Admit(headroom=2)
    core.on_start(0.0, lease(1))
    core.on_start(0.0, lease(2))
    assert core.can_admit(1.0) == Refusal(RefusalReason.CONCURRENCY, None)
    with pytest.raises(AdmissionRefused, match="concurrency"):
        core.on_start(1.0, lease(3))
    core.on_finish(5.0, lease(1), Outcome.success())
    assert isinstance(core.can_admit(5.0), Admit)


def test_duplicate_lease_is_refused() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=4))
    core.on_start(0.0, lease(1))
    with pytest.raises(ValueError, match="already started"):
        core.on_start(0.0, lease(1))


def test_rate_limit_cools_shrinks_and_honours_retry_after() -> None:
    clock = FakeClock()
    core = AccountCore("a", AccountLimits(max_concurrent=8, min_concurrent=2))
    for i in range(8):
        core.on_start(clock.now(), lease(i))
    clock.advance(20)
    core.on_finish(clock.now(), lease(0), Outcome.rate_limited(120.0))
    snap = core.snapshot(clock.now())
    assert snap.state is HealthState.COOLING
    assert snap.limit == 4
    assert snap.cooldown_left == 120.0
    assert snap.recommended_parallelism == 0
    assert snap.admit == Refusal(RefusalReason.COOLING, 140.0)
    assert snap.last_error.startswith("rate_limited")
    # The rest of the burst is the same episode: no further shrink.
    core.on_finish(25.0, lease(1), Outcome.rate_limited(120.0))
    assert core.concurrency.limit == 4
    assert core.next_change(30.0) == 145.0


def test_probe_after_cooldown_then_healthy() -> None:
    policy = HealthPolicy(probe_window_s=30)
    core = AccountCore("a", AccountLimits(max_concurrent=4), tuning=Tuning(health=policy))
    core.on_start(0.0, lease(0))
    core.on_finish(10.0, lease(0), Outcome.rate_limited(60.0))
    assert not core.can_admit(69.0)
    d = core.can_admit(70.0)
    assert d == Admit(headroom=1, probe=True)
    core.on_start(70.0, lease(1))
    assert core.can_admit(71.0) == Refusal(RefusalReason.PROBING, 100.0)
    assert isinstance(core.can_admit(100.0), Admit)
    assert core.health.state is HealthState.HEALTHY


def test_probe_rate_limited_does_not_shrink_again() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=8))
    for i in range(8):
        core.on_start(0.0, lease(i))
    core.on_finish(10.0, lease(0), Outcome.rate_limited(60.0))
    assert core.concurrency.limit == 4
    assert core.can_admit(70.0) == Refusal(RefusalReason.CONCURRENCY, None)  # 7 still run
    for i in range(1, 8):
        core.on_finish(65.0, lease(i), Outcome.success())
    assert core.concurrency.limit == 4  # successes while cooling do not grow it
    core.on_start(70.0, lease(100))  # the probe
    core.on_finish(80.0, lease(100), Outcome.rate_limited(60.0))
    assert core.concurrency.limit == 4
    assert core.health.state is HealthState.COOLING


def test_success_at_saturation_grows_the_limit() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=4, min_concurrent=1))
    core.concurrency.value = 2
    core.on_start(0.0, lease(1))
    core.on_start(0.0, lease(2))  # started with 1 in flight: saturated at 2
    core.on_finish(9.0, lease(1), Outcome.success())
    assert core.concurrency.limit == 2  # lease 1 started with 0 in flight of 2
    core.on_finish(10.0, lease(2), Outcome.success())
    assert core.concurrency.limit == 3


def test_limit_regrows_by_quiet_time_after_a_storm() -> None:
    # One storm with a long Retry-After: halved once, then one step back per probe window of
    # quiet after the cooldown, without waiting for hour-long cells to succeed at saturation.
    core = AccountCore("a", AccountLimits(max_concurrent=8), tuning=Tuning(health=HealthPolicy(probe_window_s=60)))
    for i in range(8):
        core.on_start(0.0, lease(i))
    for i in range(8):  # the burst: one episode
        core.on_finish(10.0 + i, lease(i), Outcome.rate_limited(900.0))
    assert core.snapshot(20.0).limit == 4
    core.on_start(917.0, lease(100))  # the probe, still in the storm
    core.on_finish(920.0, lease(100), Outcome.rate_limited(900.0))
    assert core.snapshot(1879.0).limit == 4  # cooling until 1820, then not yet a quiet minute
    assert core.snapshot(1880.0).limit == 5
    assert core.snapshot(1820.0 + 4 * 60).limit == 8


def test_auth_failure_disables_account() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=4))
    core.on_start(0.0, lease(1))
    core.on_finish(3.0, lease(1), Outcome.auth_failed("401"))
    assert core.can_admit(1e6) == Refusal(RefusalReason.DISABLED, None)
    assert core.snapshot(4.0).recommended_parallelism == 0
    assert core.snapshot(4.0).last_error == "401"


def test_a_task_failure_is_not_the_accounts_last_error() -> None:
    """A failure blames the task: "healthy (: not found)" in `accounts status` misled."""
    core = AccountCore("a", AccountLimits(max_concurrent=4))
    core.on_start(0.0, lease(1))
    core.on_finish(1.0, lease(1), Outcome.server_error("502 bad gateway"))
    core.on_start(2.0, lease(2))
    core.on_finish(3.0, lease(2), Outcome.failure(": not found"))
    core.on_start(4.0, lease(3))
    core.on_finish(5.0, lease(3), Outcome.unjudged(0.01))
    assert core.snapshot(6.0).last_error == "server_error (502 bad gateway)"


def test_held_and_expired_refuse() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=4))
    core.health.hold()
    assert core.can_admit(0.0) == Refusal(RefusalReason.HELD, None)
    core.health.release(0.0)
    core.on_start(0.0, lease(1))
    core.on_finish(1.0, lease(1), Outcome.auth_failed("token expired", expired=True))
    assert core.can_admit(2.0) == Refusal(RefusalReason.EXPIRED, None)


def test_window_quota_is_honoured_with_its_free_time() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=4, window=WindowQuota(hours=1.0, max_cells=2)))
    core.on_start(0.0, lease(1))
    assert core.can_admit(1.0) == Admit(headroom=1)  # the window leaves only one start
    core.on_start(10.0, lease(2))
    core.on_finish(20.0, lease(1), Outcome.success())
    core.on_finish(20.0, lease(2), Outcome.success())
    assert core.can_admit(30.0) == Refusal(RefusalReason.WINDOW_CELLS, 3600.0)
    assert core.snapshot(30.0).window_used == 2
    assert isinstance(core.can_admit(3600.0), Admit)


def test_window_usd_and_spend_budget() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=4, window=WindowQuota(hours=1.0, max_usd=5.0),
                                          spend_usd=8.0))
    core.on_start(0.0, lease(1))
    core.on_finish(100.0, lease(1), Outcome.success(usd=5.0))
    assert core.can_admit(101.0) == Refusal(RefusalReason.WINDOW_USD, 3700.0)
    core.on_start(3700.0, lease(2))
    core.on_finish(3800.0, lease(2), Outcome.success(usd=3.5))
    assert core.can_admit(9000.0) == Refusal(RefusalReason.BUDGET, None)
    snap = core.snapshot(9000.0)
    assert snap.spent_usd == 8.5
    assert snap.recommended_parallelism == 0


def test_starts_per_minute() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=10, starts_per_minute=2), tuning=Tuning(burst=1))
    core.on_start(0.0, lease(1))
    assert core.can_admit(0.0) == Refusal(RefusalReason.RATE, 30.0)
    assert isinstance(core.can_admit(30.0), Admit)


def test_unknown_lease_still_teaches_health() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=2))
    core.on_finish(5.0, lease(9), Outcome.rate_limited(30.0))
    assert core.health.state is HealthState.COOLING
    assert core.inflight == 0


def test_snapshot_fields() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=3, starts_per_minute=60))
    core.on_start(0.0, lease(1))
    s = core.snapshot(0.0)
    assert (s.name, s.state, s.inflight, s.limit) == ("a", HealthState.HEALTHY, 1, 3)
    assert s.tokens == pytest.approx(59.0)
    assert s.recommended_parallelism == 3
    assert s.headroom == 2


def test_the_configured_limits_are_the_cores_frozen_and_compared_by_value() -> None:
    # one type from accounts.yaml to the core and through Ray: no translation to get wrong
    cfg = AccountLimits.model_validate({"max_concurrent": 6, "min_concurrent": 2, "starts_per_minute": 10.0,
                                        "window": {"hours": 5, "max_cells": 40}, "spend_usd": 100.0})
    core = AccountCore("a", cfg)
    assert core.limits is cfg
    assert core.window is not None and core.window.max_cells == 40
    assert cfg == AccountLimits(max_concurrent=6, min_concurrent=2, starts_per_minute=10.0,
                                window=WindowQuota(hours=5, max_cells=40), spend_usd=100.0)
    with pytest.raises(ValidationError, match="frozen"):
        cfg.max_concurrent = 7  # type: ignore[misc]


def test_limits_validation() -> None:
    with pytest.raises(ValueError, match="min_concurrent"):
        AccountLimits(max_concurrent=2, min_concurrent=3)


def test_the_budget_reserves_the_expected_cost_of_the_cells_running() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=8, spend_usd=2.0))
    core.on_start(0.0, Lease("l1", "c1", "a", usd=0.8))
    core.on_start(0.0, Lease("l2", "c2", "a", usd=0.8))
    assert core.reserved_usd == pytest.approx(1.6)
    # $1.60 reserved + $0.80 would pass $2: refused until a running cell finishes
    with pytest.raises(AdmissionRefused, match="budget"):
        core.on_start(1.0, Lease("l3", "c3", "a", usd=0.8))
    assert core.can_admit(1.0) == Refusal(RefusalReason.BUDGET, None)
    assert core.can_admit(1.0, usd=0.3) == Admit(headroom=6)
    # it cost less than expected: the difference comes back
    core.on_finish(2.0, Lease("l1", "", "a"), Outcome.success(usd=0.5))
    assert core.spent_usd == 0.5 and core.reserved_usd == pytest.approx(0.8)
    core.on_start(3.0, Lease("l3", "c3", "a", usd=0.6))
    assert core.reserved_usd == pytest.approx(1.4)
    for lease in ("l2", "l3"):
        core.on_finish(4.0, Lease(lease, "", "a"), Outcome.success(usd=0.6))
    # $1.70 spent: a $0.60 cell no longer fits, with nothing running: out of budget for good
    assert core.reserved_usd == 0.0 and core.inflight == 0
    assert core.can_admit(5.0) == Refusal(RefusalReason.BUDGET, None)
    assert isinstance(core.can_admit(5.0, usd=0.25), Admit)


def test_an_abandoned_lease_gives_its_reservation_back() -> None:
    core = AccountCore("a", AccountLimits(max_concurrent=2, spend_usd=1.0))
    core.on_start(0.0, Lease("l1", "c1", "a", usd=0.9))
    assert core.abandon("l1")
    assert core.reserved_usd == 0.0 and isinstance(core.can_admit(1.0, usd=0.9), Admit)


def test_account_cooldown_s_sets_the_first_cooldown_and_backs_off_from_it() -> None:
    """accounts.yaml's ``cooldown_s`` is the health policy's ``base_cooldown_s`` for that account:
    a short Retry-After cools it ``cooldown_s``, a longer one is honoured, and it doubles while the
    episode continues; an account without it keeps the policy's 60 s."""
    core = AccountCore("a", AccountLimits(max_concurrent=4, cooldown_s=5.0), tuning=Tuning())
    assert core.health.policy.base_cooldown_s == 5.0
    core.on_start(0.0, lease(0))
    core.on_finish(10.0, lease(0), Outcome.rate_limited(2.0))
    assert core.health.cooling_until == 15.0
    assert not isinstance(core.can_admit(14.9), Admit)
    assert core.can_admit(15.0) == Admit(headroom=1, probe=True)
    core.on_start(15.0, lease(1))
    core.on_finish(16.0, lease(1), Outcome.rate_limited(2.0))
    assert core.health.cooling_until == 26.0  # episode 2: 5 * 2
    core.on_start(27.0, lease(2))
    core.on_finish(28.0, lease(2), Outcome.rate_limited(30.0))
    assert core.health.cooling_until == 58.0  # Retry-After 30 s beats 5 * 4
    default = AccountCore("b", AccountLimits(max_concurrent=4))
    default.on_start(0.0, lease(3, "b"))
    default.on_finish(10.0, lease(3, "b"), Outcome.rate_limited(2.0))
    assert default.health.cooling_until == 70.0


@pytest.mark.parametrize("value", [0, -1, 901, float("nan")])
def test_account_cooldown_s_out_of_range_refused(value: float) -> None:
    with pytest.raises(ValidationError, match="cooldown_s"):
        AccountLimits(max_concurrent=1, cooldown_s=value)
