"""The agent's final workspace, kept as a tarball for ``ray-bench regrade``.

Kept (an arm's ``keep_workspace``) right after the agent phase, before the collect hooks and the
verifier touch it: the task's workdir, through the sandbox interface (``get_dir``), so every
backend keeps it the same way. The tarball counts against the attempt's artifact cap like its
logs; a workspace over what the cap leaves is not kept at all (a cut-short workspace would grade
as a different answer), and the summary says so with its size. Regular files and directories
only, as every ``get_dir`` copies them: links and special files are not kept.

Restoring extracts it through :func:`ray_bench.sandboxes.archive.extract_capped` (the tarball
came out of a sandbox an agent had its hands on) and puts it over the workdir of a fresh
sandbox of the task's image. What it cannot bring back: files the agent deleted from the image's
workdir (they are there again) and anything the agent changed outside the workdir.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shlex
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ray_bench.config.tasks import TaskFile, task_checksum, task_files
from ray_bench.models.attempt import WorkspaceFacts
from ray_bench.sandboxes import Sandbox
from ray_bench.sandboxes.archive import extract_capped, root_owned

WORKSPACE_FILE = "workspace.tar.gz"

#: A task's parts, by the first component of a file's path; everything else (task.toml, a
#: README) is its ``config``. Regrade needs every part but ``tests`` unchanged.
_PARTS = {"tests": "tests", "instruction.md": "instruction", "environment": "environment",
          "solution": "solution"}
_CHUNK = 1 << 20


def task_parts(task_dir: Path) -> dict[str, str]:
    """part -> checksum (the whole-task checksum's rule, over that part's files alone)."""
    groups: dict[str, list[TaskFile]] = {p: [] for p in (*_PARTS.values(), "config")}
    for entry in task_files(task_dir):
        groups[_PARTS.get(entry.rel.split("/", 1)[0], "config")].append(entry)
    return {part: task_checksum(task_dir, members) for part, members in groups.items()}


def changed_parts(then: dict[str, str], now: dict[str, str]) -> list[str]:
    """The parts whose checksum differs (a part missing on one side differs)."""
    return sorted(p for p in {*then, *now} if then.get(p) != now.get(p))


@dataclass(frozen=True)
class RegradeSource:
    """What a regrade runs the verifier on: the source attempt's kept workspace."""

    attempt_id: str
    tarball: Path
    workdir: str


async def keep_workspace(sandbox: Sandbox, workdir: str, attempt_dir: Path, room: int, task_dir: Path,
                         scrub: Callable[[Path], object]) -> WorkspaceFacts:
    """Copy ``workdir`` out and write ``attempt_dir/workspace.tar.gz`` if it fits ``room`` bytes.
    ``scrub`` redacts the copy before it is packed (an agent may have written its key into a file)."""
    facts = WorkspaceFacts(workdir=workdir, task_parts=task_parts(task_dir))
    with tempfile.TemporaryDirectory(prefix="rb-workspace-") as tmp:
        tree = Path(tmp) / "w"
        # One byte over the room tells "fits" from "was cut at the cap".
        copied = await sandbox.get_dir(workdir, tree, max_bytes=room + 1)
        facts.workspace_bytes = copied
        if copied > room:
            facts.workspace_bytes = await _measured(sandbox, workdir) or copied
            facts.reason = f"over the artifact cap: {facts.workspace_bytes:,} bytes, {room:,} left for it"
            return facts
        scrub(tree)
        target = attempt_dir / WORKSPACE_FILE
        _write_tarball(tree, target)
        size = target.stat().st_size
        if size > room:
            target.unlink()
            facts.reason = f"over the artifact cap: its tarball is {size:,} bytes, {room:,} left for it"
            return facts
    facts.kept, facts.file, facts.bytes, facts.sha256 = True, WORKSPACE_FILE, size, file_sha256(target)
    return facts


async def _measured(sandbox: Sandbox, workdir: str) -> int | None:
    """The workspace's size as ``du`` sees it inside the sandbox (apparent bytes where ``du -b``
    exists, else KiB of disk), or None when it cannot say."""
    path = shlex.quote(sandbox.path(workdir))
    found = await sandbox.exec(f"du -sb {path} 2>/dev/null || echo $(( $(du -sk {path} | cut -f1) * 1024 ))",
                               timeout=60)
    head = (found.stdout.split() or [""])[0]
    return int(head) if found.exit_code == 0 and head.isdigit() else None


def _write_tarball(tree: Path, target: Path) -> None:
    tmp = target.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        if tree.is_dir():
            for name in sorted(os.listdir(tree)):
                tar.add(tree / name, arcname=name, filter=root_owned)
    os.replace(tmp, target)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _gunzipped(path: Path) -> Iterator[bytes]:
    with gzip.open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            yield chunk


async def restore_workspace(sandbox: Sandbox, tarball: Path, workdir: str, max_bytes: int) -> int:
    """Put a kept workspace over ``workdir`` of a fresh sandbox; return its file bytes."""
    with tempfile.TemporaryDirectory(prefix="rb-workspace-") as tmp:
        tree = Path(tmp) / "w"
        written = extract_capped(_gunzipped(tarball), tree, max_bytes)
        await sandbox.put_dir(tree, workdir)
    return written
