"""An attempt's directory as one value that travels through Ray: files as bytes, bounded.

Packing never follows a symbolic link (a link could name any file of the runner's node) and
stops adding files at a byte bound; unpacking refuses any path that would leave its directory.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ray_bench.errors import ArchiveEscapeError
from ray_bench.models.attempt import AttemptSummary

#: Packed first, whatever the bound: the summary as the runner wrote it.
FIRST = "result.json"


@dataclass(frozen=True)
class Bundle:
    """A directory tree: ``files`` (relative POSIX path, content, executable?) and ``dirs``
    (so that empty directories survive); ``omitted`` files did not fit the bound."""

    files: tuple[tuple[str, bytes, bool], ...] = ()
    dirs: tuple[str, ...] = ()
    omitted: int = 0

    @property
    def size(self) -> int:
        return sum(len(data) for _, data, _ in self.files)


@dataclass(frozen=True)
class Returned:
    """What a runner on a node without the driver's run root answers: the summary and the
    attempt's directory, for the driver to write into its run root."""

    summary: AttemptSummary
    bundle: Bundle


def pack(root: Path, max_bytes: int | None = None) -> Bundle:
    """``root``'s regular files and directories; past ``max_bytes`` files are counted, not kept."""
    files: list[tuple[str, bytes, bool]] = []
    dirs: list[str] = []
    total = omitted = 0
    entries: list[tuple[str, Path]] = []
    for top, subdirs, names in os.walk(root, followlinks=False):
        rel_top = os.path.relpath(top, root)
        subdirs.sort()
        for sub in subdirs:
            rel = sub if rel_top == "." else f"{rel_top}/{sub}"
            if not os.path.islink(os.path.join(top, sub)):
                dirs.append(rel)
        for name in sorted(names):
            entries.append((name if rel_top == "." else f"{rel_top}/{name}", Path(top, name)))
    entries.sort(key=lambda e: e[0] != FIRST)  # stable: the summary first, the rest in walk order
    for rel, path in entries:
        try:
            info = path.lstat()
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        if max_bytes is not None and total + info.st_size > max_bytes and rel != FIRST:
            omitted += 1
            continue
        try:
            data = path.read_bytes()
        except OSError:
            omitted += 1
            continue
        total += len(data)
        files.append((rel, data, bool(info.st_mode & stat.S_IXUSR)))
    return Bundle(tuple(files), tuple(dirs), omitted)


def unpack(bundle: Bundle, dest: Path) -> int:
    """Write the bundle under ``dest`` (made if missing); returns the bytes written."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel in bundle.dirs:
        (dest / _inside(rel)).mkdir(parents=True, exist_ok=True)
    for rel, data, executable in bundle.files:
        path = dest / _inside(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if executable:
            path.chmod(0o755)
    return bundle.size


def _inside(rel: str) -> str:
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
        raise ArchiveEscapeError(f"bundle entry {rel!r} leaves its directory")
    return rel
