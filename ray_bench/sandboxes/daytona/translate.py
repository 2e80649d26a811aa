"""Daytona SDK errors and sandbox states, in ray-bench's terms (``errors.py``'s tree)."""

from __future__ import annotations

from typing import Any

from daytona import DaytonaConnectionError, DaytonaError

from ray_bench.errors import SandboxCreateError, SandboxError, SandboxUnavailableError

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
        "unknown",
    }
)


def state_name(state: Any) -> str:
    return str(getattr(state, "value", state) or "unknown")


def translate(exc: DaytonaError, what: str, *, create: bool = False) -> SandboxError:
    """The :class:`SandboxError` for ``exc``: unreachable or 5xx -> unavailable (a failed create
    only on 502/503/504), else a failed create or a plain sandbox error."""
    status = exc.status_code
    message = f"{what}: {exc.message}"
    if isinstance(exc, DaytonaConnectionError) or (
        status is not None and status >= 500 and not create
    ):
        return SandboxUnavailableError(message)
    if status is not None and status in (502, 503, 504):
        return SandboxUnavailableError(message)
    if create:
        return SandboxCreateError(message)
    return SandboxError(message)
