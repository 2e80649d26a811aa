"""The ``daytona`` backend against the limits of the real service that the local fixture learnt
from ``apps/api`` of daytonaio/daytona: a per-sandbox resource limit (403, never the backend's
key), a bring-up stuck in ``unknown`` (DELETE 409: the reaper outlives it), a runner's first
pull of a snapshot (the create waits for it) and the sandbox's disk (ENOSPC past it)."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("daytona", reason="the daytona extra is not installed")

from support.daytona_fixtures import backend_for, boxes_of, new_run_id, spec_for
from support.daytona_server import DaytonaServer, Faults

from ray_bench.errors import SandboxCreateError, SandboxDiskFullError, SandboxError, SandboxTooLargeError
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.classify import classify
from ray_bench.models.attempt import AttemptError, AttemptSummary
from ray_bench.sandboxes.base import Resources

pytestmark = [pytest.mark.daytona, pytest.mark.docker]


def _run_id() -> str:
    return new_run_id("dtlim")


_mine = boxes_of


def _verdict(exc: SandboxError) -> tuple[str | None, str, bool]:
    """(class, effect, counts) of an attempt that ended in ``exc``, as the classifier says."""
    summary = AttemptSummary(error=AttemptError(type=type(exc).__name__, message=str(exc),
                                                failure_class=exc.failure_class))
    verdict = classify(summary, Catalog.default())
    return verdict.failure_class, verdict.effect, verdict.counts


def test_a_size_past_the_per_sandbox_limit_is_a_counted_task_failure_not_the_keys(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(max_cpu_per_sandbox=1, max_memory_per_sandbox=2)
    run_id = _run_id()

    async def main() -> tuple[SandboxTooLargeError, SandboxTooLargeError]:
        backend = backend_for(server)
        try:
            with pytest.raises(SandboxTooLargeError) as cpu:
                await backend.create(spec_for(base_image, run_id, resources=Resources(cpus=2)))
            with pytest.raises(SandboxTooLargeError) as memory:
                await backend.create(spec_for(base_image, run_id, resources=Resources(memory_mb=3 * 1024)))
            return cpu.value, memory.value
        finally:
            await backend.close()

    cpu, memory = asyncio.run(main())
    assert "CPU request 2 exceeds maximum allowed per sandbox (1)" in str(cpu)
    assert "Memory request 3GB exceeds maximum allowed per sandbox (2GB)" in str(memory)
    assert server.counts["limit_403"] == 2 and _mine(server, run_id) == []  # nothing made
    # Counted against the cell's attempts (so bounded), and no account or key is blamed.
    assert _verdict(cpu) == ("task", "none", True)


def test_a_delete_refused_while_the_sandbox_is_unknown_is_finished_by_the_reaper(
    server: DaytonaServer, base_image: str
) -> None:
    # The row waits for a runner longer than the create may: every DELETE meanwhile is a 409.
    server.faults = Faults(unknown_sec=3.0)
    server.snapshots["lim-unknown"] = base_image
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server, create_timeout=1.0, delete_timeout=0.5)
        try:
            with pytest.raises(SandboxCreateError, match="still unknown"):
                await backend.create(spec_for("snapshot:lim-unknown", run_id))
            assert len(backend.reaper.pending()) == 1  # handed over, not dropped
        finally:
            await backend.close()  # waits for the reaper
        assert backend.reaper.pending() == []

    asyncio.run(main())
    assert server.counts["delete_409"] > 0
    assert [b["state"] for b in _mine(server, run_id)] == ["destroyed"]


def test_a_runners_first_sandbox_of_a_snapshot_waits_for_its_pull(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(pull_sec=2.0)
    server.snapshots["lim-pull"] = base_image
    run_id = _run_id()

    async def main() -> list[float]:
        backend = backend_for(server)
        took = []
        try:
            for _ in range(2):
                started = time.monotonic()
                sbx = await backend.create(spec_for("snapshot:lim-pull", run_id))
                took.append(time.monotonic() - started)
                await sbx.delete()
        finally:
            await backend.close()
        return took

    first, second = asyncio.run(main())
    assert server.counts["cold_pulls"] == 1  # one runner: the second finds the snapshot there
    assert first >= 2.0 and second < first - 1.0


def test_a_write_past_the_sandboxs_disk_fails_with_enospc_and_a_full_disk_is_capacity(
    server: DaytonaServer, base_image: str
) -> None:
    # 1 "GiB" = 1 MiB here: a 1-GiB sandbox holds 1 MiB under /tmp, where the exec wrapper keeps
    # a command's output (the real sandbox's one disk holds both).
    server.faults = Faults(disk_paths=("/tmp",), disk_gib_bytes=1 << 20)
    run_id = _run_id()

    async def main() -> tuple[int, SandboxDiskFullError]:
        backend = backend_for(server)
        try:
            sbx = await backend.create(spec_for(base_image, run_id, resources=Resources(disk_mb=1024)))
            try:
                fits = await sbx.exec("head -c 512000 /dev/zero > /tmp/half", timeout=30)
                with pytest.raises(SandboxDiskFullError) as full:
                    await sbx.exec("head -c 1048576 /dev/zero > /tmp/more", timeout=30)
            finally:
                await sbx.delete()
        finally:
            await backend.close()
        return fits.exit_code, full.value

    fits, full = asyncio.run(main())
    assert fits == 0 and "No space left on device" in str(full)
    # A verdict on the sandbox's size, as an out-of-memory sandbox: not the provider's; bounded by
    # the cell's absolute cap (runstate.attempt_cap), not its max_attempts.
    assert _verdict(full) == ("capacity", "none", False)
