"""Every transition of the table in ray_bench/accounts/health.py."""

import pytest

from ray_bench.accounts import AccountHealth, HealthPolicy, HealthState

P = HealthPolicy(max_auth_failures=2, base_cooldown_s=60, max_cooldown_s=600,
                 default_retry_after_s=30, probe_window_s=60)


def cooling(now: float = 100.0, retry_after: float | None = None) -> AccountHealth:
    h = AccountHealth(P)
    h.on_rate_limited(now, started_at=now - 10, retry_after=retry_after)
    return h


def degraded() -> AccountHealth:
    h = cooling()  # cools until 160
    assert h.tick(160.0) is HealthState.DEGRADED
    return h


def test_healthy_success_stays_healthy_and_resets_auth_count() -> None:
    h = AccountHealth(P)
    h.auth_failures = 1
    h.on_success(1.0, started_at=0.0)
    assert h.state is HealthState.HEALTHY
    assert h.auth_failures == 0


def test_healthy_rate_limited_cools_for_retry_after_or_base() -> None:
    h = cooling(100.0, retry_after=None)
    assert h.state is HealthState.COOLING
    assert h.cooling_until == 160.0  # base 60 > default retry-after 30
    h = cooling(100.0, retry_after=300.0)
    assert h.cooling_until == 400.0  # Retry-After honoured
    h = cooling(100.0, retry_after=5000.0)
    assert h.cooling_until == 5100.0  # honoured even above our cap
    assert not h.admits(200.0)
    assert h.blocked_until(200.0) == 5100.0
    assert h.cooldown_left(200.0) == 4900.0
    assert h.last_error == "rate_limited (retry_after=5000s)"
    # What the attempt said (a usage limit and its reset, as the CLI printed it) is kept with it.
    h = AccountHealth(P)
    h.on_rate_limited(100.0, started_at=90.0, retry_after=284300.0,
                      detail="You've hit your weekly limit · resets Dec 6, 10:05pm (UTC)")
    assert h.cooling_until == 284400.0
    assert h.last_error == ("rate_limited (retry_after=284300s): You've hit your weekly limit · resets Dec 6, "
                            "10:05pm (UTC)")


def test_healthy_auth_failures_degrade_then_disable() -> None:
    h = AccountHealth(P)
    h.on_auth_failed(0.0)
    assert h.state is HealthState.DEGRADED
    h.on_auth_failed(1.0)
    assert h.state is HealthState.DISABLED
    assert not h.admits(1e9)
    assert h.blocked_until(1e9) is None


def test_one_auth_failure_disables_by_default() -> None:
    h = AccountHealth()
    h.on_auth_failed(0.0, detail="401")
    assert h.state is HealthState.DISABLED
    assert h.last_error == "401"


def test_healthy_auth_expired() -> None:
    h = AccountHealth(P)
    h.on_auth_failed(0.0, expired=True)
    assert h.state is HealthState.EXPIRED
    assert not h.admits(1.0)


def test_degraded_admits_one_probe_per_window() -> None:
    h = degraded()
    assert h.admits(160.0)
    h.on_start(160.0)
    assert not h.admits(161.0)
    assert h.blocked_until(161.0) == 220.0


def test_degraded_probe_window_passes_without_signal_becomes_healthy() -> None:
    h = degraded()
    h.on_start(160.0)
    assert h.tick(219.0) is HealthState.DEGRADED
    assert h.tick(220.0) is HealthState.HEALTHY
    assert h.episodes == 0


def test_degraded_success_of_probe_becomes_healthy() -> None:
    h = degraded()
    h.on_start(160.0)
    h.on_success(170.0, started_at=160.0)
    assert h.state is HealthState.HEALTHY


def test_degraded_success_begun_before_probe_changes_nothing() -> None:
    h = degraded()
    h.on_start(160.0)
    h.on_success(170.0, started_at=10.0)
    assert h.state is HealthState.DEGRADED


def test_degraded_rate_limited_cools_longer() -> None:
    h = degraded()
    h.on_start(160.0)
    h.on_rate_limited(170.0, started_at=160.0, retry_after=None)
    assert h.state is HealthState.COOLING
    assert h.episodes == 2
    assert h.cooling_until == 170.0 + 120.0  # backoff doubles
    h.tick(290.0)
    h.on_start(290.0)
    h.on_rate_limited(300.0, started_at=290.0, retry_after=None)
    assert h.cooling_until == 300.0 + 240.0


def test_backoff_is_capped() -> None:
    h = AccountHealth(P)
    t = 0.0
    for _ in range(8):
        h.on_rate_limited(t, started_at=t, retry_after=None)
        t = h.cooling_until
        h.tick(t)
        h.on_start(t)
    assert h.episodes == 8
    h.on_rate_limited(t + 1, started_at=t, retry_after=None)
    assert h.cooling_until == t + 1 + 600.0


def test_degraded_auth_failures() -> None:
    h = degraded()
    h.on_auth_failed(170.0)
    assert h.state is HealthState.DEGRADED
    h.on_auth_failed(171.0)
    assert h.state is HealthState.DISABLED
    h = degraded()
    h.on_auth_failed(170.0, expired=True)
    assert h.state is HealthState.EXPIRED


def test_cooling_ends_in_degraded() -> None:
    h = cooling()
    assert h.tick(159.9) is HealthState.COOLING
    assert h.tick(160.0) is HealthState.DEGRADED


def test_cooling_same_episode_does_not_back_off() -> None:
    h = cooling(100.0)  # episode began at 100
    h.on_rate_limited(110.0, started_at=95.0, retry_after=None)
    assert h.episodes == 1
    assert h.cooling_until == 170.0  # extended by one base cooldown, not doubled


def test_cooling_new_episode_backs_off() -> None:
    h = cooling(100.0)
    h.on_rate_limited(110.0, started_at=105.0, retry_after=None)
    assert h.episodes == 2
    assert h.cooling_until == 230.0


def test_stale_signal_ignored_when_not_cooling() -> None:
    h = degraded()
    h.on_rate_limited(170.0, started_at=50.0, retry_after=None)
    assert h.state is HealthState.DEGRADED


def test_cooling_auth_failures() -> None:
    h = cooling()
    h.on_auth_failed(110.0)
    assert h.state is HealthState.COOLING
    h.on_auth_failed(111.0)
    assert h.state is HealthState.DISABLED
    h = cooling()
    h.on_auth_failed(110.0, expired=True)
    assert h.state is HealthState.EXPIRED


def test_cooling_success_stays_cooling() -> None:
    h = cooling()
    h.on_success(110.0, started_at=0.0)
    assert h.state is HealthState.COOLING


def test_expired_refresh() -> None:
    h = AccountHealth(P)
    h.on_auth_failed(0.0, expired=True)
    h.refresh()
    assert h.state is HealthState.HEALTHY


def test_disabled_enable() -> None:
    h = AccountHealth(HealthPolicy())
    h.on_auth_failed(0.0)
    h.refresh()  # refresh is for expired credentials only
    assert h.state is HealthState.DISABLED
    h.enable()
    assert h.state is HealthState.HEALTHY
    assert h.auth_failures == 0


@pytest.mark.parametrize("make", [AccountHealth, cooling, degraded])
def test_any_state_can_be_held(make: object) -> None:
    h = make() if make is not AccountHealth else AccountHealth(P)  # type: ignore[operator]
    h.hold()
    assert h.state is HealthState.HELD
    assert not h.admits(1e6)


def test_held_release_goes_healthy_or_back_to_cooling() -> None:
    h = cooling(100.0)
    h.hold()
    h.release(120.0)
    assert h.state is HealthState.COOLING
    h.hold()
    h.release(500.0)
    assert h.state is HealthState.HEALTHY
    h.release(600.0)  # releasing what is not held does nothing
    assert h.state is HealthState.HEALTHY


@pytest.mark.parametrize("state", ["expired", "disabled", "held"])
def test_inert_states_ignore_late_results(state: str) -> None:
    h = AccountHealth(HealthPolicy())
    if state == "expired":
        h.on_auth_failed(0.0, expired=True)
    elif state == "disabled":
        h.on_auth_failed(0.0)
    else:
        h.hold()
    before = h.state
    h.on_success(1.0, started_at=0.5)
    h.on_rate_limited(2.0, started_at=1.5, retry_after=10)
    h.on_auth_failed(3.0)
    assert h.state is before
    assert h.state.value == state


def test_policy_validation() -> None:
    with pytest.raises(ValueError, match="max_auth_failures"):
        HealthPolicy(max_auth_failures=0)
    with pytest.raises(ValueError, match="cooldown"):
        HealthPolicy(base_cooldown_s=100, max_cooldown_s=10)


S = HealthPolicy(base_cooldown_s=60, max_cooldown_s=600, default_retry_after_s=30, probe_window_s=60,
                 max_server_errors=3)


def test_server_errors_in_a_row_cool_the_account_and_the_probes_back_off() -> None:
    h = AccountHealth(S)
    h.on_server_error(10.0, started_at=1.0, detail="500 internal")
    h.on_server_error(11.0, started_at=2.0)
    assert h.state is HealthState.HEALTHY and h.server_errors == 2
    h.on_server_error(12.0, started_at=3.0)
    assert h.state is HealthState.COOLING and h.cooling_until == 12.0 + 60
    assert h.last_error.startswith("server_error x3")
    # an attempt begun before the cooldown says nothing new
    h.on_server_error(20.0, started_at=5.0)
    assert h.cooling_until == 72.0
    # the probe of the degraded account fails: cools again at once, twice as long
    assert h.tick(72.0) is HealthState.DEGRADED
    h.on_start(73.0)
    h.on_server_error(80.0, started_at=73.0)
    assert h.state is HealthState.COOLING and h.cooling_until == 80.0 + 120
    h.tick(200.0)
    h.on_start(201.0)
    h.on_server_error(210.0, started_at=201.0)
    assert h.cooling_until == 210.0 + 240
    # a probe that answers ends the episode: the backoff and the streak start over
    h.tick(450.0)
    h.on_start(451.0)
    h.on_success(460.0, started_at=451.0)
    assert h.state is HealthState.HEALTHY and h.episodes == 0 and h.server_errors == 0


def test_a_success_breaks_the_streak_of_server_errors() -> None:
    h = AccountHealth(S)
    for t in (1.0, 2.0):
        h.on_server_error(t + 10, started_at=t)
    h.on_success(13.0, started_at=3.0)
    h.on_server_error(14.0, started_at=4.0)
    h.on_server_error(15.0, started_at=5.0)
    assert h.state is HealthState.HEALTHY


def test_server_errors_leave_a_disabled_or_held_account_alone() -> None:
    h = AccountHealth(S)
    h.hold()
    for t in range(5):
        h.on_server_error(10.0 + t, started_at=float(t))
    assert h.state is HealthState.HELD and h.server_errors == 0


def test_max_server_errors_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="max_server_errors"):
        HealthPolicy(max_server_errors=0)
