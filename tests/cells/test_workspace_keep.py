"""keep_workspace on the real runner (local backend, no Ray): the agent's workdir is kept as a
redacted, hashed tarball before the verifier runs; over the artifact cap it is not kept at all
(never cut short), with its size and why; a kept one restores into a fresh sandbox."""

from __future__ import annotations

import asyncio
import tarfile
from pathlib import Path

from support.ray_local import TEST_ROUTES
from support.specs import local_spec

from ray_bench.cells.runner import run_attempt
from ray_bench.cells.spec import AttemptSpec
from ray_bench.cells.workspace import WORKSPACE_FILE, file_sha256, restore_workspace
from ray_bench.sandboxes import SandboxSpec
from ray_bench.sandboxes.local import LocalBackend

SECRET = TEST_ROUTES["RB_CANARY_KEY_1"]


def _spec(tmp_path: Path, command: str, cap: int) -> AttemptSpec:
    return local_spec(tmp_path, command, artifact_cap_bytes=cap, keep_workspace=True)


def test_the_workspace_is_kept_redacted_hashed_and_restores(tmp_path: Path) -> None:
    command = 'sh "$SOLUTION_DIR/solve.sh"; mkdir -p notes; echo "$API_KEY" > notes/key.txt'
    summary = asyncio.run(run_attempt(_spec(tmp_path, command, 1 << 20), LocalBackend(tmp_path / "sbx")))
    assert summary.error is None and summary.reward == 1.0
    ws = summary.workspace
    tarball = tmp_path / "attempt" / WORKSPACE_FILE
    assert ws is not None and ws.kept and ws.sha256 == file_sha256(tarball) and ws.bytes == tarball.stat().st_size
    assert summary.artifact_bytes >= ws.bytes  # it counts against the cap with the logs
    with tarfile.open(tarball) as tar:
        assert sorted(tar.getnames()) == ["hello.txt", "notes", "notes/key.txt"]
        key = tar.extractfile("notes/key.txt")
        assert key is not None and SECRET not in key.read().decode()

    async def restored() -> str:
        backend = LocalBackend(tmp_path / "fresh")
        box = await backend.create(SandboxSpec(labels={}, image=None))
        await restore_workspace(box, tarball, "/app", 1 << 20)
        text = (Path(box.path("/app")) / "hello.txt").read_text()
        await box.delete()
        return text

    assert asyncio.run(restored()) == "Hello, world!\n"


def test_a_workspace_over_the_cap_is_not_kept_and_says_how_big(tmp_path: Path) -> None:
    command = 'sh "$SOLUTION_DIR/solve.sh"; head -c 300000 /dev/zero > big.bin'
    summary = asyncio.run(run_attempt(_spec(tmp_path, command, 200_000), LocalBackend(tmp_path / "sbx")))
    ws = summary.workspace
    assert ws is not None and not ws.kept and ws.file is None and ws.sha256 is None and ws.bytes == 0
    assert ws.workspace_bytes is not None and ws.workspace_bytes >= 300_000  # its size, not where it stopped
    assert ws.reason is not None and f"over the artifact cap: {ws.workspace_bytes:,} bytes" in ws.reason
    assert not (tmp_path / "attempt" / WORKSPACE_FILE).exists()
    assert summary.reward == 1.0  # the verifier still graded the attempt
