"""A ``-wal`` without its ``-shm`` and no driver: read from the file alone when the WAL adds
nothing (a driver killed at its close, after its checkpoint), else from a private copy on disk,
never the whole ledger in memory; a writer's clean close leaves neither file."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest

from ray_bench.ledger.store import Ledger
from ray_bench.ledger.wal import wal_adds_nothing

IDENTITY = "sha256:" + "0" * 64


def _files(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def _dead(tmp_path: Path, *, checkpointed: bool, notes: int = 30) -> Path:
    """What a killed driver leaves: its WAL as it was before its close's checkpoint, beside the
    file before that checkpoint (killed mid-run, then its -shm lost) or after it (killed at its
    close, between removing the -shm and the -wal)."""
    live = tmp_path / "live"
    live.mkdir()
    writer = Ledger.create(live, run_id="r", plan_identity=IDENTITY)
    for i in range(notes):
        writer.event("note", {"i": i})
    wal = (live / "ledger.sqlite-wal").read_bytes()
    dead = tmp_path / "dead"
    dead.mkdir()
    if not checkpointed:
        shutil.copyfile(live / "ledger.sqlite", dead / "ledger.sqlite")
    writer.close()
    if checkpointed:
        shutil.copyfile(live / "ledger.sqlite", dead / "ledger.sqlite")
    (dead / "ledger.sqlite-wal").write_bytes(wal)
    return dead


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where a private copy would go (tempfile's directory)."""
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def test_a_clean_close_after_a_large_transaction_leaves_no_wal_nor_shm(tmp_path: Path) -> None:
    Ledger.create(tmp_path, run_id="r", plan_identity=IDENTITY).close()
    conn = sqlite3.connect(tmp_path / "ledger.sqlite")  # as tests/perf/bench_scale.py fills one
    with conn:
        conn.executemany("INSERT INTO events (ts, kind, data) VALUES (?, 'note', ?)",
                         [(float(i), "{}" * 200) for i in range(20_000)])
    assert "ledger.sqlite-wal" in _files(tmp_path)
    conn.close()
    assert _files(tmp_path) == ["ledger.sqlite"]


def test_a_wal_checkpointed_at_a_killed_close_is_read_from_the_file_alone(
        tmp_path: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = _dead(tmp_path, checkpointed=True)
    assert wal_adds_nothing(dead / "ledger.sqlite") is True
    before = _files(dead)

    def no_copy(*_: object) -> None:
        raise AssertionError("the ledger was copied")

    monkeypatch.setattr(shutil, "copyfile", no_copy)
    with Ledger.reading(dead) as reader:
        assert len(reader.events("note")) == 30
        assert list(scratch.iterdir()) == []
    assert _files(dead) == before


def test_a_wal_with_commits_the_file_lacks_is_read_from_a_private_copy_on_disk(tmp_path: Path,
                                                                                scratch: Path) -> None:
    dead = _dead(tmp_path, checkpointed=False)
    assert wal_adds_nothing(dead / "ledger.sqlite") is False
    before = _files(dead)
    with Ledger.reading(dead) as reader:
        assert len(reader.events("note")) == 30  # the WAL's commits
        (copy,) = scratch.iterdir()
        assert (copy / "ledger.sqlite").stat().st_size == (dead / "ledger.sqlite").stat().st_size
    assert list(scratch.iterdir()) == []  # removed at the close
    assert _files(dead) == before


def test_a_torn_last_frame_is_not_a_commit(tmp_path: Path) -> None:
    """SQLite reads a WAL's frames up to its last whole, valid commit; so does the check: the
    commit before the torn one holds older versions of the file's pages (the file has the last
    note, SQLite's reading of the pair does not), so the file alone is not what SQLite reads."""
    dead = _dead(tmp_path, checkpointed=True)
    wal = dead / "ledger.sqlite-wal"
    wal.write_bytes(wal.read_bytes()[:-100])
    assert wal_adds_nothing(dead / "ledger.sqlite") is False
    with Ledger.reading(dead) as reader:  # what SQLite itself reads from the pair
        kept = len(reader.events("note"))
    check = tmp_path / "check"
    check.mkdir()
    shutil.copyfile(dead / "ledger.sqlite", check / "ledger.sqlite")
    shutil.copyfile(wal, check / "ledger.sqlite-wal")
    conn = sqlite3.connect(check / "ledger.sqlite")
    try:
        assert conn.execute("SELECT count(*) FROM events WHERE kind = 'note'").fetchone()[0] == kept == 29
    finally:
        conn.close()


def test_no_wal_header_or_a_foreign_one_adds_nothing(tmp_path: Path) -> None:
    Ledger.create(tmp_path, run_id="r", plan_identity=IDENTITY).close()
    db = tmp_path / "ledger.sqlite"
    Path(f"{db}-wal").write_bytes(b"")
    assert wal_adds_nothing(db) is True
    Path(f"{db}-wal").write_bytes(b"\0" * 4096)
    assert wal_adds_nothing(db) is True
    Path(f"{db}-wal").unlink()
    assert wal_adds_nothing(db) is None
