"""Facts about credential routes that can be read without reading a secret value."""

from __future__ import annotations

from pathlib import Path

from ray_bench.cells.home_logins import has_refresh_token
from ray_bench.config.bounded import load_state_json

#: Logins that carry an expiry, relative to the route's HOME.
_EXPIRING_LOGINS = (".claude/.credentials.json",)


def login_expiry(home: str | Path) -> float | None:
    """The epoch second at which the HOME login expires, or None if it carries no expiry.
    Only the ``expiresAt`` field is read (milliseconds, as Claude Code writes it). A login with a
    refresh token does not end at ``expiresAt`` (the access token's expiry: the CLI refreshes
    it); it ends when a refresh fails with an auth error (:mod:`ray_bench.cells.home_logins`)."""
    if has_refresh_token(home):
        return None
    for rel in _EXPIRING_LOGINS:
        path = Path(home).expanduser() / rel
        try:
            data = load_state_json(path)
        except (OSError, ValueError):
            continue
        found = _find_expiry(data)
        if found is not None:
            return found / 1000.0 if found > 1e11 else found
    return None


def _find_expiry(data: object) -> float | None:
    if isinstance(data, dict):
        value = data.get("expiresAt")
        if isinstance(value, int | float):
            return float(value)
        for child in data.values():
            found = _find_expiry(child)
            if found is not None:
                return found
    return None


def expired_logins(homes: dict[str, str], now: float) -> dict[str, float]:
    """Account -> the epoch second its HOME login expired, for each of ``homes`` (account ->
    HOME) whose login has expired by ``now`` and cannot be refreshed: the driver's expiry watch
    (:class:`ray_bench.scheduler.admission.ExpiryWatch`) refuses every cell on it, so ``plan``
    leaves it out of capacity and says so."""
    out: dict[str, float] = {}
    for name, home in homes.items():
        expires = login_expiry(home)
        if expires is not None and expires <= now:
            out[name] = expires
    return out
