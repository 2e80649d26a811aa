"""Account probes, the pure part: what a verdict does, when a probe is due, and how the health
machine takes a probe's result."""

from __future__ import annotations

from pathlib import Path

from ray_bench.accounts.health import (
    PROBE_EVERY_SEC,
    AccountHealth,
    HealthState,
    probe_due,
    probe_effect,
    probe_effect_of,
    probe_event_kind,
)
from ray_bench.accounts.probe import run_probe
from ray_bench.models.accounts import Account


def test_each_verdict_does_what_its_class_says() -> None:
    assert probe_effect("ok") == "clear"
    assert probe_effect("auth") == "disable"
    assert probe_effect("expired") == "expire"
    assert probe_effect("provider") == "cool" and probe_effect("capacity") == "cool"
    # A broken command or a timeout says nothing about the account.
    assert probe_effect("cannot-run") == "none" and probe_effect("timeout") == "none"
    assert probe_effect_of(probe_event_kind("disable")) == "disable"
    assert probe_effect_of("enable") is None and probe_effect_of("probe:bogus") is None


def test_only_held_or_cooling_accounts_are_due_and_not_too_often() -> None:
    assert probe_due("cooling", None, 100.0) and probe_due("held", None, 100.0)
    assert not probe_due("healthy", None, 100.0) and not probe_due("disabled", None, 100.0)
    assert not probe_due("cooling", 100.0, 100.0 + PROBE_EVERY_SEC - 1)
    assert probe_due("cooling", 100.0, 100.0 + PROBE_EVERY_SEC)


def test_a_failed_auth_probe_disables_and_a_provider_one_cools() -> None:
    health = AccountHealth()
    assert health.on_probe(0.0, "disable", detail="auth-expired: 401")
    assert health.state is HealthState.DISABLED and "401" in health.last_error
    cooling = AccountHealth()
    assert cooling.on_probe(0.0, "cool", retry_after=30.0)
    assert cooling.state is HealthState.COOLING and cooling.cooldown_left(0.0) == 60.0


def test_a_passing_probe_ends_our_own_cooldown_early() -> None:
    health = AccountHealth()
    for t in (0.0, 1.0, 2.0):  # three 5xx in a row: our backoff, no provider's word
        health.on_server_error(t, t)
    assert health.state is HealthState.COOLING
    assert health.on_probe(10.0, "clear")
    assert health.admits(10.0) and health.state is HealthState.HEALTHY


def test_a_passing_probe_never_cuts_a_providers_retry_after_or_an_operators_state() -> None:
    health = AccountHealth()
    health.on_rate_limited(0.0, 0.0, retry_after=300.0)
    assert not health.on_probe(100.0, "clear") and health.state is HealthState.COOLING
    for state_change in ("hold", "disable"):
        other = AccountHealth()
        if state_change == "hold":
            other.hold()
        else:
            other.on_auth_failed(0.0)
        assert not other.on_probe(1.0, "clear") and other.state in (HealthState.HELD, HealthState.DISABLED)
    restored = AccountHealth()  # a saved cooldown's origin is unknown: it counts as the provider's
    restored.restore("cooling", 500.0, 1, 0, "")
    assert not restored.on_probe(100.0, "clear")


def _account(command: str | None) -> Account:
    return Account.model_validate({"name": "a", "route": {"env": {"DEMO_API_KEY": "RB_PROBE_KEY"}},
                                   "limits": {"max_concurrent": 1}, "probe_command": command})


def test_the_shell_classifies_a_command_that_cannot_run_in_one_line(tmp_path: Path) -> None:
    env = {"RB_PROBE_KEY": "k" * 8, "PATH": "/usr/bin:/bin"}
    broken = run_probe(_account("no-such-probe-binary --ping"), environ=env)
    assert broken.verdict == "cannot-run" and "\n" not in broken.detail
    assert "exit 127" in broken.detail and "fix probe_command" in broken.detail
    assert run_probe(_account("true"), environ=env).verdict == "ok"
    auth = run_probe(_account("echo 'HTTP 401 Unauthorized' >&2; exit 1"), environ=env)
    assert auth.verdict == "auth" and probe_effect(auth.verdict) == "disable"
    assert run_probe(_account("true"), environ={"PATH": "/bin"}).verdict == "auth"  # route missing
