"""HOME logins that last: the credential files an agent CLI refreshes, brought back from the
sandbox to the host HOME, and every token in them known to the redactor.

A Claude Code login (``.claude/.credentials.json``) is an access token that expires within hours
(``expiresAt``) plus a refresh token the CLI trades for a new pair when the access token runs
out. The login ends only when that refresh (or a probe) fails with an auth error, never at
``expiresAt``. In a container the CLI refreshes a *copy* of the HOME: the copy comes back after
each cell and replaces the host's file atomically, under a lock, when it is newer, so that the
next cell on any node starts from the live refresh token (a refresh token is single-use: the
stale copy would be dead).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ray_bench.config.bounded import MAX_STATE_BYTES, load_state_json

#: Credential files of the supported CLIs, relative to a HOME.
CREDENTIAL_FILES = (".claude/.credentials.json", ".codex/auth.json", ".gemini/oauth_creds.json")
#: Shorter strings are field values such as scopes or plan names, not tokens.
_MIN_TOKEN = 16
_LOCK = ".ray-bench-login.lock"


def tokens_in(home: str | Path) -> list[str]:
    """Every token-like string in the HOME's credential files (for the redactor)."""
    found: list[str] = []
    for rel in CREDENTIAL_FILES:
        data = _read(Path(home).expanduser() / rel)
        if data is not None:
            found += _strings(data)
    return found


def tokens_of(text: str) -> list[str]:
    """The token-like strings of one credential document's text."""
    try:
        return _strings(json.loads(text)) if len(text) <= MAX_STATE_BYTES else []
    except (ValueError, RecursionError):
        return []


def freshness(data: Any) -> float:
    """How new a credential document is: its access token's expiry (Claude's ``expiresAt`` in
    ms, Gemini's ``expiry_date``), or Codex's ``last_refresh``; 0 when it says nothing."""
    if not isinstance(data, dict):
        return 0.0
    for path in (("claudeAiOauth", "expiresAt"), ("expiry_date",), ("expiresAt",)):
        node: Any = data
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, int | float) and not isinstance(node, bool):
            return float(node) / 1000.0 if node > 1e11 else float(node)
    refreshed = data.get("last_refresh")
    if isinstance(refreshed, str):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(refreshed.replace("Z", "+00:00")).timestamp()
    return 0.0


def write_back(home: str | Path, rel: str, text: str) -> bool:
    """Put a credential file that came back from a sandbox into the host HOME, if it parses
    and is newer than the host's copy; atomically (a temp file renamed over it, mode 0600) and
    under the HOME's lock, so that two cells finishing at once cannot interleave. Returns
    whether the host file changed."""
    if rel not in CREDENTIAL_FILES:
        raise ValueError(f"{rel} is not a credential file")
    try:
        if len(text) > MAX_STATE_BYTES:
            return False
        incoming = json.loads(text)
    except (ValueError, RecursionError):
        return False
    target = Path(home).expanduser() / rel
    with _locked(Path(home).expanduser()):
        current = _read(target)
        if current == incoming or (current is not None and freshness(incoming) <= freshness(current)):
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".ray-bench-")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return True


def has_refresh_token(home: str | Path) -> bool:
    data = _read(Path(home).expanduser() / CREDENTIAL_FILES[0])
    oauth = data.get("claudeAiOauth") if isinstance(data, dict) else None
    return isinstance(oauth, dict) and bool(oauth.get("refreshToken"))


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    with open(home / _LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read(path: Path) -> Any:
    try:
        return load_state_json(path)
    except (OSError, ValueError):
        return None


def _strings(data: Any) -> list[str]:
    if isinstance(data, str):
        return [data] if len(data) >= _MIN_TOKEN and " " not in data else []
    if isinstance(data, dict):
        return [s for value in data.values() for s in _strings(value)]
    if isinstance(data, list):
        return [s for value in data for s in _strings(value)]
    return []


#: Logins that carry an expiry, relative to the route's HOME.
_EXPIRING_LOGINS = (".claude/.credentials.json",)


def login_expiry(home: str | Path) -> float | None:
    """The epoch second at which the HOME login expires, or None if it carries no expiry.
    Only the ``expiresAt`` field is read (milliseconds, as Claude Code writes it). A login with a
    refresh token does not end at ``expiresAt`` (the access token's expiry: the CLI refreshes
    it); it ends when a refresh fails with an auth error (this module's docstring)."""
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
