"""A local sandbox's directory is findable by its labels from the instant it exists.

``mkdir`` then writing the labels leaves a window in which a SIGKILLed runner leaves a
directory nobody can find by label (the residue seen in the driver-crash test under load).
So a sandbox is assembled under a staging name that carries its creator's pid and renamed
into place with its record already inside; removal deletes the record last. What a kill can
still leave is recognisable without labels and swept by :func:`sweep`:

- ``.staging-<pid>-<id>`` whose creator is dead: nothing ever ran in it (processes start only
  after ``create`` returns);
- ``sbx-<id>`` without a record: a removal that was interrupted after its processes were
  killed and its record deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path

from ray_bench.runroot import pid_alive

#: The sandbox's record: its labels (JSON, first line), then one line per process group it
#: started, so that a later ``remove`` (audit, resume after a crash) can kill what a dead
#: runner left behind. One file: on a busy host every file created costs (see _copy_tree).
MARKER = ".ray-bench-sandbox.json"
_STAGING = ".staging-"


def create_dir(root: Path, labels: Mapping[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    sandbox_id = uuid.uuid4().hex[:12]
    staging = root / f"{_STAGING}{os.getpid()}-{sandbox_id}"
    staging.mkdir()
    (staging / MARKER).write_text(json.dumps({"labels": dict(labels)}) + "\n")
    final = root / f"sbx-{sandbox_id}"
    os.rename(staging, final)
    return final


def remove_dir(path: Path) -> None:
    """Delete everything but the record, then the record, then the directory: an interrupted
    removal leaves either a findable sandbox or a record-less ``sbx-*`` for :func:`sweep`."""
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name == MARKER:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path / MARKER)
    shutil.rmtree(path, ignore_errors=True)


def remove_small_dir(path: Path, limit: int) -> bool:
    """:func:`remove_dir` in one walk when ``path`` holds at most ``limit`` entries (listed once,
    then removed children first, the record last but the directory); False, with nothing
    removed, when it holds more. A no-op cell's sandbox walked to see whether it was small, then
    walked again by ``rmtree``: twice the listings for the same few entries."""
    entries: list[tuple[str, bool]] = []  # a parent is listed before its children
    stack = [str(path)]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as listing:
                for entry in listing:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    entries.append((entry.path, is_dir))
                    if len(entries) > limit:
                        return False
                    if is_dir:
                        stack.append(entry.path)
        except (FileNotFoundError, NotADirectoryError):
            continue
    marker = str(path / MARKER)
    try:
        for name, is_dir in reversed(entries):
            if name != marker:
                os.rmdir(name) if is_dir else os.unlink(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker)
        os.rmdir(path)
    except OSError:  # gone already, an entry made since the listing, a mode: removed as before
        remove_dir(path)
    return True


def sweep(root: Path) -> int:
    """Remove the debris a kill can leave (see the module docstring); return how many."""
    removed = 0
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        if entry.name.startswith(_STAGING):
            pid_text = entry.name[len(_STAGING):].split("-", 1)[0]
            if pid_text.isdigit() and not pid_alive(int(pid_text)):
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
        elif entry.name.startswith("sbx-") and not (path / MARKER).exists():
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed
