"""A local exec cancelled while asyncio is still connecting the new process (a stop or a
timeout that lands at that moment, likeliest on a loaded host): asyncio would SIGKILL the shell
alone, its pid never returned, and what the shell had started ran on (an agent's `sleep 600`
held a test for ten minutes). The start is shielded; its whole group is stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from ray_bench.sandboxes.base import SandboxSpec
from ray_bench.sandboxes.local import LocalBackend


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


async def _cancelled_while_connecting(root: Path, pidfile: Path) -> None:
    backend = LocalBackend(root=root)
    sandbox = await backend.create(SandboxSpec(labels={}))
    try:
        command = f"echo $$ > {pidfile}; sleep 600 & sleep 600"
        task = asyncio.ensure_future(sandbox.exec(command, timeout=900))
        await asyncio.sleep(0.25)  # the shell runs; asyncio still connects its pipes
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await sandbox.delete()


def test_a_cancel_while_the_command_starts_leaves_none_of_its_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from asyncio import base_subprocess

    connect = base_subprocess.BaseSubprocessTransport._connect_pipes

    async def slow_connect(self: Any, waiter: Any) -> None:
        await asyncio.sleep(1.0)
        await connect(self, waiter)

    monkeypatch.setattr(base_subprocess.BaseSubprocessTransport, "_connect_pipes", slow_connect)
    pidfile = tmp_path / "pgid"
    asyncio.run(_cancelled_while_connecting(tmp_path / "sbx", pidfile))
    pgid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _group_alive(pgid)
    if alive:  # not left to run for ten minutes when the test fails
        os.killpg(pgid, signal.SIGKILL)
    assert not alive, f"the command's group {pgid} ran on"
