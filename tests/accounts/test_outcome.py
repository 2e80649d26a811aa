import pytest

from ray_bench.accounts import Outcome, OutcomeKind, classify, parse_retry_after


def test_valid_row_is_success_even_with_reward_zero() -> None:
    o = classify(valid_row=True, failure_class=None, message="tests failed", usd=0.4)
    assert o.kind is OutcomeKind.SUCCESS
    assert o.usd == 0.4
    assert not o.requeue
    assert not o.wasted


@pytest.mark.parametrize(
    ("failure_class", "message", "retry_after"),
    [
        ("provider", "Error 429: rate_limit_error. Retry-After: 30", 30.0),
        ("capacity", "overloaded_error, try again in 2 min", 120.0),
        (None, "Claude usage limit reached", None),
        ("task", "agent crashed: 429 Too Many Requests", None),
    ],
)
def test_rate_limits(failure_class: str | None, message: str, retry_after: float | None) -> None:
    o = classify(valid_row=False, failure_class=failure_class, message=message)
    assert o.kind is OutcomeKind.RATE_LIMITED
    assert o.retry_after == retry_after
    assert o.requeue
    assert not o.blames_task


def test_explicit_retry_after_wins() -> None:
    o = classify(valid_row=False, failure_class="capacity", message="", retry_after=12.0)
    assert o == Outcome.rate_limited(12.0)


@pytest.mark.parametrize(
    ("failure_class", "message", "expired"),
    [
        ("auth", "", False),
        ("provider", "401 invalid x-api-key", False),
        (None, "authentication_error: OAuth token has expired", True),
    ],
)
def test_auth(failure_class: str | None, message: str, expired: bool) -> None:
    o = classify(valid_row=False, failure_class=failure_class, message=message)
    assert o.kind is OutcomeKind.AUTH_FAILED
    assert o.expired is expired
    assert o.requeue


def test_auth_class_task_message_is_not_auth() -> None:
    # A task whose own tests mention "forbidden" is not an auth failure of the account.
    o = classify(valid_row=False, failure_class="task", message="403 Forbidden from test server")
    assert o.kind is OutcomeKind.FAILURE
    assert o.blames_task
    assert not o.requeue


def test_other_failure() -> None:
    o = classify(valid_row=False, failure_class="evaluator", message="verifier wrote nothing")
    assert o.kind is OutcomeKind.FAILURE
    assert o.wasted


def test_parse_retry_after() -> None:
    assert parse_retry_after("retry-after: 7") == 7.0
    assert parse_retry_after("please try again in 3 seconds") == 3.0
    assert parse_retry_after("try again in 1.5 min") == 90.0
    assert parse_retry_after("no hint") is None
