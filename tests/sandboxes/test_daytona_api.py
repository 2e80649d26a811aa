"""The ``daytona`` backend against the behaviours of the real Daytona API that the local fixture
reproduces (``tests/support/daytona_server.py``, read from daytonaio/daytona's ``apps/api``):
asynchronous deletes with 409s, an eventually consistent listing, build states and logs, lost
answers, organisation quotas, the non-root default snapshot and the backend's own 401."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("daytona", reason="the daytona extra is not installed")

from support.daytona_fixtures import KEY_ENV, backend_for, boxes_of, new_run_id, spec_for
from support.daytona_server import DaytonaServer, Faults
from support.late_answers import answers_read_late
from support.specs import local_spec

from ray_bench.errors import (
    SandboxAuthError,
    SandboxCreateError,
    SandboxQuotaError,
    SandboxUnavailableError,
)
from ray_bench.evidence.catalog import Catalog
from ray_bench.evidence.classify import classify
from ray_bench.models.attempt import AttemptError, AttemptSummary
from ray_bench.sandboxes.audit import audit
from ray_bench.sandboxes.base import LABEL_RUN, Resources, SandboxSpec, run_labels
from ray_bench.sandboxes.daytona.ratelimit import call_with_retries
from ray_bench.sandboxes.daytona.sandbox import PROBE_TRIES

from .conformance import live_sandbox

pytestmark = [pytest.mark.daytona, pytest.mark.docker]


def _run_id() -> str:
    return new_run_id("dtapi")


_mine = boxes_of


def test_delete_waits_for_destroyed_and_a_concurrent_409_is_in_progress(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(delete_delay_sec=0.5)
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            sbx = await backend.create(spec_for(base_image, run_id))
            # Two deletes at once: the second DELETE meets the first's pending change (409).
            refs = await backend.list({LABEL_RUN: run_id})
            await asyncio.gather(sbx.delete(), backend.remove(refs[0]), backend.remove(refs[0]))
            assert [b["state"] for b in _mine(server, run_id)] == ["destroyed"]
        finally:
            await backend.close()

    asyncio.run(main())


async def _post_sandbox(server: DaytonaServer, run_id: str, ttl_minutes: int = 30) -> str:
    """A create sent straight to the API, not waited for (what a driver that died left)."""
    import aiohttp

    body = {"name": f"rb-{uuid.uuid4().hex}", "labels": run_labels(run_id), "ttlMinutes": ttl_minutes}
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.api_url}/sandbox", json=body, headers={"Authorization": f"Bearer {server.api_key}"}
    ) as answer:
        assert answer.status == 200, await answer.text()
        return str((await answer.json())["id"])


def test_a_delete_refused_while_the_sandbox_comes_up_is_finished_by_audit(server: DaytonaServer) -> None:
    # The bring-up outlasts the backend's delete_timeout: every DELETE meanwhile answers 409.
    server.faults = Faults(create_delay_sec=4.0)
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server, delete_timeout=0.5)
        try:
            await _post_sandbox(server, run_id)
            report = await audit([backend], run_id, cleanup=True, settle_sec=30)
            assert (len(report.found), len(report.removed), report.residue, report.errors) == (1, 1, [], [])
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.counts["delete_409"] > 0
    assert [b["state"] for b in _mine(server, run_id)] == ["destroyed"]


def test_a_cancelled_create_refused_deletion_is_reaped_before_close_returns(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(create_delay_sec=4.0)
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server, delete_timeout=0.5, cancel_grace=0.2)
        try:
            creating = asyncio.ensure_future(backend.create(spec_for(base_image, run_id)))
            await asyncio.sleep(1.0)
            creating.cancel()
            with pytest.raises(asyncio.CancelledError):
                await creating
            # Handed over, not dropped: the listing says it is being removed, not residue.
            assert len(backend.reaper.pending()) == 1
            assert [r.removing for r in await backend.list({LABEL_RUN: run_id})] == [True]
        finally:
            await backend.close()  # waits for the reaper
        assert backend.reaper.pending() == []

    asyncio.run(main())
    assert server.counts["delete_409"] > 0
    assert [b["state"] for b in _mine(server, run_id)] == ["destroyed"]


def test_audit_waits_for_destroying_sandboxes_of_a_lagging_listing(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(list_lag_sec=1.5, delete_delay_sec=0.1)
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            made = await asyncio.gather(*(backend.create(spec_for(base_image, run_id)) for _ in range(2)))
            for sbx in made:
                await sbx.delete()
            lagging = await backend.list({LABEL_RUN: run_id})
            assert lagging and all(r.removing and r.state == "destroying" for r in lagging)
            report = await audit([backend], run_id, cleanup=False, settle_sec=30)
            assert report.clean, report.lines()
        finally:
            await backend.close()

    asyncio.run(main())


def test_a_lost_create_answer_adopts_the_sandbox_made_by_the_one_post(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(create_lost_fraction=1.0, error_status=504, create_delay_sec=0.3)
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            async with live_sandbox(backend, spec_for(base_image, run_id)) as sbx:
                assert (await sbx.exec("echo adopted", timeout=30)).stdout == "adopted\n"
        finally:
            await backend.close()

    asyncio.run(main())
    assert len(server.create_requests) == 1
    assert server.counts["create_lost"] == 1
    assert len(_mine(server, run_id)) == 1


def test_creates_under_429s_and_5xx_make_one_sandbox_each(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(create_429_fraction=0.3, create_lost_fraction=0.3,
                           retry_after_sec=0.2, seed=19)
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            made = await asyncio.gather(*(backend.create(spec_for(base_image, run_id)) for _ in range(8)))
            await asyncio.gather(*(s.delete() for s in made))
        finally:
            await backend.close()

    asyncio.run(main())
    names = [b["name"] for b in _mine(server, run_id)]
    assert len(names) == len(set(names)) == 8
    assert server.counts["create_429"] > 0 and server.counts["create_lost"] > 0


def test_an_exec_whose_answer_is_lost_is_never_run_again(
    server: DaytonaServer, base_image: str
) -> None:
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            async with live_sandbox(backend, spec_for(base_image, run_id)) as sbx:
                server.faults = Faults(exec_lost_fraction=1.0)
                with pytest.raises(SandboxUnavailableError):
                    await sbx.exec("echo once >> /tmp/agent-ran", timeout=30)
                server.faults = Faults()
                assert (await sbx.exec("cat /tmp/agent-ran", timeout=30)).stdout == "once\n"
        finally:
            await backend.close()

    asyncio.run(main())
    assert sum("agent-ran" in cmd and ">>" in cmd for _, cmd in server.executions) == 1


def test_the_toolbox_answers_all_a_command_printed_however_late_the_fixtures_docker_client_reads(
    server: DaytonaServer, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The toolbox answers with one buffer of all the command printed. The fixture runs it through
    dockerd, whose answers its client reads 0.5 s late here (a loaded host): the exec wrapper's
    report comes back whole (under load it once came back as its separator line alone)."""
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            async with live_sandbox(backend, spec_for(base_image, run_id)) as sbx:
                with answers_read_late(monkeypatch):
                    got = await sbx.exec("echo out; echo err >&2; exit 3", timeout=30)
                assert (got.exit_code, got.stdout, got.stderr) == (3, "out\n", "err\n"), got
        finally:
            await backend.close()

    asyncio.run(main())


def test_an_agent_exec_whose_report_lost_its_head_is_recorded_as_the_providers_and_its_sandbox_goes(
    server: DaytonaServer, base_image: str, tmp_path: Path
) -> None:
    """The toolbox answers the agent's exec with its first line lost (what the fixture's docker
    client once lost under load). The attempt records the error, classified as the provider's,
    not as empty output and not as a crash, and its sandbox is deleted."""
    from ray_bench.cells.runner import run_attempt

    server.faults = Faults(exec_head_lost_match="echo agent-ran")
    run_id = _run_id()
    spec = local_spec(tmp_path, "echo agent-ran", run_id=run_id, backend="daytona", image=base_image,
                      backend_options={"api_url": server.api_url, "api_key_env": KEY_ENV})

    async def main() -> AttemptSummary:
        backend = backend_for(server)
        try:
            return await run_attempt(spec, backend)
        finally:
            await backend.close()

    summary = asyncio.run(main())
    assert server.counts["exec_head_lost"] == 1
    assert summary.error is not None, summary
    assert (summary.error.type, summary.error.failure_class) == ("SandboxExecReportError", "stack"), summary.error
    assert "without its header" in summary.error.message and summary.cleanup_error is None
    verdict = classify(summary, Catalog.default())
    assert not verdict.valid and verdict.failure_class == "stack"
    assert [b["desired"] for b in _mine(server, run_id)] == ["destroyed"]


def test_another_fixture_that_built_the_same_image_and_stopped_takes_nothing_from_this_one(
    server: DaytonaServer, docker_client: Any, base_image: str
) -> None:
    """Each fixture is an organisation of its own: the same image built by another one on this
    dockerd (another xdist worker, another suite), which then stops and removes what it built,
    leaves this one's sandboxes of that image to be made."""
    run_id = _run_id()
    image_spec = SandboxSpec(labels=run_labels(run_id), image=base_image)  # a build: `FROM <image>`

    async def create_and_delete(srv: DaytonaServer) -> None:
        backend = backend_for(srv)
        try:
            async with live_sandbox(backend, image_spec) as sbx:
                assert (await sbx.exec("echo made", timeout=30)).stdout == "made\n"
        finally:
            await backend.close()

    asyncio.run(create_and_delete(server))
    other = DaytonaServer(docker_client=docker_client, default_image=base_image, api_key=server.api_key).start()
    try:
        asyncio.run(create_and_delete(other))
    finally:
        other.stop()
    asyncio.run(create_and_delete(server))


def test_a_watchdog_whose_sleep_is_cut_short_does_not_time_the_command_out(
    server: DaytonaServer, base_image: str
) -> None:
    """The in-sandbox watchdog's ``sleep`` killed (in a cgroup at its memory limit, the likely end
    of a memory-limit task's attempt "timed out" after 20 s of its 60) does not end the command as
    a timeout: the watchdog sleeps on to the deadline by the clock."""
    run_id = _run_id()
    # Kills the `sleep 20` of this exec's watchdog, inside the sandbox only.
    kill_watchdog_sleep = ("sleep 1; for p in /proc/[0-9]*; do "
                           "[ \"$(tr '\\0' ' ' <$p/cmdline 2>/dev/null)\" = 'sleep 20 ' ] && kill ${p#/proc/}; "
                           "done; sleep 3; echo done")

    async def main() -> None:
        backend = backend_for(server)
        try:
            async with live_sandbox(backend, spec_for(base_image, run_id)) as sbx:
                got = await sbx.exec(kill_watchdog_sleep, timeout=20)
                assert (got.exit_code, got.stdout, got.timed_out) == (0, "done\n", False), got
        finally:
            await backend.close()

    asyncio.run(main())


def test_a_dockerfile_build_goes_through_its_states(
    server: DaytonaServer, base_image: str, tmp_path: Path
) -> None:
    server.faults = Faults(build_delay_sec=0.3)
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\nRUN echo built > /built\n")
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            spec = SandboxSpec(labels=run_labels(run_id), dockerfile_dir=tmp_path)
            async with live_sandbox(backend, spec) as sbx:
                assert (await sbx.exec("cat /built", timeout=30)).stdout == "built\n"
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.counts["built"] == 1


def test_a_failed_build_raises_with_its_log_and_leaves_nothing(
    server: DaytonaServer, base_image: str, tmp_path: Path
) -> None:
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_image}\nRUN echo broken-step-output && exit 3\n"
    )
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            with pytest.raises(SandboxCreateError) as info:
                await backend.create(SandboxSpec(labels=run_labels(run_id), dockerfile_dir=tmp_path))
            assert "build_failed" in str(info.value)
            assert "broken-step-output" in str(info.value)
            assert await backend.list({LABEL_RUN: run_id}) == []
        finally:
            await backend.close()

    asyncio.run(main())


def test_a_quota_refusal_is_a_capacity_failure_that_made_nothing_and_a_deleted_sandbox_holds_quota(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(quota_vcpu=1, delete_delay_sec=2.0)
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            spec = spec_for(base_image, run_id, resources=Resources(cpus=1))
            first = await backend.create(spec)
            with pytest.raises(SandboxQuotaError) as info:
                await backend.create(spec)
            assert info.value.resource == "cpu" and info.value.failure_class == "capacity"
            # Daytona counts a sandbox against the organisation until its state changes, not
            # from the DELETE: a create while the deleted one is still going is refused too.
            deleting = asyncio.ensure_future(first.delete())
            while not any(b["desired"] == "destroyed" for b in _mine(server, run_id)):
                await asyncio.sleep(0.05)  # the DELETE was accepted
            with pytest.raises(SandboxQuotaError):
                await backend.create(spec)
            assert [b["state"] for b in _mine(server, run_id)] != ["destroyed"]
            await deleting
            second = await backend.create(spec)  # destroyed: its vCPU is free again
            await second.delete()
            summary = AttemptSummary(error=AttemptError(type=type(info.value).__name__, message=str(info.value),
                                                        failure_class=info.value.failure_class))
            verdict = classify(summary, Catalog.default())
            assert verdict.failure_class == "capacity" and verdict.effect == "none"
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.counts["quota_400"] == 2
    assert len(_mine(server, run_id)) == 2  # the two that were made; the refusals made none


def test_the_default_snapshot_runs_as_a_non_root_user_and_files_go_where_they_are_named(
    server: DaytonaServer, tmp_path: Path
) -> None:
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "instruction.md").write_text("do it\n")
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            async with live_sandbox(backend, SandboxSpec(labels=run_labels(run_id))) as sbx:
                assert (await sbx.exec("id -u", timeout=30)).stdout.strip() == "1000"
                assert sbx.path("/app") == "/app"  # no path is moved (issue 53)
                await sbx.put_dir(tmp_path, "/")
                await sbx.put_file(b"x", "/logs/agent/usage.json")
                got = await sbx.exec('cat /task/instruction.md && ls /logs/agent && touch "$PWD/made-by-agent"',
                                     timeout=30)
                assert got.exit_code == 0, got.stderr
                assert got.stdout == "do it\nusage.json\n"
                out = tmp_path / "out"
                assert await sbx.get_dir("/logs", out, max_bytes=1 << 20) > 0
                assert (out / "agent" / "usage.json").read_bytes() == b"x"
                # issue 58: one over its bound is measured in the sandbox and never downloaded
                await sbx.put_file(b"y" * 5000, "/logs/agent/usage.json")
                await sbx.put_file(b"0.5", "/logs/verifier/reward.txt")
                bounded = tmp_path / "bounded"
                written = await sbx.get_dir("/logs", bounded, max_bytes=1 << 20,
                                            bounds={"agent/usage.json": 100, "verifier/reward.txt": 100})
                note = (bounded / "agent" / "usage.json").read_text()
                assert "not kept" in note and "5000 bytes" in note, note
                assert (bounded / "verifier" / "reward.txt").read_bytes() == b"0.5"
                assert written == len(note) + 3
        finally:
            await backend.close()

    asyncio.run(main())


def test_an_image_that_runs_as_root_keeps_its_paths_though_the_api_reports_daytona(
    server: DaytonaServer, base_image: str, tmp_path: Path
) -> None:
    (tmp_path / "instruction.md").write_text("do it\n")
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            async with live_sandbox(backend, spec_for(base_image, run_id)) as sbx:
                # What the real API says for a create that names no user, whatever the image runs as.
                reported = await backend.lookup(sbx.id)
                assert reported is not None and reported.user == "daytona"
                assert (await sbx.exec("id -u", timeout=30)).stdout.strip() == "0"
                assert sbx.path("/app") == "/app" and sbx.path("/logs/agent") == "/logs/agent"
                await sbx.put_dir(tmp_path, "/task")
                got = await sbx.exec("cat /task/instruction.md", timeout=30)
                assert (got.exit_code, got.stdout) == (0, "do it\n"), got.stderr
        finally:
            await backend.close()

    asyncio.run(main())


def test_the_backends_own_401_is_not_a_model_accounts(
    server: DaytonaServer, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "a-key-daytona-does-not-know")

    async def main() -> None:
        backend = backend_for(server)
        try:
            with pytest.raises(SandboxAuthError) as info:
                await backend.create(spec_for(base_image, _run_id()))
            assert "a-key-daytona-does-not-know" not in str(info.value)
            summary = AttemptSummary(error=AttemptError(type=type(info.value).__name__, message=str(info.value),
                                                        failure_class=info.value.failure_class))
            verdict = classify(summary, Catalog.default())
            assert verdict.failure_class == "stack" and verdict.effect != "auth_failed"
        finally:
            await backend.close()

    asyncio.run(main())


def test_429s_on_every_route_class_and_a_paged_listing_are_absorbed(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(throttled_429_fraction=0.3, create_429_fraction=0.3, retry_after_sec=0.1, seed=22)
    server.list_page = 2
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server, max_rate_limit_retries=20)
        try:
            made = await asyncio.gather(*(backend.create(spec_for(base_image, run_id)) for _ in range(5)))
            for sbx in made:
                assert (await sbx.exec("echo hi", timeout=30)).stdout == "hi\n"
            listed = await backend.list({LABEL_RUN: run_id})
            assert sorted(r.id for r in listed) == sorted(s.id for s in made)  # 3 pages of 2
            await asyncio.gather(*(s.delete() for s in made))
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.counts["throttled_429"] > 0 and server.counts["create_429"] > 0
    assert server.counts["list_pages"] >= 3
    assert len(_mine(server, run_id)) == 5  # one sandbox per create, 429s or not


async def _until_destroyed(server: DaytonaServer, run_id: str, within: float = 120.0) -> list[str]:
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        states = [b["state"] for b in _mine(server, run_id)]
        if states and set(states) == {"destroyed"}:
            break
        await asyncio.sleep(0.5)
    return [b["state"] for b in _mine(server, run_id)]


def test_the_fixture_auto_stops_an_idle_sandbox_but_not_a_long_command_and_deletes_it(
    server: DaytonaServer, base_image: str
) -> None:
    # A Daytona minute is 2.5 s here: long enough that a loaded host's pause between the create's
    # answer and the exec (measured over 2 s at load 18) is not idleness past the bound.
    server.faults = Faults(minute_sec=2.5)
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            # 120 s of lifetime: auto-stop after 2 idle "minutes" (5 s); the command outlasts them.
            sbx = await backend.create(spec_for(base_image, run_id, lifetime_sec=120))
            got = await sbx.exec("sleep 7; echo done", timeout=30)
            assert (got.exit_code, got.stdout) == (0, "done\n")
            # Then idle: stopped, and deleted at once (autoDeleteInterval 0).
            assert await _until_destroyed(server, run_id) == ["destroyed"]
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.counts["auto_stopped"] == 1 and server.counts["ttl_destroyed"] == 0


def test_the_fixture_destroys_a_sandbox_past_its_ttl_whatever_its_state(server: DaytonaServer) -> None:
    server.faults = Faults(minute_sec=1.0, create_delay_sec=600)  # never starts on its own
    run_id = _run_id()

    async def main() -> None:
        await _post_sandbox(server, run_id, ttl_minutes=2)
        assert await _until_destroyed(server, run_id) == ["destroyed"]

    asyncio.run(main())
    assert server.counts["ttl_destroyed"] == 1


def test_a_403_keeps_the_servers_reason(server: DaytonaServer, base_image: str) -> None:
    server.faults = Faults(forbidden_message="Organization is suspended: payment required")

    async def main() -> None:
        backend = backend_for(server)
        try:
            with pytest.raises(SandboxAuthError, match=r"\(403\): .*Organization is suspended: payment required"):
                await backend.create(spec_for(base_image, _run_id()))
        finally:
            await backend.close()

    asyncio.run(main())


def test_every_call_has_a_timeout() -> None:
    async def hangs() -> None:
        await asyncio.sleep(3600)

    async def main() -> None:
        with pytest.raises(SandboxUnavailableError, match=r"within 0\.2s"):
            await call_with_retries("get x", hangs, max_rate_limit_retries=0, max_retry_after=1,
                                    max_server_retries=0, timeout=0.2)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_429_on_a_file_transfer_is_waited_out() -> None:
    """The SDK's file transfers raise aiohttp's own 429 wrapped in a bare DaytonaError (no
    status): at 100 sandboxes a cell's /logs download failed on one instead of waiting."""
    import aiohttp
    from daytona._utils.errors import intercept_errors
    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL

    tries = []

    @intercept_errors(message_prefix="Failed to download files: ")
    async def download() -> bytes:
        tries.append(1)
        if len(tries) == 1:
            url = URL("http://daytona/toolbox/x/files/bulk-download")
            raise aiohttp.ClientResponseError(
                aiohttp.RequestInfo(url, "POST", CIMultiDictProxy(CIMultiDict()), url), (), status=429,
                message="Too Many Requests",
                headers=CIMultiDictProxy(CIMultiDict({"Retry-After-authenticated": "0.1"})))
        return b"logs"

    async def main() -> bytes:
        return await call_with_retries("download", download, max_rate_limit_retries=3, max_retry_after=1,
                                       max_server_retries=0, timeout=30)

    assert asyncio.run(main()) == b"logs"
    assert len(tries) == 2


def test_the_organisation_pool_sizes_admission() -> None:
    from ray_bench.sandboxes.daytona import DaytonaPool

    pool = DaytonaPool(vcpu=10, memory_gib=20, disk_gib=30, creates_per_minute=60)
    assert pool.slots(None, None) == 10  # 1 vCPU, 1 GiB, 3 GiB disk each: the disk binds at 10
    assert pool.slots(2, 4096) == 5
    assert pool.slots(1, 1500) == 10  # 1500 MiB is asked as 2 GiB: 20 // 2
    assert pool.slots(16, None) == 0


def test_a_plan_on_daytona_takes_its_pool_from_the_organisation(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from support.suites import make_suite

    from ray_bench.api import plan_run
    from ray_bench.errors import ConfigError

    monkeypatch.setenv("RB_TEST_KEY_A", "x")
    monkeypatch.setenv("RB_TEST_KEY_B", "x")
    pool = {"vcpu": 4, "memory_gib": 64, "disk_gib": 300, "creates_per_minute": 60}
    suite, accounts = make_suite(tmp_path / "s", tasks=["hello-world"], backend="daytona",
                                 backends={"daytona": {"options": {"pool": pool},
                                                       "resources": {"cpus": 2}}})
    result = plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="p1")
    plan = json.loads((result.run_root / "launch-plan.json").read_text())
    assert plan["capacity"]["backend_pools"] == {"daytona": 2}
    assert "organisation pool 4 vCPU" in (result.run_root / "receipt.md").read_text()

    suite, accounts = make_suite(tmp_path / "t", tasks=["hello-world"], backend="daytona",
                                 backends={"daytona": {"options": {"pool": {**pool, "vcpu": 1}},
                                                       "resources": {"cpus": 2}}})
    with pytest.raises(ConfigError, match="not one sandbox"):
        plan_run(suite=suite, accounts=accounts, runs_dir=tmp_path / "runs", run_id="p2")


def test_a_user_probe_timed_out_is_asked_again_of_the_same_sandbox(
    server: DaytonaServer, base_image: str
) -> None:
    # A loaded runner times the create's `id` out (408): the provider's trouble, not the cell's.
    server.faults = Faults(exec_timeout_count=PROBE_TRIES - 1, exec_timeout_match="id -u")
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            async with live_sandbox(backend, spec_for(base_image, run_id)) as sbx:
                assert sbx.user == "root"
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.counts["exec_timeout"] == PROBE_TRIES - 1
    assert len(_mine(server, run_id)) == 1  # no create spent on it


def test_a_user_probe_that_keeps_timing_out_gives_the_sandbox_up_as_infrastructure(
    server: DaytonaServer, base_image: str
) -> None:
    server.faults = Faults(exec_timeout_count=PROBE_TRIES, exec_timeout_match="id -u")
    run_id = _run_id()

    async def main() -> None:
        backend = backend_for(server)
        try:
            with pytest.raises(SandboxUnavailableError) as caught:
                await backend.create(spec_for(base_image, run_id))
            summary = AttemptSummary(error=AttemptError(type=type(caught.value).__name__, message=str(caught.value),
                                                        failure_class=caught.value.failure_class))
            verdict = classify(summary, Catalog.default())
            # Stack: the cell's attempts are not used up; the scheduler runs it again.
            assert (verdict.failure_class, verdict.counts) == ("stack", False)
            report = await audit([backend], run_id, cleanup=True, settle_sec=30)
            assert (report.residue, report.errors) == ([], [])
        finally:
            await backend.close()

    asyncio.run(main())
    assert server.counts["exec_timeout"] == PROBE_TRIES
    assert [b["state"] for b in _mine(server, run_id)] == ["destroyed"]  # one sandbox, swept
