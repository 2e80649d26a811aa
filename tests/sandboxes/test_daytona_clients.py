"""The ``daytona`` backend's SDK clients against a Docker-free stub (``tests/support/daytona_stub.py``):
one node's sandboxes are spread over clients so that every one of its commands can be in
flight at once, past the SDK's 250-connection pool of a single client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

pytest.importorskip("daytona", reason="the daytona extra is not installed")

from support.daytona_fixtures import KEY_ENV
from support.daytona_stub import DaytonaStub

from ray_bench.sandboxes import make_backend
from ray_bench.sandboxes.base import SandboxSpec, run_labels
from ray_bench.sandboxes.daytona import DaytonaBackend

pytestmark = [pytest.mark.daytona]

#: One past the SDK's default pool (250 connections per client).
CONCURRENT = 251


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[DaytonaStub]:
    srv = DaytonaStub(hold_until=CONCURRENT).start()
    monkeypatch.setenv(KEY_ENV, srv.api_key)
    yield srv
    srv.stop()


def test_251_concurrent_execs_are_all_in_flight_at_once(stub: DaytonaStub) -> None:
    async def main() -> None:
        backend = make_backend("daytona", api_url=stub.api_url, api_key_env=KEY_ENV)
        assert isinstance(backend, DaytonaBackend)
        try:
            made = await asyncio.gather(*(backend.create(SandboxSpec(labels=run_labels("clients", f"c{i}", "a")))
                                          for i in range(CONCURRENT)))
            results = await asyncio.gather(*(s.exec("sleep 1", timeout=60) for s in made))
            assert {r.exit_code for r in results} == {0}
            assert stub.peak == CONCURRENT  # one client alone has 250 connections: peak 250
            # 125 sandboxes a client (half of its 250 connections): 125 + 125 + 1.
            assert backend.clients().carriers() == 3
            await asyncio.gather(*(s.delete() for s in made))
        finally:
            await backend.close()

    asyncio.run(main())


def test_a_deleted_sandbox_gives_its_share_of_a_client_back(stub: DaytonaStub) -> None:
    async def main() -> None:
        backend = make_backend("daytona", api_url=stub.api_url, api_key_env=KEY_ENV, sandboxes_per_client=2)
        assert isinstance(backend, DaytonaBackend)
        try:
            spec = SandboxSpec(labels=run_labels("clients", "c", "a"))
            first = [await backend.create(spec) for _ in range(4)]
            assert backend.clients().carriers() == 2
            await first[0].delete()
            await backend.create(spec)  # into the freed place, not a third client
            assert backend.clients().carriers() == 2
        finally:
            await backend.close()

    asyncio.run(main())
