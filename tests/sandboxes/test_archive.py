"""The one capped, escape-refusing tar extractor (docker and daytona both copy out through it),
on crafted archives."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_bench.errors import ArchiveEscapeError
from ray_bench.sandboxes.archive import extract_capped, tar_file


def _tar_bytes(*members: tuple[str, str, str]) -> bytes:
    """members: (name, kind, payload) with kind "file", "exec", "dir", "sym" or "hard"."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind in ("file", "exec"):
                info.size = len(payload)
                info.mode = 0o755 if kind == "exec" else 0o644
                tar.addfile(info, io.BytesIO(payload.encode()))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE}[
                kind
            ]
            info.linkname = payload
            tar.addfile(info)
    return buf.getvalue()


def _tar(*members: tuple[str, str, str]) -> list[bytes]:
    """The archive in 1000-byte chunks, as a streamed download arrives."""
    data = _tar_bytes(*members)
    return [data[i : i + 1000] for i in range(0, len(data), 1000)]


# -- entries below a top directory (docker's get_archive) -------------------------------------


@pytest.mark.parametrize(
    "member",
    [
        ("/etc/passwd", "file", "x"),
        ("logs/../../escape", "file", "x"),
        ("../escape", "file", "x"),
        ("other/file", "file", "x"),
        ("logs/abs-link", "sym", "/etc/passwd"),
        ("logs/up-link", "sym", "../../etc"),
        ("logs/sub/up-link", "sym", "../../x"),
        ("logs/hard", "hard", "../etc/passwd"),
        ("logs/abs-hard", "hard", "/etc/passwd"),
        ("logs/other-hard", "hard", "other/file"),
    ],
)
def test_extract_refuses_escapes(member: tuple[str, str, str], tmp_path: Path) -> None:
    chunks = _tar(("logs", "dir", ""), ("logs/fine", "file", "ok"), member)
    with pytest.raises(ArchiveEscapeError):
        extract_capped(chunks, tmp_path / "dest", 1 << 20, top="logs")
    assert not (tmp_path / "escape").exists()


def test_extract_caps_bytes_and_keeps_inner_links_out(tmp_path: Path) -> None:
    chunks = _tar(
        ("logs", "dir", ""),
        ("logs/a", "file", "a" * 60),
        ("logs/sub/b", "file", "b" * 60),
        ("logs/sub/link", "sym", "../a"),
        ("logs/c", "file", "c" * 60),
    )
    dest = tmp_path / "dest"
    assert extract_capped(chunks, dest, 100, top="logs") == 100
    assert (dest / "a").read_text() == "a" * 60
    assert (dest / "sub" / "b").read_text() == "b" * 40
    assert not (dest / "sub" / "link").exists()
    assert not (dest / "c").exists()


# -- entries relative to the destination (daytona's `tar -C dir -cf - .`) ---------------------


def test_archive_escape_is_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../evil")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    with pytest.raises(ArchiveEscapeError):
        extract_capped(buf.getvalue(), tmp_path / "out", 1000)
    assert not (tmp_path / "evil").exists()


@pytest.mark.parametrize(
    "member",
    [
        ("/etc/passwd", "file", "x"),
        ("./../escape", "file", "x"),
        ("./sub/../../escape", "file", "x"),
        ("./abs-link", "sym", "/etc/passwd"),
        ("./up-link", "sym", "../etc"),
        ("./sub/up-link", "sym", "../../x"),
        ("./hard", "hard", "../etc/passwd"),
        ("./abs-hard", "hard", "/etc/passwd"),
    ],
)
def test_extract_without_top_refuses_escapes(member: tuple[str, str, str], tmp_path: Path) -> None:
    data = _tar_bytes(("./", "dir", ""), ("./fine", "file", "ok"), member)
    with pytest.raises(ArchiveEscapeError):
        extract_capped(data, tmp_path / "dest", 1 << 20, truncated_ok=True)
    assert not (tmp_path / "escape").exists()


def test_extract_without_top_skips_inner_links_and_keeps_modes(tmp_path: Path) -> None:
    data = _tar_bytes(
        ("./", "dir", ""),
        ("./run.sh", "exec", "echo hi\n"),
        ("./sub/", "dir", ""),
        ("./sub/b", "file", "b" * 10),
        ("./sub/link", "sym", "../run.sh"),
        ("./sub/hard", "hard", "./sub/b"),
    )
    dest = tmp_path / "dest"
    assert extract_capped(data, dest, 1 << 20) == 18
    assert (dest / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (dest / "sub" / "b").stat().st_mode & 0o777 == 0o644
    assert not (dest / "sub" / "link").exists()
    assert not (dest / "sub" / "hard").exists()


# -- the cap, streaming and truncation ---------------------------------------------------------


def test_cap_reached_mid_file(tmp_path: Path) -> None:
    chunks = _tar(("logs", "dir", ""), ("logs/big", "file", "x" * 5000), ("logs/after", "file", "y"))
    dest = tmp_path / "dest"
    assert extract_capped(chunks, dest, 100, top="logs") == 100
    assert (dest / "big").read_bytes() == b"x" * 100
    assert not (dest / "after").exists()


def test_members_are_written_as_they_stream_in(tmp_path: Path) -> None:
    big = 4 << 20
    data = _tar_bytes(("logs", "dir", ""), ("logs/big", "file", "x" * big))
    dest = tmp_path / "dest"
    on_disk_midway: list[int] = []

    def stream() -> Iterator[bytes]:
        step = 64 << 10
        for offset in range(0, len(data), step):
            if offset >= 3 << 20 and not on_disk_midway:
                on_disk_midway.append((dest / "big").stat().st_size)
            yield data[offset : offset + step]

    assert extract_capped(stream(), dest, 1 << 30, top="logs") == big
    # Three quarters into the download, at least a megabyte is already on disk: the member is
    # copied a chunk at a time, never held in memory whole.
    assert on_disk_midway
    assert on_disk_midway[0] >= 1 << 20


def test_truncated_archive_ends_quietly_only_when_allowed(tmp_path: Path) -> None:
    data = _tar_bytes(("./a", "file", "a" * 600), ("./b", "file", "b" * 2000))
    cut = data[: 512 + 1024 + 512 + 1000]  # a, then b's header and half of b's data
    with pytest.raises(tarfile.ReadError):
        extract_capped(cut, tmp_path / "strict", 1 << 20)
    dest = tmp_path / "lenient"
    written = extract_capped(cut, dest, 1 << 20, truncated_ok=True)
    assert (dest / "a").read_text() == "a" * 600
    assert written == 600
    assert not (dest / "b").exists()  # cut short: dropped, not kept half
    assert extract_capped(b"", tmp_path / "empty", 100, truncated_ok=True) == 0


def test_tar_file_is_one_root_owned_entry() -> None:
    data = tar_file(b"echo hi\n", "data/run.sh", 0o755)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        (info,) = tar.getmembers()
        assert (info.name, info.mode, info.uid, info.gid, info.uname) == (
            "data/run.sh",
            0o755,
            0,
            0,
            "root",
        )
        handle = tar.extractfile(info)
        assert handle is not None
        assert handle.read() == b"echo hi\n"


def test_a_contract_file_over_its_bound_is_not_copied_but_noted(tmp_path: Path) -> None:
    """Issue 58: the tar header gives a file's size before its data; a ``usage.json`` over its
    bound is not written (a 50 MB one was copied whole, then replaced): its note is, the same
    note ``bound_contract_files`` writes, and the files beside it arrive whole."""
    from ray_bench.cells.contract_files import AGENT_JSON_BYTES, bound_contract_files, bounds_below

    big = "x" * (AGENT_JSON_BYTES + 1)
    chunks = _tar(("logs/agent/usage.json", "file", big), ("logs/agent/out.txt", "file", "hello"),
                  ("logs/verifier/reward.txt", "file", "1"))
    dest = tmp_path / "logs"
    written = extract_capped(chunks, dest, 10 << 20, top="logs", bounds=bounds_below())
    note = (dest / "agent" / "usage.json").read_text()
    assert "not kept" in note and str(AGENT_JSON_BYTES + 1) in note, note
    assert written == len(note) + len("hello") + 1
    assert (dest / "agent" / "out.txt").read_text() == "hello" and (dest / "verifier" / "reward.txt").read_text() == "1"
    assert bound_contract_files(dest) == 0  # nothing left to replace
    # the bounds of one part collected alone (``/logs/agent``) are keyed below it
    assert bounds_below("agent") == {"usage.json": AGENT_JSON_BYTES, "error.json": AGENT_JSON_BYTES}
    agent = tmp_path / "agent"
    extract_capped(_tar(("agent/usage.json", "file", big)), agent, 10 << 20, top="agent",
                   bounds=bounds_below("agent"))
    assert (agent / "usage.json").read_text() == note
