"""A writer's close leaves no -wal/-shm beside the ledger, even when a reader was open at that
moment and closes just after (issue 58: "the driver leaves -wal/-shm files on some exits")."""

from __future__ import annotations

import threading
from pathlib import Path

from ray_bench.ledger.store import Ledger


def test_a_reader_open_at_the_writers_close_does_not_keep_the_wal(tmp_path: Path) -> None:
    writer = Ledger.create(tmp_path, run_id="r", plan_identity="sha256:" + "0" * 64)
    writer.event("run_started", {})
    reader = Ledger.open_readonly(tmp_path)  # a status --watch between two of its reads
    assert [e.kind for e in reader.events("run_started")] == ["run_started"]
    assert (tmp_path / "ledger.sqlite-wal").exists()
    timer = threading.Timer(0.2, reader.close)
    timer.start()
    try:
        writer.close()
    finally:
        timer.join()
    assert sorted(p.name for p in tmp_path.glob("ledger.sqlite*")) == ["ledger.sqlite"]
    with Ledger.reading(tmp_path) as again:
        assert [e.kind for e in again.events("run_started")] == ["run_started"]
    assert sorted(p.name for p in tmp_path.glob("ledger.sqlite*")) == ["ledger.sqlite"]


def test_a_read_of_a_killed_drivers_wal_without_its_shm_creates_nothing(tmp_path: Path) -> None:
    """Issue 58: a ``-wal`` left without its ``-shm`` (the driver killed at its close) was read
    with ``mode=ro``, which creates the ``-shm`` and leaves it (``status`` recreated it). With no
    driver holding the run's lock, the read takes a private copy: the WAL's commits are read,
    nothing is created beside the ledger."""
    import shutil

    live = tmp_path / "live"
    live.mkdir()
    writer = Ledger.create(live, run_id="r", plan_identity="sha256:" + "0" * 64)
    writer.event("run_started", {})
    writer.event("run_started", {})
    dead = tmp_path / "dead"
    dead.mkdir()
    try:  # what a SIGKILL leaves: the file and its WAL, the commits only in the WAL
        shutil.copyfile(live / "ledger.sqlite", dead / "ledger.sqlite")
        shutil.copyfile(live / "ledger.sqlite-wal", dead / "ledger.sqlite-wal")
    finally:
        writer.close()
    before = sorted(p.name for p in dead.iterdir())
    assert before == ["ledger.sqlite", "ledger.sqlite-wal"]
    for _ in range(2):
        with Ledger.reading(dead) as reader:
            assert [e.kind for e in reader.events()] == ["run_started", "run_started"]
        assert sorted(p.name for p in dead.iterdir()) == before
