"""The conformance suite against the ``local`` backend, and what only it does (moving logs out,
keeping small filesystem work on the event loop)."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from ray_bench.sandboxes import local
from ray_bench.sandboxes.base import SandboxSpec
from ray_bench.sandboxes.local import LocalBackend, LocalSandbox

from .conformance import BackendFactory, SandboxConformance, SpecFactory


class TestLocalConformance(SandboxConformance):
    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        return lambda: LocalBackend(root=tmp_path / "sandboxes")

    @pytest.fixture
    def sandbox_spec(self) -> SpecFactory:
        def make(labels: Mapping[str, str]) -> SandboxSpec:
            return SandboxSpec(labels=labels)

        return make


def _sandbox(tmp_path: Path) -> tuple[LocalBackend, LocalSandbox]:
    backend = LocalBackend(root=tmp_path / "sandboxes")
    sbx = asyncio.run(backend.create(SandboxSpec(labels={"ray-bench.run": "r"})))
    assert isinstance(sbx, LocalSandbox)
    return backend, sbx


def test_take_dir_moves_logs_out_and_drops_links(tmp_path: Path) -> None:
    _, sbx = _sandbox(tmp_path)
    logs = Path(sbx.path("/logs"))
    (logs / "agent").mkdir(parents=True)
    (logs / "agent" / "out.txt").write_text("kept\n")
    (tmp_path / "secret.txt").write_text("not yours\n")
    (logs / "agent" / "link").symlink_to(tmp_path / "secret.txt")
    before = (logs / "agent" / "out.txt").stat().st_ino

    n = asyncio.run(sbx.take_dir("/logs", tmp_path / "collected", max_bytes=1 << 20))

    assert n == len("kept\n")
    assert (tmp_path / "collected" / "agent" / "out.txt").stat().st_ino == before  # moved, not copied
    assert not (tmp_path / "collected" / "agent" / "link").exists()
    assert not (tmp_path / "collected" / "agent" / "link").is_symlink()
    assert not logs.exists()
    asyncio.run(sbx.delete())


def test_take_dir_over_the_cap_copies_what_fits(tmp_path: Path) -> None:
    _, sbx = _sandbox(tmp_path)
    logs = Path(sbx.path("/logs"))
    logs.mkdir()
    (logs / "a.bin").write_bytes(b"a" * 300)
    (logs / "b.bin").write_bytes(b"b" * 300)

    n = asyncio.run(sbx.take_dir("/logs", tmp_path / "collected", max_bytes=400))

    assert n == 400
    assert (tmp_path / "collected" / "a.bin").read_bytes() == b"a" * 300
    assert (tmp_path / "collected" / "b.bin").read_bytes() == b"b" * 100
    assert (logs / "a.bin").exists()  # copied: the sandbox keeps its files until deleted
    asyncio.run(sbx.delete())


def test_take_dir_kills_what_still_runs_in_the_sandbox(tmp_path: Path) -> None:
    """A background process left by the agent must not write into collected (redacted) logs."""
    _, sbx = _sandbox(tmp_path)
    logs = sbx.path("/logs")
    res = asyncio.run(sbx.exec(f"mkdir -p {logs}; (sleep 0.5; echo late > {logs}/late.txt) >/dev/null 2>&1 &",
                               timeout=10))
    assert res.exit_code == 0
    asyncio.run(sbx.take_dir("/logs", tmp_path / "collected", max_bytes=1 << 20))
    time.sleep(1.0)
    assert not (tmp_path / "collected" / "late.txt").exists()
    asyncio.run(sbx.delete())


def test_uploads_keep_modes_and_links(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "run.sh").write_text("#!/bin/sh\n")
    (src / "bin" / "run.sh").chmod(0o750)
    (src / "private.txt").write_text("p")
    (src / "private.txt").chmod(0o600)
    (src / "alias").symlink_to("bin/run.sh")
    _, sbx = _sandbox(tmp_path)

    asyncio.run(sbx.put_dir(src, "/up"))

    up = Path(sbx.path("/up"))
    assert stat.S_IMODE((up / "bin" / "run.sh").stat().st_mode) == 0o750
    assert stat.S_IMODE((up / "private.txt").stat().st_mode) == 0o600
    assert os.readlink(up / "alias") == "bin/run.sh"
    asyncio.run(sbx.delete())


def test_large_trees_leave_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small trees are handled inline; a tree past SMALL_TREE entries goes to a thread."""
    threads: list[str] = []
    real = asyncio.to_thread

    async def spy(func: object, *args: object) -> object:
        threads.append(getattr(func, "__name__", "?"))
        return await real(func, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(local.asyncio, "to_thread", spy)
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir()
    (small / "f").write_text("x")
    large.mkdir()
    for i in range(local.SMALL_TREE + 1):
        (large / f"f{i}").write_text("x")
    _, sbx = _sandbox(tmp_path)
    asyncio.run(sbx.put_dir(small, "/s"))
    assert threads == []
    asyncio.run(sbx.put_dir(large, "/l"))
    assert threads == ["_copy_tree"]
    assert len(list(Path(sbx.path("/l")).iterdir())) == local.SMALL_TREE + 1
    asyncio.run(sbx.put_dir(small, "/logs"))
    assert asyncio.run(sbx.take_dir("/logs", tmp_path / "got-small", max_bytes=1 << 20)) == 1
    asyncio.run(sbx.put_dir(large, "/logs"))
    assert asyncio.run(sbx.take_dir("/logs", tmp_path / "got-large", max_bytes=1 << 20)) == local.SMALL_TREE + 1
    assert threads == ["_copy_tree", "_copy_tree", "_move_or_copy"]
    assert len(list((tmp_path / "got-large").iterdir())) == local.SMALL_TREE + 1
    asyncio.run(sbx.delete())
    assert threads == ["_copy_tree", "_copy_tree", "_move_or_copy", "remove_dir"]
    assert not sbx.root.exists()


def test_take_dir_across_filesystems_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox root on another filesystem than the run root: rename fails with EXDEV."""
    _, sbx = _sandbox(tmp_path)
    logs = Path(sbx.path("/logs"))
    (logs / "verifier").mkdir(parents=True)
    (logs / "verifier" / "reward.txt").write_text("1\n")

    def exdev(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(local.os, "rename", exdev)
    n = asyncio.run(sbx.take_dir("/logs", tmp_path / "collected", max_bytes=1 << 20))

    assert n == 2
    assert (tmp_path / "collected" / "verifier" / "reward.txt").read_text() == "1\n"
    asyncio.run(sbx.delete())
    assert not sbx.root.exists()


def test_a_sandbox_is_findable_by_label_from_the_instant_it_exists(tmp_path: Path) -> None:
    """Under ``sbx-*`` a directory exists only with its record inside (renamed into place);
    what a SIGKILL can leave (a staging directory of a dead creator, a removal interrupted
    after its record went) is swept by the next ``list``."""
    from ray_bench.sandboxes.local_dirs import MARKER, create_dir, remove_dir

    backend = LocalBackend(tmp_path)
    labels = {"ray-bench.run": "r1"}
    path = create_dir(tmp_path, labels)
    assert path.name.startswith("sbx-") and (path / MARKER).is_file()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no staging left
    dead = _dead_pid()
    (tmp_path / f".staging-{dead}-abc").mkdir()  # killed between mkdir and the record
    (tmp_path / f".staging-{os.getpid()}-def").mkdir()  # a live creator's: left alone
    (tmp_path / "sbx-half-removed").mkdir()  # killed after the record was deleted
    (tmp_path / "sbx-half-removed" / "leftover").write_text("x")
    refs = asyncio.run(backend.list(labels))
    assert [r.id for r in refs] == [path.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, f".staging-{os.getpid()}-def"])
    (path / "work").mkdir()
    (path / "work" / "f").write_text("x")
    remove_dir(path)
    assert not path.exists()


def _dead_pid() -> int:
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_small_sandbox_is_removed_in_one_walk_its_record_last(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``remove_small_dir`` lists the tree once and removes children before their parents and
    the record after everything but the directory itself (an interrupted removal stays findable
    or sweepable, as ``remove_dir``'s); over its limit it removes nothing."""
    from ray_bench.sandboxes import local_dirs
    from ray_bench.sandboxes.local_dirs import MARKER, create_dir, remove_small_dir

    path = create_dir(tmp_path, {"ray-bench.run": "r1"})
    for sub in ("app/src/pkg", "logs/agent", "tests"):
        (path / sub).mkdir(parents=True)
    for f in ("app/src/pkg/m.py", "app/a.txt", "tests/test.sh"):
        (path / f).write_text("x")
    os.symlink("/etc", path / "app" / "link")
    assert remove_small_dir(path, 3) is False
    assert (path / MARKER).is_file() and (path / "app" / "src" / "pkg" / "m.py").is_file()

    gone: list[str] = []
    for name in ("unlink", "rmdir"):
        real = getattr(os, name)
        monkeypatch.setattr(local_dirs.os, name, lambda p, _real=real: (gone.append(str(p)), _real(p))[1])
    listings: list[str] = []
    real_scandir = os.scandir
    monkeypatch.setattr(local_dirs.os, "scandir", lambda p: (listings.append(str(p)), real_scandir(p))[1])
    assert remove_small_dir(path, 256) is True
    assert not path.exists() and Path("/etc").is_dir()
    assert gone[-2:] == [str(path / MARKER), str(path)]
    for i, name in enumerate(gone):  # nothing is removed before what it holds
        assert not any(later.startswith(name + "/") for later in gone[i + 1:]), (name, gone)
    assert sorted(listings) == sorted({str(path), *(str(path / d) for d in
                                                    ("app", "app/src", "app/src/pkg", "logs", "logs/agent", "tests"))})


def test_the_scripts_shell_is_remembered_while_it_is_there(tmp_path: Path) -> None:
    """``exec_script`` runs the script with the ``bash`` (else ``sh``) its PATH finds, looked up
    once per PATH: a bash taken away since is looked for again (here: the system's sh)."""
    _, sbx = _sandbox(tmp_path)
    mine = tmp_path / "bin"
    mine.mkdir()
    bash = mine / "bash"
    bash.write_text('#!/bin/sh\necho "my bash ran $1"\n')
    bash.chmod(0o755)
    path = f"{mine}:/usr/bin:/bin"
    asyncio.run(sbx.put_file(b"echo plain\n", "/t/s.sh"))

    def run() -> str:
        return asyncio.run(sbx.exec_script("/t/s.sh", timeout=30, env={"PATH": path})).stdout

    assert run() == f"my bash ran {sbx.path('/t/s.sh')}\n"
    assert local._SHELLS[path] == str(bash)
    assert run() == f"my bash ran {sbx.path('/t/s.sh')}\n"
    bash.unlink()
    assert run() == "plain\n"  # /usr/bin/bash or /bin/sh, found again
    assert local._SHELLS[path] != str(bash)
    asyncio.run(sbx.delete())
