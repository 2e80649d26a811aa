"""The cleanup audit, on the local backend (and on docker when it is there)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from ray_bench.sandboxes.audit import audit
from ray_bench.sandboxes.base import SandboxSpec, run_labels
from ray_bench.sandboxes.docker import DockerBackend
from ray_bench.sandboxes.local import LocalBackend


def test_audit_lists_then_cleans_local(tmp_path: Path) -> None:
    run_id = f"audit-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        backend = LocalBackend(root=tmp_path)
        for i in range(3):
            await backend.create(SandboxSpec(labels=run_labels(run_id, f"c{i}", f"a{i}")))
        other = await backend.create(SandboxSpec(labels=run_labels("other-run")))

        dry = await audit([backend], run_id, cleanup=False)
        assert (len(dry.found), len(dry.residue), dry.clean) == (3, 3, False)
        assert "--cleanup" in "\n".join(dry.lines())

        done = await audit([backend], run_id, cleanup=True)
        assert (len(done.removed), done.residue, done.clean) == (3, [], True)
        assert json.loads(json.dumps(done.to_json()))["clean"] is True
        assert "clean" in done.lines()[0]
        assert [r.id for r in await backend.list({})] == [other.id]

    asyncio.run(body())


def test_unreachable_backend_is_not_clean(tmp_path: Path) -> None:
    async def body() -> None:
        backend = DockerBackend(base_url=f"unix://{tmp_path}/none.sock")
        report = await audit([backend], "r", cleanup=True)
        await backend.close()
        assert not report.clean
        assert report.errors[0].startswith("docker: listing failed")

    asyncio.run(body())


@pytest.mark.docker
def test_audit_docker_containers_volumes_networks(docker_client: Any, base_image: str) -> None:
    run_id = f"audit-{uuid.uuid4().hex[:8]}"
    labels = run_labels(run_id)
    docker_client.api.create_volume(name=f"rb-{run_id}", labels=labels)
    docker_client.api.create_network(f"rb-{run_id}", labels=labels)

    async def body() -> None:
        backend = DockerBackend()
        try:
            await backend.create(SandboxSpec(labels=run_labels(run_id, "c", "a"), image=base_image))
            report = await audit([backend], run_id, cleanup=True)
            assert sorted(r.kind for r in report.removed) == ["container", "network", "volume"]
            assert report.clean
        finally:
            await backend.close()

    asyncio.run(body())
