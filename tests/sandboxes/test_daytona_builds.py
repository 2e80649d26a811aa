"""Builds as Daytona has them, on the fixture: every image create is a declarative build cached
per runner (a cold build on each runner a create lands on, none on a warm one), ``POST
/snapshots`` through the SDK (what the build phase's DaytonaSnapshotBuilder sends), a failed
build's reason, and a create from a snapshot that does not exist answered as the API does."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

pytest.importorskip("daytona", reason="the daytona extra is not installed")

import requests
from support.daytona_fixtures import backend_for, spec_for
from support.daytona_server import DaytonaServer, Faults

from ray_bench.errors import SandboxCreateError, SandboxQuotaError
from ray_bench.models.build import BuildTarget
from ray_bench.sandboxes.daytona.snapshots import DaytonaSnapshotBuilder
from ray_bench.scheduler.builds import run_build_phase, snapshot_name

pytestmark = [pytest.mark.daytona, pytest.mark.docker]


def _run_id() -> str:
    return f"dtbuild-{uuid.uuid4().hex[:8]}"


def image_target(image: str, run_id: str) -> BuildTarget:
    """One snapshot of ``image`` at the default size, named for ``run_id`` (new to the server)."""
    return BuildTarget(snapshot=snapshot_name(f"{image}-{run_id}", (1, 1, 3)), image=image,
                       cpu=1, memory_gib=1, disk_gib=3, tasks=("t",), cells=("c",))


def test_image_creates_build_cold_once_per_runner_and_warm_runners_build_nothing(
    server: DaytonaServer, base_image: str
) -> None:
    server.reset_builds(runners=3)
    server.faults = Faults(cold_build_sec=0.3)
    run_id = _run_id()

    async def batch(n: int) -> None:
        backend = backend_for(server)
        try:
            made = await asyncio.gather(*(backend.create(spec_for(base_image, run_id)) for _ in range(n)))
            for sbx in made:
                assert (await sbx.exec("echo ok", timeout=30)).stdout.strip() == "ok"
            await asyncio.gather(*(sbx.delete() for sbx in made))
        finally:
            await backend.close()

    asyncio.run(batch(6))
    cold = list(server.cold_builds)
    assert 1 <= len(cold) <= 3
    assert len(set(cold)) == len(cold)  # a runner builds an image once, later creates wait for it
    assert server.counts["cold_builds"] + server.counts["warm_builds"] == 6
    asyncio.run(batch(4))
    assert server.cold_builds == cold  # every create of the second batch landed on a warm runner


def test_a_create_from_a_snapshot_that_does_not_exist_is_answered_400_as_the_api_does(
    server: DaytonaServer,
) -> None:
    answer = requests.post(f"{server.api_url}/sandbox", json={"snapshot": "rb-nope"},
                           headers={"Authorization": f"Bearer {server.api_key}"}, timeout=30)
    assert answer.status_code == 400
    assert answer.json()["message"] == "Snapshot rb-nope not found. Did you add it through the Daytona Dashboard?"
    assert server.counts["snapshot_missing_400"] == 1 and server.sandbox_ids() == []


def test_the_snapshot_builder_makes_an_active_snapshot_cells_then_create_from(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(cold_build_sec=0.2)
    run_id = _run_id()
    target = image_target(base_image, run_id)

    async def main() -> None:
        builder = DaytonaSnapshotBuilder(backend_for(server))
        try:
            assert not await builder.present(target.snapshot)
            await builder.build(target, 120)
            assert await builder.present(target.snapshot)
            await builder.build(target, 120)  # already there: adopted, not made twice
        finally:
            await builder.close()
        backend = backend_for(server)
        try:
            sbx = await backend.create(spec_for(f"snapshot:{target.snapshot}", run_id))
            assert (await sbx.exec("echo from-snapshot", timeout=30)).stdout.strip() == "from-snapshot"
            await sbx.delete()
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.counts["cold_builds"] == 1
    assert server.create_requests[-1]["snapshot"] == target.snapshot


def test_an_inactive_snapshot_is_activated_not_waited_on(server: DaytonaServer, base_image: str) -> None:
    run_id = _run_id()
    target = image_target(base_image, run_id)

    async def main() -> None:
        builder = DaytonaSnapshotBuilder(backend_for(server))
        try:
            await builder.build(target, 120)
            built = server.counts["built"]
            server.deactivate_snapshot(target.snapshot, ago_sec=15 * 24 * 3600)  # unused 14 days and more
            assert not await builder.present(target.snapshot)
            await asyncio.wait_for(builder.build(target, 600), 30)  # not the build timeout
            assert await builder.present(target.snapshot)
            assert server.counts["built"] == built  # activated, not built again
        finally:
            await builder.close()

    asyncio.run(main())
    assert server.counts["snapshot_activated"] == 1


def test_the_build_phase_stays_under_the_snapshot_quota_deleting_its_own_least_recently_used(
    server: DaytonaServer, base_image: str
) -> None:
    # The organisation holds 2 snapshots; an earlier run left one of ray-bench's. Three sizes of
    # one image (three snapshots) are wanted: the old one is deleted, two are made, the third's
    # cells create from the image; nothing fails and the quota is never passed.
    server.snapshot_quota = 2
    run_id = _run_id()
    old = image_target(base_image, f"{run_id}-old")

    async def earlier() -> None:
        builder = DaytonaSnapshotBuilder(backend_for(server))
        try:
            await builder.build(old, 120)
        finally:
            await builder.close()

    asyncio.run(earlier())
    targets = [BuildTarget(snapshot=snapshot_name(f"{base_image}-{run_id}", (1, 1, disk)), image=base_image,
                           cpu=1, memory_gib=1, disk_gib=disk, tasks=(f"t{disk}",), cells=(f"c{disk}",))
               for disk in (3, 4, 5)]
    events: list[tuple[str, dict[str, object]]] = []
    outcome = run_build_phase(targets, lambda: DaytonaSnapshotBuilder(backend_for(server)), ledger_finished=[],
                              record=lambda k, d: events.append((k, d)), progress=lambda _: None, quota=2)
    assert (outcome.failed, outcome.deleted, len(outcome.unbuilt), outcome.built) == ({}, [old.snapshot], 1, 2)
    assert server.counts["snapshot_quota_400"] == 0
    listed = requests.get(f"{server.api_url}/snapshots", headers={"Authorization": f"Bearer {server.api_key}"},
                          timeout=10).json()
    assert sorted(m["name"] for m in listed["items"] if m["state"] == "active") == sorted(
        t.snapshot for t in targets if t.snapshot not in outcome.unbuilt)

    async def past_the_quota() -> None:
        builder = DaytonaSnapshotBuilder(backend_for(server))
        try:
            with pytest.raises(SandboxQuotaError, match="Snapshot quota exceeded") as info:
                await builder.build(image_target(base_image, f"{run_id}-more"), 60)
            assert info.value.failure_class == "capacity"
        finally:
            await builder.close()

    asyncio.run(past_the_quota())


def test_a_failed_snapshot_build_raises_with_the_services_reason(
    server: DaytonaServer, base_image: str, tmp_path: Path
) -> None:
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(f"FROM {base_image}\nRUN exit 3\n")
    target = BuildTarget(snapshot=snapshot_name(f"broken-{uuid.uuid4().hex}", (1, 1, 3)), dockerfile_dir=str(env),
                         cpu=1, memory_gib=1, disk_gib=3, tasks=("t",), cells=("c",))

    async def main() -> None:
        builder = DaytonaSnapshotBuilder(backend_for(server))
        try:
            with pytest.raises(SandboxCreateError, match="build_failed"):
                await builder.build(target, 120)
            assert not await builder.present(target.snapshot)
        finally:
            await builder.close()

    asyncio.run(main())
