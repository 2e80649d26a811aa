"""What a finished attempt means for the account that ran it.

Four kinds, and the rule for each:

============  ===================================  ===========  ===========
kind          effect on the account                cell         task blamed
============  ===================================  ===========  ===========
success       AIMD may grow; probation ends        has a row    -
rate_limited  cool down (Retry-After), AIMD shrinks  requeued now no
auth_failed   counts towards disabling; or expired requeued now no
failure       none                                 per policy   yes
============  ===================================  ===========  ===========

A *valid row* is a success for the account even when the agent failed the task
(reward 0): the account did its job. A rate-limited or auth-failed attempt is consumed
(attempts are never reused) but its cell goes straight back to the queue for another
account. :func:`classify` maps the executor's failure class and message to a kind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class OutcomeKind(StrEnum):
    SUCCESS = "success"
    RATE_LIMITED = "rate_limited"
    AUTH_FAILED = "auth_failed"
    FAILURE = "failure"


@dataclass(frozen=True, slots=True)
class Outcome:
    """The account-level result of one attempt."""

    kind: OutcomeKind
    retry_after: float | None = None
    """Seconds the provider asked us to wait (rate_limited only)."""
    expired: bool = False
    """auth_failed only: the credential expired (needs a refresh), rather than being refused."""
    usd: float = 0.0
    detail: str = ""

    @classmethod
    def success(cls, usd: float = 0.0) -> Outcome:
        return cls(OutcomeKind.SUCCESS, usd=usd)

    @classmethod
    def rate_limited(cls, retry_after: float | None = None, detail: str = "",
                     usd: float = 0.0) -> Outcome:
        return cls(OutcomeKind.RATE_LIMITED, retry_after=retry_after, detail=detail, usd=usd)

    @classmethod
    def auth_failed(cls, detail: str = "", *, expired: bool = False) -> Outcome:
        return cls(OutcomeKind.AUTH_FAILED, expired=expired, detail=detail)

    @classmethod
    def failure(cls, detail: str = "", usd: float = 0.0) -> Outcome:
        return cls(OutcomeKind.FAILURE, detail=detail, usd=usd)

    @property
    def requeue(self) -> bool:
        """The cell goes back to the queue at once, for any account."""
        return self.kind in (OutcomeKind.RATE_LIMITED, OutcomeKind.AUTH_FAILED)

    @property
    def blames_task(self) -> bool:
        return self.kind is OutcomeKind.FAILURE

    @property
    def wasted(self) -> bool:
        """The attempt produced no row."""
        return self.kind is not OutcomeKind.SUCCESS


_RATE_LIMIT = re.compile(
    r"\b429\b|rate[ _-]?limit|too many requests|overloaded|usage limit|quota exceeded"
    r"|resource[ _]exhausted|throttl", re.IGNORECASE)
_EXPIRED = re.compile(r"expired|refresh token|re-?login|session has ended", re.IGNORECASE)
_AUTH = re.compile(
    r"\b401\b|\b403\b|unauthori[sz]ed|invalid (?:api[ _-]?key|x-api-key|credentials?)"
    r"|authentication[ _]error|permission[ _]denied|forbidden", re.IGNORECASE)
_RETRY_AFTER = re.compile(
    r"retry[- ]after\D{0,3}(\d+(?:\.\d+)?)|try again in (\d+(?:\.\d+)?)\s*(s|sec|seconds|m|min)?",
    re.IGNORECASE)


def parse_retry_after(message: str) -> float | None:
    """Seconds from a ``Retry-After: 30`` header or a "try again in 2 min" phrase."""
    m = _RETRY_AFTER.search(message)
    if m is None:
        return None
    if m.group(1) is not None:
        return float(m.group(1))
    value = float(m.group(2))
    return value * 60 if (m.group(3) or "").lower().startswith("m") else value


def classify(*, valid_row: bool, failure_class: str | None = None, message: str = "",
             retry_after: float | None = None, usd: float = 0.0) -> Outcome:
    """Map a finished attempt to its effect on the account.

    ``failure_class`` is the catalog class of DESIGN.md (``task``, ``auth``, ``capacity``,
    ``provider``...). The class wins when it says ``auth``; rate limits are recognised by
    class ``capacity``/``provider`` *with* a rate-limit message, or by the message alone,
    since agents often surface a 429 as a generic crash.
    """
    if valid_row:
        return Outcome.success(usd=usd)
    if failure_class == "auth" or (failure_class in (None, "provider", "stack", "executor")
                                   and _AUTH.search(message)):
        return Outcome.auth_failed(message[:200], expired=bool(_EXPIRED.search(message)))
    if _RATE_LIMIT.search(message) or (failure_class == "capacity" and retry_after is not None):
        ra = retry_after if retry_after is not None else parse_retry_after(message)
        return Outcome.rate_limited(ra, detail=message[:200], usd=usd)
    return Outcome.failure(message[:200], usd=usd)
