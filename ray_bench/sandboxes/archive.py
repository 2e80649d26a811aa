"""Tar archives between the driver and a container sandbox: building what goes in, and
extracting what comes out under a byte cap.

Extraction is the security-relevant half: the archive is built inside a sandbox an agent has
had its hands on, so every backend that copies files out goes through the one
:func:`extract_capped` here. Its rules are those of the local backend's copy: directories and
regular files only; an entry that is absolute, climbs with ``..``, or is a link pointing out of
the destination raises :class:`ArchiveEscapeError`; a link that stays inside is skipped, not
created; file data stops at the byte cap, streamed a chunk at a time.
"""

from __future__ import annotations

import io
import json
import logging
import tarfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import IO, Any

from ray_bench.errors import ArchiveEscapeError

log = logging.getLogger(__name__)

# Large enough that a multi-megabyte log costs a handful of writes, small enough that a member
# is never held in memory whole.
_CHUNK = 1 << 20


def root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """A ``tar.add`` filter: entries land owned by root, whatever owns them on the driver."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def tar_file(data: bytes, arcname: str, mode: int) -> bytes:
    """A one-entry archive: ``data`` as ``arcname`` with ``mode``, owned by root."""
    buf = io.BytesIO()
    info = root_owned(tarfile.TarInfo(arcname))
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def over_bound_note(name: str, bound: int, size: int) -> bytes:
    """What stands in for a contract file over its bound (``usage.json``, ``reward.txt``, ...):
    a few bytes saying so, which its reader finds unreadable, as it would the file itself."""
    note = f"larger than {bound} bytes ({size} bytes): not kept"
    return (json.dumps({"unparseable": note}) if name.endswith(".json") else f"not kept: {note}\n").encode()


def extract_capped(
    source: bytes | Iterable[bytes],
    dest: Path,
    max_bytes: int,
    *,
    top: str | None = None,
    truncated_ok: bool = False,
    bounds: Mapping[str, int] | None = None,
) -> int:
    """Extract the tar stream ``source`` (bytes, or an iterator of byte chunks) into ``dest``:
    directories and regular files only, at most ``max_bytes`` of file data; return the bytes
    written. Any entry that would land outside ``dest`` (absolute, ``..``, a symlink or hard
    link pointing out) raises :class:`ArchiveEscapeError`; links that stay inside are skipped.

    ``top``: every entry must sit below this first path component, which is stripped (Docker's
    ``get_archive`` names entries after the directory it was asked for); without it, entries
    are relative to ``dest`` (``tar -C dir -cf - .``).

    ``truncated_ok``: an archive cut short ends the extraction quietly, keeping what was
    written (Daytona caps the archive on the sandbox side); otherwise ``tarfile.ReadError``
    propagates.

    ``bounds``: a file at one of these paths (relative to ``dest``) whose header says it is larger
    than its bound is not copied: :func:`over_bound_note` is written in its place (issue 58: a
    50 MB ``usage.json`` was copied whole, then replaced).
    """
    chunks = [bytes(source)] if isinstance(source, (bytes, bytearray, memoryview)) else source
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    written = 0
    try:
        with tarfile.open(fileobj=io.BufferedReader(_ChunkReader(chunks)), mode="r|") as tar:
            for member in tar:
                rel = _member_rel(member.name, top)
                target = (root / rel).resolve() if rel.parts else root
                if not target.is_relative_to(root):
                    raise ArchiveEscapeError(f"archive entry {member.name!r} leaves {dest}")
                if member.issym() or member.islnk():
                    _check_link(member, rel, top)
                    continue
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    continue
                budget = max_bytes - written
                if budget <= 0:
                    break
                bound = (bounds or {}).get(rel.as_posix())
                if bound is not None and member.size > bound:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    note = over_bound_note(rel.name, bound, member.size)
                    target.write_bytes(note)
                    written += len(note)
                    continue  # the stream skips its data unread
                source_file = tar.extractfile(member)
                if source_file is None:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    written += _copy(source_file, target, min(budget, member.size))
                except (tarfile.ReadError, EOFError):
                    target.unlink(missing_ok=True)  # a member cut short is dropped, not kept half
                    raise
                target.chmod(0o755 if member.mode & 0o100 else 0o644)
    except (tarfile.ReadError, EOFError) as exc:
        if not truncated_ok:
            raise
        log.debug("archive ended early after %d bytes (capped on the sending side): %s", written, exc)
    return written


def _copy(source: IO[bytes], target: Path, limit: int) -> int:
    """Copy at most ``limit`` bytes of ``source`` into ``target``, a chunk at a time."""
    copied = 0
    with target.open("wb") as out:
        while copied < limit and (chunk := source.read(min(limit - copied, _CHUNK))):
            out.write(chunk)
            copied += len(chunk)
    return copied


class _ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks, for streaming tar extraction."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def _member_rel(name: str, top: str | None) -> PurePosixPath:
    """``name`` relative to the destination, or :class:`ArchiveEscapeError` when it is absolute,
    climbs with ``..``, or (given ``top``) is not below ``top``."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise ArchiveEscapeError(f"archive entry {name!r} is absolute or climbs out")
    parts = [p for p in path.parts if p != "."]
    if top is None:
        return PurePosixPath(*parts)
    if not parts or parts[0] != top:
        raise ArchiveEscapeError(f"archive entry {name!r} is not below {top!r}")
    return PurePosixPath(*parts[1:])


def _check_link(member: tarfile.TarInfo, rel: PurePosixPath, top: str | None) -> None:
    """Refuse a link whose target leaves the destination (it is skipped either way)."""
    if member.islnk():  # a hard link names another archive member
        _member_rel(member.linkname, top)
        return
    link = PurePosixPath(member.linkname)
    if link.is_absolute():
        raise ArchiveEscapeError(f"symlink {member.name!r} points out to {member.linkname!r}")
    depth = len(rel.parts) - 1  # directories between the destination and the link
    for part in link.parts:
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            raise ArchiveEscapeError(f"symlink {member.name!r} points out to {member.linkname!r}")
