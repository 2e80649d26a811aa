"""Files written whole: whoever reads one (the driver polling ``pause.json``, ``status``, a
script reading ``run-summary.json``, Prometheus reading its targets, ``ledger rebuild`` reading an
attempt's ``result.json``) finds the old content or the new, never part of it. A ``write_text``
truncates first: read in between, a ``pause --now`` was once taken for a drain
(``ray_bench.scheduler.driver.PAUSE_SETTLE_SEC``).

The one way ray-bench writes such a file; a login's copy, written with its own mode, is
``ray_bench.cells.home_logins``'s."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def write_whole(path: Path, data: str | bytes, *, durable: bool = False) -> None:
    """``data`` (text as UTF-8) into a temporary file beside ``path``, renamed over it: one
    rename, atomic on one file system. ``durable``: flushed to the disk before the rename (a
    file that must outlive a power loss, not only a crash). The temporary
    (``.<name>.<pid>.<thread>.tmp``: not the name's own suffix, so no glob for it matches) is
    removed when the write fails."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, _FLAGS, 0o666)
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode("utf-8") if isinstance(data, str) else data)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
