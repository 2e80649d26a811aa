"""What the Daytona test modules share: one fixture server per module (on the test Docker and
the base image), reset before each test and checked after it (no container may remain), and a
backend pointed at it. ``tests/sandboxes/conftest.py`` offers ``server`` and ``fresh_server``
(autouse; it does nothing for a test that does not use ``server``). The Daytona SDK is imported
only by :func:`backend_for`, so that modules without the extra still collect and skip."""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from ray_bench.sandboxes import make_backend
from ray_bench.sandboxes.base import LABEL_RUN, SandboxSpec, run_labels
from support.daytona_server import LIST_PAGE, DaytonaServer, Faults

if TYPE_CHECKING:
    from ray_bench.sandboxes.daytona import DaytonaBackend

#: The backend's key route in these tests (the fixture's key is set under it for each test).
KEY_ENV = "RAY_BENCH_TEST_DAYTONA_KEY"


@pytest.fixture(scope="module")
def server(docker_client: Any, base_image: str) -> Iterator[DaytonaServer]:
    srv = DaytonaServer(docker_client=docker_client, default_image=base_image).start()
    yield srv
    srv.stop()


def reset(srv: DaytonaServer) -> None:
    """No faults, no recorded requests, executions or counts."""
    srv.faults = Faults()
    srv.list_page = LIST_PAGE
    srv.snapshot_quota = 30
    srv.dns.clear()
    srv.create_requests.clear()
    srv.executions.clear()
    srv.reset_builds(1)
    for key in srv.counts:
        srv.counts[key] = 0


@pytest.fixture(autouse=True)
def fresh_server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[DaytonaServer | None]:
    """Reset the server before a test that uses it; after it, no container of the server may remain."""
    if "server" not in request.fixturenames:
        yield None
        return
    srv: DaytonaServer = request.getfixturevalue("server")
    reset(srv)
    monkeypatch.setenv(KEY_ENV, srv.api_key)
    yield srv
    left = srv.containers()
    for container in left:
        container.remove(force=True, v=True)
    srv.discard_leftovers()  # a failed test's sandboxes would hold the next test's quota
    assert left == [], f"{request.node.name} left containers behind"


def backend_for(srv: DaytonaServer, **options: Any) -> DaytonaBackend:
    from ray_bench.sandboxes.daytona import DaytonaBackend

    backend = make_backend("daytona", api_url=srv.api_url, api_key_env=KEY_ENV, **options)
    assert isinstance(backend, DaytonaBackend)
    return backend


def spec_for(image: str, run_id: str, **kw: Any) -> SandboxSpec:
    """One attempt's sandbox (cell ``cell-1``, attempt ``att-1``) of ``run_id``."""
    return SandboxSpec(labels=run_labels(run_id, "cell-1", "att-1"), image=image, **kw)


def new_run_id(prefix: str) -> str:
    """A run id of its own for one test (``prefix-`` and 8 hex digits)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def boxes_of(srv: DaytonaServer, run_id: str) -> list[dict[str, Any]]:
    """The fixture's sandboxes of ``run_id``, destroyed ones included."""
    return [b for b in srv.boxes() if b["labels"].get(LABEL_RUN) == run_id]


def answering_listener() -> socket.socket:
    """A TCP server on the host (reached from a sandbox through the bridge's gateway) that answers
    each connection ``hi``."""
    listener = socket.create_server(("0.0.0.0", 0))

    def answer() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                conn.sendall(b"hi\n")
                conn.close()

    threading.Thread(target=answer, daemon=True).start()
    return listener


@contextlib.contextmanager
def two_hosts(srv: DaytonaServer, docker_client: Any, image: str) -> Iterator[int]:
    """``api.listed.test`` (a listener on the host, through the bridge's gateway) and
    ``unlisted.test`` (a container of its own, at an address of its own: the server's lists are
    enforced per address), both answering ``hi`` on the port yielded, as the sandboxes' name
    lookups answer them (:attr:`DaytonaServer.dns`)."""
    listener = answering_listener()
    port = listener.getsockname()[1]
    other = docker_client.containers.run(image, ["sh", "-c", f"while :; do echo hi | nc -l -p {port}; done"],
                                         detach=True, labels={"ray-bench.test": "two-hosts"})
    try:
        other.reload()
        gateway = docker_client.networks.get("bridge").attrs["IPAM"]["Config"][0]["Gateway"]
        srv.dns.update({"api.listed.test": gateway, "unlisted.test": other.attrs["NetworkSettings"]["IPAddress"]})
        yield port
    finally:
        listener.close()
        other.remove(force=True)
