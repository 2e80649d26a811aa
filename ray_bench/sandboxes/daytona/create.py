"""One sandbox per attempt, whatever the API answers.

The SDK's ``create`` is a POST followed by polling until ``started``. Repeating the whole call
on an error (a 429 or 5xx while polling, a gateway that lost the POST's answer) would make a
second sandbox. Here every create carries a name unique in the organisation; after any error
the sandbox is looked up by that name (or by the id a :class:`DaytonaTimeoutError` carries),
and a sandbox that exists is adopted and waited for, never made again. The POST is repeated
only after the lookup found nothing, and then the name makes even a lost race safe: Daytona
answers 409 to a second sandbox of the same name.

States as the API has them: a new sandbox is ``unknown``, then ``pulling_snapshot`` (from a
snapshot) or ``pending_build`` / ``building_snapshot`` (a Dockerfile build), then ``creating``
or ``starting``, then ``started`` -- or ``build_failed`` / ``error``. Build logs stream through
the SDK's ``on_snapshot_create_logs``; their tail goes into the error of a failed build.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from typing import TYPE_CHECKING

from daytona import (
    AsyncDaytona,
    AsyncSandbox,
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    DaytonaConnectionError,
    DaytonaError,
)

from ray_bench.errors import SandboxCreateError, SandboxRateLimitedError, SandboxUnavailableError
from ray_bench.sandboxes.daytona.ratelimit import retry_after
from ray_bench.sandboxes.daytona.translate import FAILED_STATES, state_name, translate

if TYPE_CHECKING:
    from ray_bench.sandboxes.daytona.backend import DaytonaBackend

#: Build log lines kept for the error of a failed build.
BUILD_LOG_LINES = 40
#: Slack beyond ``create_timeout`` for the SDK's own call to give up first.
_SDK_SLACK_SEC = 30.0


class BuildLog:
    """The last :data:`BUILD_LOG_LINES` lines of a sandbox's image build."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=BUILD_LOG_LINES)

    def add(self, chunk: str) -> None:
        self.lines.extend(line for line in chunk.splitlines() if line.strip())

    def tail(self) -> str:
        return ("\nbuild log (last lines):\n" + "\n".join(self.lines)) if self.lines else ""


async def create_once(
    backend: DaytonaBackend,
    params: CreateSandboxFromImageParams | CreateSandboxFromSnapshotParams,
    name: str,
    client: AsyncDaytona,
) -> AsyncSandbox:
    """The started sandbox named ``name``, made by at most one accepted POST through ``client``
    (the one its commands will use)."""
    deadline = time.monotonic() + backend.create_timeout
    build = BuildLog()
    limited = failed = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SandboxCreateError(
                f"create {name}: no sandbox within {backend.create_timeout:g}s{build.tail()}"
            )
        try:
            return await asyncio.wait_for(
                # The SDK's overloads name one params type each; the call takes either.
                client.create(
                    params,  # type: ignore[arg-type]
                    timeout=left,
                    on_snapshot_create_logs=build.add,
                ),
                left + _SDK_SLACK_SEC,
            )
        except (DaytonaError, TimeoutError) as exc:
            made_id = getattr(exc, "sandbox_id", None)
            found = await backend.lookup(made_id or name)
            if found is not None:
                return await await_started(backend, found, deadline, build)
            if not isinstance(exc, DaytonaError):
                cause: DaytonaError | None = None
            else:
                cause = exc
            status = cause.status_code if cause is not None else None
            if status == 429:  # the throttler refused the POST: nothing was made
                wait = retry_after(cause.headers) if cause is not None else None
                if limited >= backend.max_rate_limit_retries:
                    raise SandboxRateLimitedError(
                        f"create: Daytona rate limit persisted through {limited} retries",
                        retry_after=wait,
                    ) from exc
                limited += 1
                backend.rate_limited_waits += 1
                delay = min(wait if wait is not None else 2.0**limited, backend.max_retry_after)
                await asyncio.sleep(delay * (1 + 0.2 * random.random()))
                continue
            transient = cause is None or status in (409, 502, 503, 504) or isinstance(
                cause, DaytonaConnectionError
            )
            if transient and failed < backend.max_server_retries:
                # The lookup found nothing: the POST never landed (or a 409 raced a delete).
                failed += 1
                await asyncio.sleep(min(0.5 * 2**failed, 10.0))
                continue
            if cause is None:
                raise SandboxUnavailableError(
                    f"create {name}: no answer within {backend.create_timeout:g}s"
                ) from exc
            error = translate(cause, "create", create=True)
            if build.lines:
                error = type(error)(f"{error}{build.tail()}")
            raise error from exc


async def await_started(
    backend: DaytonaBackend, sandbox: AsyncSandbox, deadline: float, build: BuildLog
) -> AsyncSandbox:
    """Poll ``sandbox`` (backing off to every 2 s) until it is ``started``; a failed build, an
    errored or destroyed sandbox or the deadline raise :class:`SandboxCreateError`."""
    delay = 0.25
    while True:
        state = state_name(sandbox.state)
        if state_name(getattr(sandbox, "desired_state", None)) == "destroyed":
            state = "destroying"
        if state == "started":
            return sandbox
        if state in FAILED_STATES:
            reason = f": {sandbox.error_reason}" if sandbox.error_reason else ""
            raise SandboxCreateError(
                f"Daytona sandbox {sandbox.id} is {state}{reason}{build.tail()}"
            )
        if time.monotonic() >= deadline:
            raise SandboxCreateError(
                f"Daytona sandbox {sandbox.id} still {state} after {backend.create_timeout:g}s"
                f"{build.tail()}"
            )
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 2.0)
        refreshed = await backend.lookup(sandbox.id)
        if refreshed is None:
            raise SandboxCreateError(f"Daytona sandbox {sandbox.id} vanished while starting")
        sandbox = refreshed
