"""The redactor scrubs file contents and file names."""

from __future__ import annotations

import base64
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


def _encodings(value: bytes) -> list[str]:
    std = base64.b64encode(value).decode()
    url = base64.urlsafe_b64encode(value).decode()
    return [std, std.rstrip("="), url, url.rstrip("=")]


def test_the_base64_of_a_secret_is_redacted_in_any_alphabet_and_alignment(tmp_path: Path) -> None:
    # a value whose encoding has + and / (so the urlsafe form differs) and needs padding
    secret = "sk-\xfb\xff?>~canary-0a9b8"
    assert len(secret.encode()) % 3 and "+" in base64.b64encode(secret.encode()).decode()
    blobs = [*_encodings(secret.encode()),
             *_encodings(f"user:{secret}".encode()),  # a Basic auth header: the key mid-blob
             *_encodings(f"ab:{secret}:tail".encode())]
    for n, blob in enumerate(blobs):
        (tmp_path / f"f{n}.txt").write_text(f"Authorization: Basic {blob}\n")
    assert Redactor([secret]).tree(tmp_path) == len(blobs)
    for n, blob in enumerate(blobs):
        text = (tmp_path / f"f{n}.txt").read_text()
        assert REDACTED in text and blob not in text, (n, text)
        # all the characters the secret's bytes determine went: what is left beside the
        # marker is the encoded prefix and suffix and at most one boundary character each side
        left = text.removeprefix("Authorization: Basic ").strip().replace(REDACTED, "")
        assert len(left) <= len(blob) - (4 * len(secret.encode())) // 3 + 2, (n, text)
    assert Redactor([secret]).text(base64.b64encode(secret.encode()).decode()).startswith(REDACTED)


def test_unrelated_base64_is_left_alone(tmp_path: Path) -> None:
    other = base64.b64encode(b"an ordinary payload with no key in it").decode()
    (tmp_path / "a.txt").write_text(other)
    assert Redactor([SECRET]).tree(tmp_path) == 0
    assert (tmp_path / "a.txt").read_text() == other


def test_only_regular_files_are_read_and_rewritten(tmp_path: Path) -> None:
    import os

    outside = tmp_path / "outside.txt"
    outside.write_text(f"key {SECRET}\n")
    logs = tmp_path / "logs"
    (logs / "sub").mkdir(parents=True)
    (logs / "sub" / "link").symlink_to(outside)  # a link out of the logs is not followed
    os.mkfifo(logs / "pipe")  # reading a fifo would block the runner
    (logs / "sub" / "out.txt").write_text(f"{SECRET}\n")
    assert Redactor([SECRET]).tree(logs) == 1
    assert outside.read_text() == f"key {SECRET}\n"
    assert (logs / "sub" / "out.txt").read_text() == f"{REDACTED}\n"
