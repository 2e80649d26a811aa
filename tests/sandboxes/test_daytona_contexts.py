"""A task whose Dockerfile COPYs files from its directory, on the daytona backend: the SDK asks
the API for push access, uploads each COPY source to the organisation's object storage as a
``context.tar``, and names their hashes in the build; the fixture serves that as the API does
and builds with the contexts unpacked beside the Dockerfile. Both create paths: an image create
(a declarative build) and the build phase's snapshot."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("daytona", reason="the daytona extra is not installed")

import requests
from support.daytona_fixtures import backend_for, spec_for
from support.daytona_server import CONTEXT_BUCKET, DaytonaServer, object_storage_over_http

from ray_bench.models.build import BuildTarget
from ray_bench.sandboxes.base import SandboxSpec, run_labels
from ray_bench.sandboxes.daytona.snapshots import DaytonaSnapshotBuilder
from ray_bench.scheduler.builds import snapshot_name

pytestmark = [pytest.mark.daytona, pytest.mark.docker]


@pytest.fixture
def env(tmp_path: Path, base_image: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    object_storage_over_http(monkeypatch)
    env = tmp_path / "environment"
    (env / "files").mkdir(parents=True)
    (env / "files" / "data.txt").write_text(f"context {uuid.uuid4().hex}\n")
    (env / "setup.sh").write_text("echo from-setup > /opt/setup-ran\n")
    (env / "Dockerfile").write_text(f"FROM {base_image}\nCOPY files /opt/files\nCOPY setup.sh /opt/setup.sh\n"
                                    "RUN sh /opt/setup.sh\n")
    return env


def test_an_image_create_uploads_the_dockerfile_context_and_builds_with_it(server: DaytonaServer, env: Path) -> None:
    run_id = f"dtctx-{uuid.uuid4().hex[:8]}"

    async def main() -> tuple[str, str]:
        backend = backend_for(server)
        try:
            sbx = await backend.create(SandboxSpec(labels=run_labels(run_id), dockerfile_dir=env))
            data = (await sbx.exec("cat /opt/files/data.txt", timeout=30)).stdout
            ran = (await sbx.exec("cat /opt/setup-ran", timeout=30)).stdout
            await sbx.delete()
            return data, ran
        finally:
            await backend.close()

    data, ran = asyncio.run(main())
    assert data == (env / "files" / "data.txt").read_text() and ran == "from-setup\n"
    uploaded = [k for k in server.objects if k.startswith(f"{CONTEXT_BUCKET}/fake-org/")]
    assert len(uploaded) == 2 and all(k.endswith("/context.tar") for k in uploaded)
    assert len(server.create_requests[-1]["buildInfo"]["contextHashes"]) == 2


def test_the_build_phase_snapshot_carries_the_context(server: DaytonaServer, env: Path) -> None:
    target = BuildTarget(snapshot=snapshot_name(f"ctx-{uuid.uuid4().hex}", (1, 1, 3)), dockerfile_dir=str(env),
                         cpu=1, memory_gib=1, disk_gib=3, tasks=("t",), cells=("c",))

    async def main() -> str:
        builder = DaytonaSnapshotBuilder(backend_for(server))
        try:
            await builder.build(target, 120)
        finally:
            await builder.close()
        backend = backend_for(server)
        try:
            sbx = await backend.create(spec_for(f"snapshot:{target.snapshot}", f"dtctx-{uuid.uuid4().hex[:8]}"))
            data = (await sbx.exec("cat /opt/files/data.txt", timeout=30)).stdout
            await sbx.delete()
            return data
        finally:
            await backend.close()

    assert asyncio.run(main()) == (env / "files" / "data.txt").read_text()


def test_a_build_naming_a_context_never_uploaded_is_refused(server: DaytonaServer, base_image: str) -> None:
    answer = requests.post(f"{server.api_url}/sandbox", timeout=30,
                           headers={"Authorization": f"Bearer {server.api_key}"},
                           json={"buildInfo": {"dockerfileContent": f"FROM {base_image}\nCOPY x /x\n",
                                               "contextHashes": ["0" * 32]}})
    assert answer.status_code == 400
    assert "build context " + "0" * 32 + " not found" in answer.json()["message"]
    assert server.sandbox_ids() == []


def test_a_command_past_its_own_timeout_is_answered_408(server: DaytonaServer, base_image: str) -> None:
    """The daemon's ``timeout`` is the command's run time (the fixture's own waits are not in it)."""
    async def create() -> str:
        backend = backend_for(server)
        try:
            return (await backend.create(spec_for(base_image, f"dtctx-{uuid.uuid4().hex[:8]}"))).id
        finally:
            await backend.close()

    sandbox_id = asyncio.run(create())
    auth = {"Authorization": f"Bearer {server.api_key}"}
    url = f"{server.url}/toolbox/{sandbox_id}/process/execute"
    slow = requests.post(url, json={"command": "sleep 5", "timeout": 1}, headers=auth, timeout=60)
    quick = requests.post(url, json={"command": "echo in-time", "timeout": 30}, headers=auth, timeout=60)
    assert slow.status_code == 408
    assert quick.status_code == 200 and quick.json() == {"exitCode": 0, "result": "in-time\n"}
    requests.delete(f"{server.api_url}/sandbox/{sandbox_id}", headers=auth, timeout=60)
    for _ in range(100):
        if not server.containers():
            break
        time.sleep(0.2)
