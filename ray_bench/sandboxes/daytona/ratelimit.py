"""Daytona's rate limits: a 429 carries ``Retry-After-<throttler>`` (throttlers
``authenticated``, ``sandbox-create``, ``sandbox-lifecycle``); every call waits that long and
retries, a bounded number of times, then raises :class:`SandboxRateLimitedError` with
``retry_after``. Brief 5xx spells get a few backed-off retries too."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp
from daytona import DaytonaConnectionError, DaytonaError

from ray_bench.errors import SandboxRateLimitedError, SandboxUnavailableError
from ray_bench.numbers import duration

T = TypeVar("T")

THROTTLERS = ("authenticated", "sandbox-create", "sandbox-lifecycle")


def retry_after(headers: Mapping[str, Any]) -> float | None:
    """Seconds to wait from a 429's ``Retry-After[-<throttler>]`` headers (the longest one),
    else its ``X-RateLimit-Reset-<throttler>`` headers; ``None`` when it carries neither."""
    waits: list[float] = []
    resets: list[float] = []
    for key, value in headers.items():
        name = str(key).lower()
        try:
            seconds = duration(float(value))  # a header is a number from the world: no inf, nan, -1
        except (TypeError, ValueError):
            continue
        if name == "retry-after" or name.startswith("retry-after-"):
            waits.append(seconds)
        elif name.startswith("x-ratelimit-reset"):
            resets.append(seconds)
    found = waits or resets
    return max(found) if found else None


def http_status(exc: DaytonaError) -> tuple[int | None, Mapping[str, Any]]:
    """The HTTP status and headers behind an SDK error. The SDK's file transfers (``fs``'s
    upload and download) call aiohttp's ``raise_for_status()`` and wrap what it raises into a
    bare ``DaytonaError``: the status (a 429 too) is only on the cause."""
    if exc.status_code is not None:
        return exc.status_code, exc.headers
    cause: BaseException | None = exc.__cause__
    while cause is not None:
        if isinstance(cause, aiohttp.ClientResponseError):
            return cause.status, dict(cause.headers or {})
        cause = cause.__cause__
    return None, exc.headers


async def call_with_retries(
    what: str,
    fn: Callable[[], Awaitable[T]],
    *,
    max_rate_limit_retries: int,
    max_retry_after: float,
    max_server_retries: int,
    on_rate_limited: Callable[[], None] | None = None,
    timeout: float | None = None,
) -> T:
    """Run one SDK call, waiting out 429s (by their headers, at most ``max_retry_after`` each,
    ``max_rate_limit_retries`` times) and 502/503/504s, lost connections and timeouts
    (``max_server_retries`` times, backed off). A 429 is the throttler refusing the request
    before it ran, so it is always safe to repeat; the others may have run it, so a call that
    must not run twice passes ``max_server_retries=0``. Each try is bounded by ``timeout``
    seconds (a timed-out try raises :class:`SandboxUnavailableError`). ``on_rate_limited`` is
    told of every 429 waited out."""
    limited = 0
    failed = 0
    while True:
        try:
            if timeout is None:
                return await fn()
            return await asyncio.wait_for(fn(), timeout)
        except TimeoutError as exc:
            if failed < max_server_retries:
                failed += 1
                await asyncio.sleep(min(0.5 * 2**failed, 10.0))
                continue
            raise SandboxUnavailableError(
                f"{what}: no answer from the Daytona API within {timeout:g}s"
            ) from exc
        except DaytonaError as exc:
            status, headers = http_status(exc)
            if status == 429:
                wait = retry_after(headers)
                if limited >= max_rate_limit_retries:
                    raise SandboxRateLimitedError(
                        f"{what}: Daytona rate limit persisted through {limited} retries",
                        retry_after=wait,
                    ) from exc
                limited += 1
                if on_rate_limited is not None:
                    on_rate_limited()
                delay = min(wait if wait is not None else 2.0**limited, max_retry_after)
                # Jitter, so that runners limited together do not come back together.
                await asyncio.sleep(delay * (1 + 0.2 * random.random()))
                continue
            transient = status in (502, 503, 504) or isinstance(exc, DaytonaConnectionError)
            if transient and failed < max_server_retries:
                failed += 1
                await asyncio.sleep(min(0.5 * 2**failed, 10.0))
                continue
            raise
