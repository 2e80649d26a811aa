"""The redactor scrubs file contents and file names."""

from __future__ import annotations

from pathlib import Path

from ray_bench.cells.credentials import REDACTED, Redactor

SECRET = "canary-0a9b8c7d6e5f4a3b"


def test_file_and_directory_names_are_redacted(tmp_path: Path) -> None:
    (tmp_path / f"dir-{SECRET}").mkdir()
    (tmp_path / f"dir-{SECRET}" / f"{SECRET}.txt").write_text(f"key {SECRET}\n")
    (tmp_path / f"{SECRET}.log").write_text("clean\n")
    (tmp_path / f"{REDACTED}.log").write_text("already here\n")  # a clash is not overwritten
    assert Redactor([SECRET]).tree(tmp_path) >= 3
    names = [p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*"))]
    assert not [n for n in names if SECRET in n], names
    assert (tmp_path / f"{REDACTED}.log").read_text() == "already here\n"
    assert (tmp_path / f"{REDACTED}.log.1").read_text() == "clean\n"
    inner = tmp_path / f"dir-{REDACTED}" / f"{REDACTED}.txt"
    assert inner.read_text() == f"key {REDACTED}\n"
