"""HOME logins: refreshed credentials come back newest-wins, atomically, under a lock; a login
with a refresh token does not end at its access token's expiresAt."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from ray_bench.accounts.credentials import login_expiry
from ray_bench.cells.home_logins import tokens_in, write_back

REL = ".claude/.credentials.json"


def _login(access: str, refresh: str | None, expires_in: float) -> str:
    oauth = {"accessToken": access, "expiresAt": int((time.time() + expires_in) * 1000), "scopes": ["user:inference"]}
    if refresh is not None:
        oauth["refreshToken"] = refresh
    return json.dumps({"claudeAiOauth": oauth})


def _home(tmp_path: Path, text: str) -> Path:
    (tmp_path / ".claude").mkdir(parents=True)
    (tmp_path / REL).write_text(text)
    return tmp_path


def test_a_refreshable_login_does_not_end_at_expires_at(tmp_path: Path) -> None:
    refreshable = _home(tmp_path / "a", _login("sk-ant-oat01-" + "a" * 40, "sk-ant-ort01-" + "b" * 40, 60))
    assert login_expiry(refreshable) is None
    fixed = _home(tmp_path / "b", _login("sk-ant-oat01-" + "c" * 40, None, 60))
    expiry = login_expiry(fixed)
    assert expiry is not None and abs(expiry - (time.time() + 60)) < 5


def test_newer_wins_and_older_is_refused(tmp_path: Path) -> None:
    home = _home(tmp_path, _login("old-access-token-0123456789", "old-refresh-token-0123456789", 60))
    assert write_back(home, REL, _login("new-access-token-0123456789", "new-refresh-token-0123456789", 3600))
    assert "new-access-token-0123456789" in (home / REL).read_text()
    assert (home / REL).stat().st_mode & 0o777 == 0o600
    assert not write_back(home, REL, _login("stale-access-token-0123456789", "stale-refresh-0123456789", 600))
    assert not write_back(home, REL, "{not json")
    assert "new-access-token-0123456789" in (home / REL).read_text()
    assert sorted(tokens_in(home)) == ["new-access-token-0123456789", "new-refresh-token-0123456789"]


def test_concurrent_write_backs_leave_the_newest_whole(tmp_path: Path) -> None:
    home = _home(tmp_path, _login("a" * 30, "r" * 30, 0))
    docs = [_login(f"access-{i:04d}-" + "x" * 20, f"refresh-{i:04d}-" + "y" * 20, 100 + i) for i in range(24)]
    threads = [threading.Thread(target=write_back, args=(home, REL, d)) for d in docs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert json.loads((home / REL).read_text()) == json.loads(docs[-1])
    assert not [p for p in (home / ".claude").iterdir() if p.name.startswith(".ray-bench-")]
