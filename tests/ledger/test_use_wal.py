"""Opening a new WAL database while another process switches it: tried again, never failed."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from ray_bench.ledger.store import use_wal


def _held(path: Path) -> sqlite3.Connection:
    """What another opener holds while it switches the file to WAL: its exclusive lock."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    return holder


def test_the_switch_to_wal_waits_for_another_openers_lock(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    holder = _held(path)
    conn = sqlite3.connect(path, timeout=0)  # SQLite's own wait off: what the race looks like
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        conn.execute("PRAGMA journal_mode=WAL")
    threading.Timer(0.3, lambda: holder.execute("COMMIT")).start()
    use_wal(conn, within=30.0)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_lock_held_past_the_bound_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    holder = _held(path)
    conn = sqlite3.connect(path, timeout=0)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            use_wal(conn, within=0.2)
    finally:
        holder.execute("COMMIT")
