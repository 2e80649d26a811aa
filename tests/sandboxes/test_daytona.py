"""The ``daytona`` backend, through the real ``daytona`` SDK, against the local Daytona-compatible
server in ``tests/support/daytona_server.py`` (real Docker containers behind it)."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Mapping
from typing import Any

import pytest

pytest.importorskip("daytona", reason="the daytona extra is not installed")

from daytona import DaytonaBadRequestError
from support.daytona_fixtures import KEY_ENV, answering_listener, backend_for, spec_for, two_hosts
from support.daytona_server import LABEL_PREFIX, MARKER_LABEL, DaytonaServer, Faults

from ray_bench.errors import (
    SandboxCreateError,
    SandboxError,
    SandboxGoneError,
    SandboxRateLimitedError,
    SandboxUnavailableError,
)
from ray_bench.sandboxes import backend_names, make_backend
from ray_bench.sandboxes.audit import audit
from ray_bench.sandboxes.base import LABEL_RUN, Resources, SandboxSpec, run_labels
from ray_bench.sandboxes.daytona import (
    DaytonaBackend,
    DaytonaPool,
    retry_after,
)

from .conformance import BackendFactory, SandboxConformance, SpecFactory

pytestmark = [pytest.mark.daytona, pytest.mark.docker]


class TestDaytonaConformance(SandboxConformance):
    @pytest.fixture
    def backend_factory(self, server: DaytonaServer) -> BackendFactory:
        # A watched exec's output is polled; half a second keeps the streaming test short.
        return lambda: backend_for(server, live_poll_sec=0.5)

    @pytest.fixture
    def sandbox_spec(self, base_image: str) -> SpecFactory:
        def make(labels: Mapping[str, str]) -> SandboxSpec:
            return SandboxSpec(
                labels=labels, image=base_image, resources=Resources(cpus=1, memory_mb=256)
            )

        return make


def test_registered_by_name() -> None:
    assert "daytona" in backend_names()


def test_a_third_of_creates_limited_all_succeed_with_backoff(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(create_429_fraction=1 / 3, retry_after_sec=0.2, seed=7)
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        backend = backend_for(server)
        try:
            made = await asyncio.gather(
                *(backend.create(spec_for(base_image, run_id)) for _ in range(6))
            )
            assert len({s.id for s in made}) == 6
            assert backend.rate_limited_waits == server.counts["create_429"] > 0
            for sbx in made:
                await sbx.delete()
            assert await backend.list({LABEL_RUN: run_id}) == []
        finally:
            await backend.close()

    server.counts["create_429"] = 0
    asyncio.run(main())


def test_a_create_that_stays_limited_raises_with_retry_after(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(create_429_always=True, retry_after_sec=0.3)
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        backend = backend_for(server, max_rate_limit_retries=2)
        try:
            started = time.monotonic()
            with pytest.raises(SandboxRateLimitedError) as info:
                await backend.create(spec_for(base_image, run_id))
            # Two waits of (at least) the header's 0.3 s before giving up.
            assert time.monotonic() - started >= 0.6
            assert info.value.retry_after == pytest.approx(0.3)
            assert info.value.failure_class == "capacity"
            assert len(server.create_requests) == 3
        finally:
            await backend.close()

    asyncio.run(main())


def test_exec_runs_as_the_sandboxs_own_user_only(server: DaytonaServer, base_image: str) -> None:
    """Daytona's exec has no user switch: a command may name the user the sandbox runs as (as
    Harbor's agents name ``root``, by name or uid), and any other is refused in one line."""
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        backend = backend_for(server)
        try:
            sbx = await backend.create(spec_for(base_image, run_id))
            try:
                for user in ("root", "0", None):
                    done = await sbx.exec("id -u", timeout=30, user=user)
                    assert (done.exit_code, done.stdout.strip()) == (0, "0")
                with pytest.raises(SandboxError, match="cannot run a command as user 'nobody' "
                                                       r"\(its commands run as root\)"):
                    await sbx.exec("id -u", timeout=30, user="nobody")
            finally:
                await sbx.delete()
        finally:
            await backend.close()

    asyncio.run(main())


def test_retry_after_headers_per_throttler() -> None:
    assert retry_after({"Retry-After-sandbox-create": "4", "Retry-After-authenticated": "1"}) == 4
    assert retry_after({"x-ratelimit-reset-sandbox-lifecycle": "9"}) == 9
    assert retry_after({"Retry-After": "2", "X-RateLimit-Reset-authenticated": "30"}) == 2
    assert retry_after({"Content-Type": "application/json"}) is None
    # issue 58: a header is a number from the world; inf, nan or a negative wait is no wait
    for bad in ("inf", "nan", "-5", "1e400"):
        assert retry_after({"Retry-After": bad}) is None, bad
    assert retry_after({"Retry-After": "inf", "Retry-After-authenticated": "3"}) == 3


def test_server_errors_on_creates_are_retried(server: DaytonaServer, base_image: str) -> None:
    server.faults = Faults(create_5xx_fraction=0.3, error_status=503, seed=1)
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        backend = backend_for(server)
        try:
            for _ in range(4):
                sbx = await backend.create(spec_for(base_image, run_id))
                await sbx.delete()
            assert server.counts["create_5xx"] > 0
        finally:
            await backend.close()

    server.counts["create_5xx"] = 0
    asyncio.run(main())


def test_slow_create_waits_for_started_and_cancel_still_cleans_up(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(create_delay_sec=1.5)
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        backend = backend_for(server)
        try:
            sbx = await backend.create(spec_for(base_image, run_id))
            assert (await sbx.exec("echo up", timeout=30)).stdout == "up\n"
            await sbx.delete()
            task = asyncio.ensure_future(backend.create(spec_for(base_image, run_id)))
            await asyncio.sleep(0.5)  # the server has made it; it is still `creating`
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await backend.list({LABEL_RUN: run_id}) == []
        finally:
            await backend.close()

    asyncio.run(main())
    time.sleep(1.6)  # let the fake's delayed start run; it must not resurrect the sandbox


def test_a_stop_during_a_bring_up_returns_within_its_bound_and_audit_reports_the_pending_delete(
    server: DaytonaServer, base_image: str
) -> None:
    # A bring-up that outlasts the stop (a pull, a build: the API answers DELETE 409 until it
    # is up). The cancel returns within cancel_grace + stop_delete_sec, the delete left to the
    # reaper; `audit --cleanup` waits remove_wait_sec for it and reports it as a pending delete;
    # once it is up, the next audit removes it. Before: each refused delete was asked for
    # delete_timeout (180 s), and the audit waited on it until its TTL (issue 53).
    server.faults = Faults(create_delay_sec=6.0)
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"
    bound = {"cancel_grace": 0.5, "stop_delete_sec": 1.0, "remove_wait_sec": 1.0}

    async def main() -> None:
        backend = backend_for(server, **bound)
        try:
            task = asyncio.ensure_future(backend.create(spec_for(base_image, run_id)))
            await asyncio.sleep(0.5)  # made, still coming up
            began = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - began < 0.5 + 1.0 + 3.0
            report = await audit([backend_for(server, **bound)], run_id, cleanup=True, settle_sec=1.0)
            assert [r.state for r in report.pending] and not report.clean, (report.lines(), time.monotonic() - began)
            assert "pending delete" in "\n".join(report.lines())
            await asyncio.sleep(6.0)  # up now: deletable
            report = await audit([backend_for(server)], run_id, cleanup=True, settle_sec=10.0)
            assert report.clean, report.lines()
        finally:
            await backend.close()

    asyncio.run(main())


def test_vanished_sandbox_raises_gone(server: DaytonaServer, base_image: str) -> None:
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        backend = backend_for(server)
        try:
            idle = await backend.create(spec_for(base_image, run_id))
            busy = await backend.create(spec_for(base_image, run_id))
            server.vanish(idle.id)
            with pytest.raises(SandboxGoneError):
                await idle.exec("true", timeout=10)
            with pytest.raises(SandboxGoneError):
                await idle.put_file(b"x", "/tmp/x")
            # Mid-command: the container goes while the exec is running.
            running = asyncio.ensure_future(busy.exec("sleep 20", timeout=60))
            await asyncio.sleep(1.0)
            await asyncio.to_thread(server.vanish, busy.id)
            with pytest.raises(SandboxGoneError):
                await running
            await idle.delete()
            await busy.delete()
            assert await backend.list({LABEL_RUN: run_id}) == []
        finally:
            await backend.close()

    asyncio.run(main())


def test_list_and_remove_by_label_reach_zero_residue(
    server: DaytonaServer, base_image: str
) -> None:
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"
    other = f"daytonatest-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        backend = backend_for(server)
        try:
            mine = [await backend.create(spec_for(base_image, run_id)) for _ in range(3)]
            theirs = await backend.create(spec_for(base_image, other))
            refs = await backend.list({LABEL_RUN: run_id})
            assert sorted(r.id for r in refs) == sorted(s.id for s in mine)
            assert all(r.backend == "daytona" and r.labels[LABEL_RUN] == run_id for r in refs)
            # Another process (an audit after a crashed driver) cleans up with a fresh client.
            auditor = backend_for(server)
            for ref in refs:
                await auditor.remove(ref)
            await auditor.remove(refs[0])  # idempotent
            await auditor.close()
            assert await backend.list({LABEL_RUN: run_id}) == []
            assert [r.id for r in await backend.list({LABEL_RUN: other})] == [theirs.id]
            await theirs.delete()
        finally:
            await backend.close()

    asyncio.run(main())
    assert (
        server.docker.containers.list(
            all=True,
            filters={
                "label": [
                    f"{MARKER_LABEL}={server.server_id}",
                    f"{LABEL_PREFIX}{LABEL_RUN}={run_id}",
                ]
            },
        )
        == []
    )


def test_lifetime_spec_and_labels_reach_the_api(server: DaytonaServer, base_image: str) -> None:
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"
    spec = spec_for(
        base_image,
        run_id,
        lifetime_sec=570,
        env={"A": "1"},
        resources=Resources(cpus=1.5, memory_mb=1536, disk_mb=4096),
    )

    async def main() -> None:
        backend = backend_for(server, ttl_margin_min=5)
        try:
            sbx = await backend.create(spec)
            assert (await sbx.exec("echo $A", timeout=30)).stdout == "1\n"
            await sbx.delete()
        finally:
            await backend.close()

    asyncio.run(main())
    body = server.create_requests[-1]
    assert body["autoStopInterval"] == 10  # 570 s rounds up to 10 idle minutes
    assert body["autoDeleteInterval"] == 0  # deleted as soon as it stops
    # and never older than create + lifetime + margin: (300 s create_timeout + 570 s) -> 15 + 5
    assert body["ttlMinutes"] == 20
    assert {k: body["labels"][k] for k in spec.labels} == dict(spec.labels)
    assert body["env"] == {"A": "1"}
    assert body["networkBlockAll"] is True
    assert (body["cpu"], body["memory"], body["disk"]) == (2, 2, 4)
    # the image itself, last, with the harness's directories copied in (harness.harness_image)
    assert body["buildInfo"]["dockerfileContent"].strip().splitlines()[-2:] == [
        f"FROM {base_image}", "COPY --from=rb-harness-dirs /rb/ /"]


def test_snapshot_create(server: DaytonaServer, base_image: str) -> None:
    server.snapshots["rb-busybox"] = base_image
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        backend = backend_for(server, snapshot="rb-busybox")
        try:
            sbx = await backend.create(SandboxSpec(labels=run_labels(run_id)))
            assert (await sbx.exec("echo snap", timeout=30)).stdout == "snap\n"
            await sbx.delete()
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.create_requests[-1]["snapshot"] == "rb-busybox"


def test_a_snapshot_smaller_than_the_task_or_missing_is_refused_not_used(
    server: DaytonaServer, base_image: str
) -> None:
    server.snapshots["rb-small"] = base_image
    server.snapshot_sizes["rb-small"] = (1, 1, 3)
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        backend = backend_for(server)
        try:
            big = spec_for("snapshot:rb-small", run_id, resources=Resources(cpus=2, disk_mb=10 * 1024))
            with pytest.raises(SandboxCreateError, match=r"smaller than the task asks: 2 vCPU \(it has 1\), "
                                                         r"10 GiB disk \(it has 3\)"):
                await backend.create(big)
            with pytest.raises(SandboxCreateError, match="'rb-none' does not exist"):
                await backend.create(spec_for("snapshot:rb-none", run_id))
            fits = await backend.create(spec_for("snapshot:rb-small", run_id, resources=Resources(cpus=1)))
            await fits.delete()
        finally:
            await backend.close()

    asyncio.run(main())
    assert len(server.create_requests) == 1  # the refused ones never reached the API


def test_no_image_uses_the_default_snapshot(server: DaytonaServer) -> None:
    """No image anywhere: Daytona's default snapshot (the fake's ``--image``)."""
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        backend = backend_for(server)
        try:
            sbx = await backend.create(SandboxSpec(labels=run_labels(run_id)))
            assert (await sbx.exec("echo default", timeout=30)).stdout == "default\n"
            await sbx.delete()
        finally:
            await backend.close()

    asyncio.run(main())
    assert "snapshot" not in server.create_requests[-1]
    assert "buildInfo" not in server.create_requests[-1]


def test_unreachable_server_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(KEY_ENV, "not-a-real-key")

    async def main() -> None:
        backend = make_backend(
            "daytona",
            api_url=f"http://127.0.0.1:{port}/api",
            api_key_env=KEY_ENV,
            max_server_retries=0,
        )
        try:
            with pytest.raises(SandboxUnavailableError) as info:
                await backend.create(SandboxSpec(labels=run_labels("daytonatest-x"), image="none"))
            assert "not-a-real-key" not in str(info.value)
        finally:
            await backend.close()

    asyncio.run(main())


def test_missing_credential_route_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_BENCH_NO_SUCH_KEY", raising=False)

    async def main() -> None:
        backend = make_backend("daytona", api_key_env="RAY_BENCH_NO_SUCH_KEY")
        with pytest.raises(SandboxUnavailableError, match="RAY_BENCH_NO_SUCH_KEY"):
            await backend.list({LABEL_RUN: "x"})

    asyncio.run(main())


def test_pool_config_is_strict() -> None:
    pool = DaytonaPool(vcpu=40, memory_gib=80, disk_gib=200, creates_per_minute=60)
    assert pool.default_vcpu == 1
    with pytest.raises(ValueError, match="extra"):
        DaytonaPool.model_validate({**pool.model_dump(), "gpus": 1})
    assert all(f.description for f in DaytonaPool.model_fields.values())
    backend = make_backend("daytona", pool=pool.model_dump())
    assert isinstance(backend, DaytonaBackend)
    assert backend.pool == pool


def test_a_host_name_allowlist_set_at_create_reaches_listed_hosts_only(
    server: DaytonaServer, base_image: str, docker_client: Any
) -> None:
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"

    async def main(port: int) -> dict[str, Any]:
        backend = backend_for(server)
        seen: dict[str, Any] = {}
        try:
            # the API's own refusals (validateDomainAllowList), before any sandbox is made
            with pytest.raises(SandboxError, match=r'Invalid domain: "localhost"\. Must be a valid domain name'):
                await backend.create(spec_for(base_image, run_id, network=True, allowlist=("localhost",)))
            with pytest.raises(SandboxError, match="cannot contain more than 10 domains"):
                await backend.create(spec_for(base_image, run_id, network=True,
                                              allowlist=tuple(f"h{i}.example.com" for i in range(11))))
            box = await backend.create(spec_for(base_image, run_id, network=True, allowlist=("*.listed.test",)))
            seen["body"] = dict(server.create_requests[-1])
            seen["reached"] = [(await box.exec(f"nc -w 3 {host} {port} </dev/null", timeout=30)).stdout.strip()
                               for host in ("api.listed.test", "unlisted.test")]
            with pytest.raises(DaytonaBadRequestError, match="Invalid domain"):  # the route validates as create
                await box._sandbox.update_network_settings(domain_allow_list="not a domain")  # type: ignore[attr-defined]
            await box.delete()
        finally:
            await backend.close()
        return seen

    with two_hosts(server, docker_client, base_image) as port:
        seen = asyncio.run(main(port))
    body = seen["body"]
    assert body["domainAllowList"] == "*.listed.test" and body.get("networkAllowList") is None
    assert body["networkBlockAll"] is False
    assert seen["reached"] == ["hi", ""]


def test_a_network_allow_list_is_validated_and_enforced_as_daytona_does(
    server: DaytonaServer, base_image: str, docker_client: Any
) -> None:
    listener = answering_listener()
    port = listener.getsockname()[1]
    bridge = docker_client.networks.get("bridge").attrs["IPAM"]["Config"][0]["Subnet"]
    run_id = f"daytonatest-{uuid.uuid4().hex[:8]}"
    reach = f"nc -w 3 $(ip route | awk '/default/ {{print $3}}') {port} </dev/null"

    async def main() -> tuple[str, int, str]:
        backend = backend_for(server)
        try:
            # the API's own refusals (validateNetworkAllowList), before any sandbox is made
            with pytest.raises(SandboxError, match="Missing CIDR prefix length"):
                await backend.create(spec_for(base_image, run_id, network=True, allowlist=("10.0.0.1",)))
            with pytest.raises(SandboxError, match="cannot contain more than 10 networks"):
                await backend.create(spec_for(base_image, run_id, network=True,
                                              allowlist=tuple(f"10.{i}.0.0/16" for i in range(11))))
            inside = await backend.create(spec_for(base_image, run_id, network=True, allowlist=(bridge,)))
            listed = await inside.exec(reach, timeout=30)
            await inside.delete()
            outside = await backend.create(spec_for(base_image, run_id, network=True, allowlist=("10.9.9.0/24",)))
            unlisted = await outside.exec(reach, timeout=30)
            await outside.delete()
            return listed.stdout, unlisted.exit_code, unlisted.stdout
        finally:
            await backend.close()

    try:
        listed, code, unlisted = asyncio.run(main())
    finally:
        listener.close()
    assert listed == "hi\n" and code != 0 and unlisted == ""
    body = server.create_requests[-1]
    assert body["networkAllowList"] == "10.9.9.0/24" and body["networkBlockAll"] is False
