"""A file written whole (`ray_bench.files.write_whole`): the old content or the new, never part of
it; nothing left beside it; a temporary name that is a link is not followed."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ray_bench.files import write_whole


def test_text_and_bytes_replace_the_file_and_leave_nothing_beside_it(tmp_path: Path) -> None:
    target = tmp_path / "pause.json"
    target.write_text("old, and longer than what replaces it\n")
    write_whole(target, '{"now": true}')
    assert target.read_text() == '{"now": true}'
    write_whole(target, "é".encode() + b"\x00", durable=True)
    assert target.read_bytes() == "é".encode() + b"\x00"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pause.json"]


def test_a_failed_rename_keeps_the_old_file_and_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "summary"
    target.mkdir()  # a directory where the file goes: the rename fails
    (target / "inside").write_text("kept")
    with pytest.raises(IsADirectoryError):
        write_whole(target, "new")
    assert (target / "inside").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary"]


def test_a_link_planted_at_the_temporary_name_is_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    target = tmp_path / "holds.json"
    planted = tmp_path / f".holds.json.{os.getpid()}.{threading.get_ident()}.tmp"
    planted.symlink_to(victim)
    with pytest.raises(OSError, match="symbolic links"):  # ELOOP: O_NOFOLLOW
        write_whole(target, "through the link?")
    assert victim.read_text() == "untouched" and not target.exists()
