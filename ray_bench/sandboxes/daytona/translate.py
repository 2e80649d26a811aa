"""Daytona SDK errors and sandbox states, in ray-bench's terms (``errors.py``'s tree).

States and answers as the Daytona API defines them (``apps/api`` of daytonaio/daytona:
``SandboxState``, ``SandboxService.destroy``, ``validateOrganizationQuotas``)."""

from __future__ import annotations

import re
from typing import Any

from daytona import DaytonaConnectionError, DaytonaError, DaytonaTimeoutError

from ray_bench.errors import (
    SandboxAuthError,
    SandboxCreateError,
    SandboxError,
    SandboxQuotaError,
    SandboxTooLargeError,
    SandboxUnavailableError,
)

#: States a sandbox passes through on its way to ``started`` (``unknown`` is a new row's state
#: before the manager picks it up; ``pending_build``/``building_snapshot`` a Dockerfile build).
STARTING_STATES = frozenset(
    {
        "unknown",
        "creating",
        "restoring",
        "starting",
        "pending_build",
        "building_snapshot",
        "pulling_snapshot",
        "resuming",
    }
)
#: States from which a sandbox will not start by itself.
FAILED_STATES = frozenset({"error", "build_failed", "destroyed", "destroying"})

#: States in which a sandbox will not run another command.
GONE_STATES = frozenset(
    {
        "destroyed",
        "destroying",
        "error",
        "build_failed",
        "stopped",
        "stopping",
        "archived",
        "archiving",
    }
)

#: ``validateOrganizationQuotas``: "Total CPU limit exceeded. Maximum allowed: 10." (400).
_QUOTA = re.compile(r"Total (CPU|memory|disk|GPU) limit exceeded", re.IGNORECASE)
#: ``validateOrganizationQuotas`` of ``SnapshotService`` (``snapshot.service.ts``): "Snapshot quota
#: exceeded. Maximum allowed: 30" (400), on a snapshot's create or activation.
_SNAPSHOT_QUOTA = re.compile(r"Snapshot quota exceeded", re.IGNORECASE)

#: The per-sandbox check of ``validateOrganizationQuotas`` (``apps/api/src/sandbox/services/
#: sandbox.service.ts``): "CPU request 8 exceeds maximum allowed per sandbox (4).", "Memory request
#: 16GB exceeds ...", "Disk request 50GB exceeds ..." (a ``ForbiddenException``: 403).
_PER_SANDBOX = re.compile(r"\b(CPU|Memory|Disk|GPU) request \S+ exceeds maximum allowed per sandbox",
                          re.IGNORECASE)


def state_name(state: Any) -> str:
    return str(getattr(state, "value", state) or "unknown")


def quota_resource(exc: DaytonaError) -> str | None:
    """``cpu``/``memory``/``disk``/``gpu``/``snapshots`` when ``exc`` is an organisation-quota refusal."""
    if exc.status_code not in (400, 403, None):
        return None
    found = _QUOTA.search(exc.message or "")
    if found:
        return found.group(1).lower()
    return "snapshots" if _SNAPSHOT_QUOTA.search(exc.message or "") else None


def translate(exc: DaytonaError, what: str, *, create: bool = False) -> SandboxError:
    """The :class:`SandboxError` for ``exc``: unreachable, timed out or 5xx -> unavailable; an
    organisation quota -> :class:`SandboxQuotaError`; a per-sandbox limit ->
    :class:`SandboxTooLargeError`; 401/403 -> :class:`SandboxAuthError` (the
    backend's key, never a model account's); else a failed create or a plain sandbox error."""
    status = exc.status_code
    message = f"{what}: {exc.message}"
    if (resource := quota_resource(exc)) is not None:
        return SandboxQuotaError(message, resource=resource)
    if status in (400, 403, None) and _PER_SANDBOX.search(exc.message or ""):
        # Not the backend's key (403 as a suspended organisation is): this size never fits.
        return SandboxTooLargeError(f"{message} (set the pool's max_sandbox_* so that plan refuses it)")
    if status in (401, 403):
        # The server's reason is kept (a suspended organisation, a region not available, a key
        # without the permission): "bad key" alone sends the operator the wrong way.
        reason = f": {exc.message}" if exc.message else ""
        return SandboxAuthError(f"{what}: the Daytona API refused the backend's request ({status}){reason}")
    if isinstance(exc, DaytonaConnectionError | DaytonaTimeoutError) or (
        status is not None and status >= 500 and not create
    ):
        return SandboxUnavailableError(message)
    if status is not None and status in (502, 503, 504):
        return SandboxUnavailableError(message)
    if create:
        return SandboxCreateError(message)
    return SandboxError(message)
