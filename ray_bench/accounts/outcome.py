"""What a finished attempt means for the account that ran it.

Five kinds, and the rule for each:

============  ===================================  ===========  ===========
kind          effect on the account                cell         task blamed
============  ===================================  ===========  ===========
success       AIMD may grow; probation ends        has a row    -
rate_limited  cool down (Retry-After), AIMD shrinks  requeued now no
auth_failed   counts towards disabling; or expired requeued now no
server_error  a streak of them cools (backoff)     per policy   no
failure       none                                 per policy   yes
unjudged      none (its spend only)                -            no
============  ===================================  ===========  ===========

A *valid row* is a success for the account even when the agent failed the task
(reward 0): the account did its job. A rate-limited or auth-failed attempt is consumed
(attempts are never reused) but its cell goes straight back to the queue for another
account. An *unjudged* attempt (cancelled, lost with its runner, stopped by the host's full
disk) says nothing about the account, but what it spent is the account's spend all the same
(:func:`unjudged_outcome`). The one classifier of attempts is :func:`ray_bench.evidence.classify`; admission
restates its verdict as an outcome (:func:`ray_bench.scheduler.admission.outcome_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class OutcomeKind(StrEnum):
    SUCCESS = "success"
    RATE_LIMITED = "rate_limited"
    AUTH_FAILED = "auth_failed"
    SERVER_ERROR = "server_error"
    FAILURE = "failure"
    UNJUDGED = "unjudged"


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
    usd_bound: str = "exact"
    """What ``usd`` is: ``exact``, ``lower_bound`` (at least that: a CLI cut before it recorded
    every call) or ``unknown`` (no cost known: the cell's expected cost, charged so that limits
    hold). ``accounts status`` says when a lifetime spend holds either."""

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
    def server_error(cls, detail: str = "", usd: float = 0.0) -> Outcome:
        """The provider answered 5xx: the account's fault, not the task's."""
        return cls(OutcomeKind.SERVER_ERROR, detail=detail, usd=usd)

    @classmethod
    def failure(cls, detail: str = "", usd: float = 0.0) -> Outcome:
        return cls(OutcomeKind.FAILURE, detail=detail, usd=usd)

    @classmethod
    def unjudged(cls, usd: float) -> Outcome:
        """Not judged (cancelled, lost, a full disk): only its spend is counted."""
        return cls(OutcomeKind.UNJUDGED, usd=usd)

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


def unjudged_outcome(usd: float, usd_bound: str = "exact") -> Outcome | None:
    """What the account is told of an attempt no one judged that charged ``usd``: its spend,
    or nothing at all (None: the lease is only abandoned) when it charged nothing."""
    return Outcome(OutcomeKind.UNJUDGED, usd=usd, usd_bound=usd_bound) if usd > 0 else None
