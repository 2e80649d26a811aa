"""Gemini CLI's failures: the API's status and delay inside its messages, the retry it was in when
it stopped, and the error contract (see the package doc)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from ray_bench.agents.base import (
    CliRun,
    error_from,
)
from ray_bench.models.agent import AgentError
from ray_bench.numbers import duration_or_none

_STATUS = re.compile(r"\b(401|403|429|500|502|503|504)\b|RESOURCE_EXHAUSTED|UNAUTHENTICATED|PERMISSION_DENIED|"
                     r"UNAVAILABLE")
_GRPC = {"RESOURCE_EXHAUSTED": 429, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "UNAVAILABLE": 503}
#: The API's error body inside a message: ``{"error":{"code":401,...}}``.
_CODE = re.compile(r'"code"\s*:\s*(\d{3})')
#: The server's delay, as the API's 429 says it: ``RetryInfo.retryDelay`` ("7s") or the message.
_DELAY = (re.compile(r'"retryDelay"\s*:\s*"([0-9.]+)s"'), re.compile(r"[Pp]lease retry in ([0-9.]+)s"),
          re.compile(r"Suggested retry after ([0-9.]+)s"))
#: stderr, when there is no telemetry: ``Attempt 2 failed with status 500. Retrying with backoff...``,
#: ``Attempt 1 failed: <the 429's message>. Retrying after 5019ms...``.
ATTEMPT = re.compile(r"Attempt (\d+) failed(?: with status (\d{3}))?")


@dataclass(frozen=True)
class Retry:
    """The call the CLI was retrying when it stopped: the API's status, its message, and the
    server's delay (``RetryInfo.retryDelay``) where it gave one."""

    status: int | None
    message: str
    delay_sec: float | None


def status_of(message: str) -> int | None:
    m = _CODE.search(message) or _STATUS.search(message)
    if m is None:
        return None
    return int(m.group(1)) if m.group(1) else _GRPC.get(m.group(0))


def delay_of(message: str) -> float | None:
    for pattern in _DELAY:
        m = pattern.search(message)
        if m is not None:  # "1.2.3s" or 400 digits is no wait
            try:
                return duration_or_none(float(m.group(1)))
            except ValueError:
                return None
    return None


def error_of(message: str, run: CliRun, retry: Retry | None) -> AgentError:
    """The error contract from the CLI's failure message (the API's body inside it: ``[API Error:
    {"error":{"code":429,...}}]``), with the server's delay for a 429 from the message or the
    retries the CLI made before giving up."""
    status = status_of(message)
    delay = delay_of(message)
    if delay is None and retry is not None and retry.status == status:
        delay = retry.delay_sec
    if _DAILY.search(message):
        # The CLI's TerminalQuotaError ("You have exhausted your daily quota on this model."),
        # not retried: a per-day quota, which the Gemini API resets at midnight Pacific time.
        return error_from(status or 429, message, run, reset_at=next_pacific_midnight(run.now))
    if _KEY_REFUSED.search(message):
        # A bad API key is the API's 400 INVALID_ARGUMENT, its ErrorInfo reason API_KEY_INVALID
        # (https://ai.google.dev/gemini-api/docs/troubleshooting#error-codes): the login's fault,
        # not the request's, whatever the CLI's wording around it.
        return AgentError(type="auth", message=message.strip()[:500], status=status or 400)
    return error_from(status, message, run, retry_after=delay)


#: The ErrorInfo reasons of a key the API refuses (400 API_KEY_INVALID; 403 CONSUMER_SUSPENDED,
#: API_KEY_SERVICE_BLOCKED).
_KEY_REFUSED = re.compile(r"API_KEY_INVALID|CONSUMER_SUSPENDED|API_KEY_SERVICE_BLOCKED|API key not valid")


_DAILY = re.compile(r"daily quota|PerDay", re.IGNORECASE)


def next_pacific_midnight(now: float) -> float:
    local = dt.datetime.fromtimestamp(now, ZoneInfo("America/Los_Angeles"))
    return (local.replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)).timestamp()
