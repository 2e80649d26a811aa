"""Admission learns from the one classifier: a summary -> its verdict -> the account's outcome."""

from __future__ import annotations

from typing import Any

import pytest

from ray_bench.accounts import Outcome, OutcomeKind
from ray_bench.evidence import Catalog, classify
from ray_bench.models.attempt import AttemptSummary
from ray_bench.scheduler.admission import outcome_of

CATALOG = Catalog.default()


def outcome(usd: float = 0.0, **kw: Any) -> Outcome:
    base: dict[str, Any] = {"agent": {"exit_code": 1, "output_tail": ""}, "verifier": {"exit_code": 0},
                            "reward": 0.0}
    base.update(kw)
    return outcome_of(classify(AttemptSummary.parse(base), CATALOG), usd)


def test_valid_row_is_success_even_with_reward_zero() -> None:
    o = outcome(usd=0.4, agent={"exit_code": 1, "output_tail": "tests failed"})
    assert o.kind is OutcomeKind.SUCCESS
    assert o.usd == 0.4
    assert not o.requeue
    assert not o.wasted


@pytest.mark.parametrize(
    ("output", "retry_after"),
    [
        ("Error 429: rate_limit_error. Retry-After: 30", 30.0),
        ("overloaded_error, try again in 2 min", 120.0),
        ("Claude usage limit reached", None),
    ],
)
def test_rate_limits(output: str, retry_after: float | None) -> None:
    o = outcome(agent={"exit_code": 1, "output_tail": output})
    assert o.kind is OutcomeKind.RATE_LIMITED
    assert o.retry_after == retry_after
    assert o.requeue
    assert not o.blames_task


def test_explicit_retry_after_wins() -> None:
    o = outcome(agent_error={"type": "rate_limit", "message": "429, retry after 5", "retry_after": 12})
    assert (o.kind, o.retry_after) == (OutcomeKind.RATE_LIMITED, 12.0)


@pytest.mark.parametrize(
    ("output", "expired"),
    [
        ("401 invalid x-api-key", False),
        ("authentication_error: OAuth token has expired", True),
    ],
)
def test_auth(output: str, expired: bool) -> None:
    o = outcome(agent={"exit_code": 1, "output_tail": output})
    assert o.kind is OutcomeKind.AUTH_FAILED
    assert o.expired is expired
    assert o.requeue


def test_missing_credential_is_auth() -> None:
    o = outcome(error={"type": "CredentialMissing", "message": "RB_KEY not set", "failure_class": "auth"})
    assert o.kind is OutcomeKind.AUTH_FAILED


def test_verifier_failure_is_a_plain_failure() -> None:
    o = outcome(reward=None, verifier={"exit_code": 2})
    assert o.kind is OutcomeKind.FAILURE
    assert o.wasted and o.blames_task
