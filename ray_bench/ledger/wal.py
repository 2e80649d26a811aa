"""Whether a database's ``-wal`` adds anything to the database file, read as SQLite reads it.

A ``-wal`` left without its ``-shm`` is mostly what a writer killed at its close leaves: SQLite's
last close checkpoints every frame into the database, then removes the ``-shm``, then the
``-wal`` (``sqlite3WalClose``), so the frames are in the file already and the file alone is
exact. That is decided here from the two files, page by page, without SQLite (which cannot read
such a WAL read-only without creating the ``-shm``): the frames SQLite would apply are the valid
ones up to the last commit (salts of the header, the running checksum), and each page's last
version among them must be the file's page, with the file as long as that commit says. Format:
https://sqlite.org/fileformat.html#the_write_ahead_log (header, frames, checksum algorithm).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

_HEADER, _FRAME_HEADER = 32, 24
_MAGIC_LE, _MAGIC_BE = 0x377F0682, 0x377F0683  # the checksums' word order: the magic's low bit
#: A larger WAL is not read here (its checksums are ~0.3 s of Python per 8 MiB): the caller
#: takes its other way.
MAX_WAL_BYTES = 16 << 20


def _checksum(data: bytes, order: str, s0: int, s1: int) -> tuple[int, int]:
    words = struct.unpack(f"{order}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def wal_adds_nothing(db: Path) -> bool | None:
    """True: the file alone reads as SQLite reads it with its ``-wal`` (no valid commit in it, or
    every page it commits is in the file as committed). False: the WAL holds a commit the file
    lacks. None: not decided here (no WAL, a WAL larger than :data:`MAX_WAL_BYTES`, unreadable)."""
    wal = Path(f"{db}-wal")
    try:
        if wal.stat().st_size > MAX_WAL_BYTES:
            return None
        data = wal.read_bytes()
        with db.open("rb") as file:
            return _applied(data, file)
    except OSError:
        return None


def _applied(data: bytes, file: BinaryIO) -> bool:
    if len(data) < _HEADER:
        return True  # SQLite ignores a WAL without a whole header
    magic, _version, page_size, _seq, salt1, salt2, c0, c1 = struct.unpack(">8I", data[:_HEADER])
    if magic not in (_MAGIC_LE, _MAGIC_BE):
        return True  # nor one that is not a WAL (it resets it)
    order = "<" if magic == _MAGIC_LE else ">"
    page_size = 65536 if page_size == 1 else page_size  # the format's spelling of 64 KiB
    s0, s1 = _checksum(data[:24], order, 0, 0)
    if (s0, s1) != (c0, c1) or page_size < 512 or page_size & (page_size - 1):
        return True  # a header whose checksum fails: SQLite reads no frame of it
    last: dict[int, int] = {}  # page -> offset of its data in the committed frames
    pending: dict[int, int] = {}
    size = None
    offset = _HEADER
    while offset + _FRAME_HEADER + page_size <= len(data):
        page, commit, f1, f2, fc0, fc1 = struct.unpack(">6I", data[offset:offset + _FRAME_HEADER])
        body = offset + _FRAME_HEADER
        if (f1, f2) != (salt1, salt2):
            break
        s0, s1 = _checksum(data[offset:offset + 8], order, s0, s1)
        s0, s1 = _checksum(data[body:body + page_size], order, s0, s1)
        if (s0, s1) != (fc0, fc1) or page == 0:
            break
        pending[page] = body
        if commit:
            last.update(pending)
            pending.clear()
            size = commit
        offset = body + page_size
    if size is None:
        return True  # no valid commit: SQLite reads the file alone
    if file.seek(0, 2) != size * page_size:
        return False
    for page, body in last.items():
        if page > size:
            continue  # beyond the committed size: truncated away
        file.seek((page - 1) * page_size)
        if file.read(page_size) != data[body:body + page_size]:
            return False
    return True
