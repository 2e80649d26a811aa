"""The cell runner when the disk under the attempt's files fills: a `DiskFull` error in the
summary it still returns (the driver stops the run on it), its sandbox removed, and no log
left that a full disk kept from redaction."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from support.ray_local import TEST_ROUTES
from support.suites import make_suite

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.runroot import DISK_FULL_ERROR
from ray_bench.sandboxes.local import LocalBackend


def _spec(tmp_path: Path, attempt_dir: Path, command: str) -> AttemptSpec:
    make_suite(tmp_path / "suite", tasks=["hello-world"])
    return AttemptSpec(
        run_id="run", attempt_id="c-a1", cell_id="c", task_id="hello-world", arm="baseline", rep=1,
        account="acct", task_path=str(tmp_path / "suite" / "tasks" / "hello-world"), stage_key=str(tmp_path),
        attempt_dir=str(attempt_dir), backend="local", backend_options={},
        agent_command=command, agent_env={}, agent_dir=None, route_env={"API_KEY": "RB_CANARY_KEY_1"},
        route_home=None, agent_timeout_sec=20.0, verifier_timeout_sec=20.0, verifier_env={}, image=None,
        build_context=None, workdir="/app", network=False, cpus=None, memory_mb=None, pids=None,
        expose_solution=True, artifact_cap_bytes=64 << 20, seed="s")


def test_a_full_disk_under_the_attempt_is_a_disk_full_summary(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.system(f"mount -t tmpfs -o size=1m tmpfs {disk} 2>/dev/null") != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        # the agent's logs (with the key in them) are larger than the disk the attempt goes to
        command = ('echo "$API_KEY" > "$LOGS_DIR/agent/key.txt"; '
                   'head -c 3000000 /dev/zero > "$LOGS_DIR/agent/big.bin"; sh "$SOLUTION_DIR/solve.sh"')
        spec = _spec(tmp_path, disk / "attempt", command)
        summary = asyncio.run(run_attempt(spec, LocalBackend(tmp_path / "sbx")))
        assert summary.error is not None and summary.error.type == DISK_FULL_ERROR, summary.error
        assert list((tmp_path / "sbx").iterdir()) == []  # the sandbox went anyway
        secret = TEST_ROUTES["RB_CANARY_KEY_1"].encode()
        for path in (disk / "attempt").rglob("*"):
            if path.is_file():
                assert secret not in path.read_bytes(), path
    finally:
        os.system(f"umount {disk}")
