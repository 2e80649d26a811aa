"""The conformance suite and docker-specific behaviour against a real dockerd."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from support.images import write_task_environment
from support.late_answers import answers_read_late

from ray_bench.errors import (
    ArchiveEscapeError,
    SandboxCreateError,
    SandboxGoneError,
    SandboxOutOfMemoryError,
    SandboxTooLargeError,
    SandboxUnavailableError,
)
from ray_bench.sandboxes import make_backend
from ray_bench.sandboxes.base import LABEL_MANAGED, LABEL_RUN, Resources, SandboxSpec, run_labels
from ray_bench.sandboxes.docker import DockerBackend, task_image_tag
from ray_bench.sandboxes.docker.sandbox import DockerSandbox

from .conformance import BackendFactory, SandboxConformance, SpecFactory, live_sandbox

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def no_labelled_containers_left(docker_client: Any, run_id: str) -> Iterator[None]:
    """After every test, nothing labelled with the test's run id may remain. (``run_id`` is the
    same fixture value the test used; other people's containers are none of our business.)"""
    yield
    filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_RUN}={run_id}"]}
    left = docker_client.api.containers(all=True, filters=filters)
    for c in left:
        with contextlib.suppress(docker.errors.APIError):
            docker_client.api.remove_container(c["Id"], force=True, v=True)
    assert left == [], f"containers left behind: {[c['Names'] for c in left]}"


class TestDockerConformance(SandboxConformance):
    @pytest.fixture
    def backend_factory(self) -> BackendFactory:
        return DockerBackend

    @pytest.fixture
    def sandbox_spec(self, base_image: str) -> SpecFactory:
        def make(labels: Mapping[str, str]) -> SandboxSpec:
            return SandboxSpec(
                labels=labels,
                image=base_image,
                resources=Resources(cpus=1, memory_mb=256, pids=256),
            )

        return make


@pytest.fixture
def run_id() -> str:
    return f"dockertest-{uuid.uuid4().hex[:12]}"


def spec(image: str, run_id: str, **kwargs: Any) -> SandboxSpec:
    return SandboxSpec(labels=run_labels(run_id, "cell", "attempt"), image=image, **kwargs)


async def _with_backend(body: Any) -> Any:
    backend = DockerBackend()
    try:
        return await body(backend)
    finally:
        await backend.close()


def test_registered_by_name() -> None:
    assert isinstance(make_backend("docker"), DockerBackend)


def test_limits_and_labels_applied(docker_client: Any, base_image: str, run_id: str) -> None:
    async def body(backend: DockerBackend) -> None:
        s = spec(base_image, run_id, resources=Resources(cpus=0.5, memory_mb=96, pids=77))
        async with live_sandbox(backend, s) as sbx:
            info = docker_client.api.inspect_container(sbx.id)
            host = info["HostConfig"]
            assert host["Memory"] == 96 * 2**20
            assert host["MemorySwap"] == 96 * 2**20
            assert host["NanoCpus"] == 500_000_000
            assert host["PidsLimit"] == 77
            assert host["NetworkMode"] == "none"
            assert info["Config"]["Labels"] == dict(s.labels)
            res = await sbx.exec("cat /proc/net/dev | tail -n +3 | cut -d: -f1", timeout=30)
            assert res.stdout.split() == ["lo"]

    asyncio.run(_with_backend(body))


def test_network_when_asked(docker_client: Any, base_image: str, run_id: str) -> None:
    async def body(backend: DockerBackend) -> None:
        async with live_sandbox(backend, spec(base_image, run_id, network=True)) as sbx:
            assert (
                docker_client.api.inspect_container(sbx.id)["HostConfig"]["NetworkMode"] != "none"
            )
            res = await sbx.exec("cat /proc/net/dev | tail -n +3 | cut -d: -f1", timeout=30)
            assert "eth0" in res.stdout.split()

    asyncio.run(_with_backend(body))


def test_image_built_once_for_parallel_creates(
    docker_client: Any, base_image: str, run_id: str, tmp_path: Path
) -> None:
    # A fresh context (unique content) so that the hash has never been built.
    context = write_task_environment(
        tmp_path / "environment", base=base_image, run=f"echo {run_id} > /built"
    )
    tag = task_image_tag(context)
    since = int(time.time()) - 1

    async def body(backend: DockerBackend) -> None:
        s = SandboxSpec(labels=run_labels(run_id, "cell", "attempt"), dockerfile_dir=context)
        made = await asyncio.gather(backend.create(s), backend.create(s), backend.create(s))
        try:
            images = {docker_client.api.inspect_container(m.id)["Image"] for m in made}
            assert len(images) == 1
            res = await made[0].exec("cat /built; pwd", timeout=30)
            assert res.stdout == f"{run_id}\n/app\n"
        finally:
            await asyncio.gather(*(m.delete() for m in made))

    try:
        asyncio.run(_with_backend(body))
        # dockerd's own record: one build tags the image once.
        events = docker_client.api.events(
            since=since,
            until=int(time.time()) + 1,
            decode=True,
            filters={"type": "image", "event": "tag"},
        )
        tagged = [e for e in events if e.get("Actor", {}).get("Attributes", {}).get("name") == tag]
        assert len(tagged) == 1, tagged
    finally:
        docker_client.api.remove_image(tag, force=True)


def test_build_failure_reports_log_tail(base_image: str, run_id: str, tmp_path: Path) -> None:
    context = write_task_environment(
        tmp_path / "environment", base=base_image, run=f"echo boom-{run_id} && exit 3"
    )

    async def body(backend: DockerBackend) -> None:
        s = SandboxSpec(labels=run_labels(run_id, "cell", "attempt"), dockerfile_dir=context)
        with pytest.raises(SandboxCreateError, match=f"boom-{run_id}"):
            await backend.create(s)
        assert await backend.list({LABEL_RUN: run_id}) == []

    asyncio.run(_with_backend(body))


def test_container_removed_mid_exec_is_gone(
    docker_client: Any, base_image: str, run_id: str
) -> None:
    async def body(backend: DockerBackend) -> None:
        sbx = await backend.create(spec(base_image, run_id))
        try:
            running = asyncio.ensure_future(sbx.exec("sleep 60", timeout=120))
            await asyncio.sleep(1.0)
            await asyncio.to_thread(docker_client.api.remove_container, sbx.id, force=True)
            with pytest.raises(SandboxGoneError):
                await asyncio.wait_for(running, 30)
            with pytest.raises(SandboxGoneError):
                await sbx.exec("true", timeout=10)
        finally:
            await sbx.delete()

    asyncio.run(_with_backend(body))


def test_container_killed_mid_exec_is_gone(
    docker_client: Any, base_image: str, run_id: str
) -> None:
    async def body(backend: DockerBackend) -> None:
        async with live_sandbox(backend, spec(base_image, run_id)) as sbx:
            running = asyncio.ensure_future(sbx.exec("sleep 60", timeout=120))
            await asyncio.sleep(1.0)
            await asyncio.to_thread(docker_client.api.kill, sbx.id)
            with pytest.raises(SandboxGoneError):
                await asyncio.wait_for(running, 30)

    asyncio.run(_with_backend(body))


def test_what_a_command_printed_before_a_late_client_read_the_answer_is_kept(
    base_image: str, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loaded host: the client reads each HTTP answer 0.5 s late, so the exec's first output is
    already waiting behind the headers of its answer (docker-py's own reader lost it)."""

    async def body(backend: DockerBackend) -> None:
        async with live_sandbox(backend, spec(base_image, run_id)) as sbx:
            with answers_read_late(monkeypatch):
                res = await sbx.exec("echo first; echo err >&2; sleep 1; echo second", timeout=60)
            assert (res.exit_code, res.stdout, res.stderr) == (0, "first\nsecond\n", "err\n"), res

    asyncio.run(_with_backend(body))


def test_a_command_that_ended_in_time_is_no_timeout_while_dockerd_holds_its_streams(
    base_image: str, run_id: str
) -> None:
    """A child holding the output keeps dockerd from ending the exec's streams for 2 s after the
    command exited: a timeout inside those 2 s finds the command done, not running."""

    async def body(backend: DockerBackend) -> None:
        async with live_sandbox(backend, spec(base_image, run_id)) as sbx:
            res = await sbx.exec("sleep 30 & echo hi; exit 4", timeout=1.5)
            assert (res.exit_code, res.stdout, res.timed_out, res.killed) == (4, "hi\n", False, False), res
            assert res.duration_sec < 10, res

    asyncio.run(_with_backend(body))


def test_memory_limit_reports_oom(base_image: str, run_id: str) -> None:
    async def body(backend: DockerBackend) -> None:
        async with live_sandbox(
            backend, spec(base_image, run_id, resources=Resources(memory_mb=32))
        ) as sbx:
            res = await sbx.exec('x=0123456789abcdef; while :; do x="$x$x"; done', timeout=60)
            assert res.exit_code == 137
            assert res.oom_killed
            assert not res.timed_out
            after = await sbx.exec("echo fine; exit 3", timeout=30)
            assert (after.stdout, after.exit_code, after.oom_killed) == ("fine\n", 3, False)
            killed = await sbx.exec("kill -9 $$", timeout=30)  # 137 without the OOM killer
            assert (killed.exit_code, killed.oom_killed) == (137, False)

    asyncio.run(_with_backend(body))


def test_a_container_whose_own_process_the_memory_limit_kills_is_out_of_memory_not_gone(
    docker_client: Any, base_image: str, run_id: str
) -> None:
    """Under load the kernel's memcg killer can take the container's own process, not only the
    command that grew (seen once in CI: a 64 MB task's attempt came back `executor`): that is the
    memory limit's verdict (capacity), told apart from a container removed from outside."""
    hog = 'sleep 2; x=0123456789abcdef; while :; do x="$x$x"; done'  # PID 1 grows past the limit
    created = docker_client.api.create_container(
        base_image, ["sh", "-c", hog], labels=run_labels(run_id, "cell", "attempt"),
        host_config=docker_client.api.create_host_config(mem_limit="32m", memswap_limit="32m"))
    docker_client.api.start(created["Id"])

    async def body(backend: DockerBackend) -> None:
        sbx = DockerSandbox(backend, created["Id"], spec(base_image, run_id))
        # a command under way when it died (or started just after: a loaded host is slow to exec)
        with pytest.raises(SandboxOutOfMemoryError, match="memory limit") as caught:
            await sbx.exec("sleep 60", timeout=120)
        assert caught.value.failure_class == "capacity"
        assert docker_client.api.inspect_container(created["Id"])["State"]["OOMKilled"] is True
        # and one asked of the stopped container: dockerd's "is not running" is read the same way
        with pytest.raises(SandboxOutOfMemoryError, match="memory limit"):
            await sbx.exec("true", timeout=30)

    try:
        asyncio.run(_with_backend(body))
    finally:
        docker_client.api.remove_container(created["Id"], force=True)


@pytest.mark.slow
def test_output_hundreds_of_times_the_cap_is_capped(base_image: str, run_id: str) -> None:
    # 500 MB, 250 times the two streams' caps: the same streaming discard as 2 GB took, at a
    # quarter of its time (dockerd relays about 100 MB/s here quiet; 2 GB took 133 s loaded)
    size = 5 * 10**8

    async def body(backend: DockerBackend) -> None:
        async with live_sandbox(backend, spec(base_image, run_id)) as sbx:
            res = await sbx.exec(
                f"head -c {size // 2} /dev/zero; head -c {size // 2} /dev/zero >&2",
                timeout=300,
                output_cap=1 << 20,
            )
            assert res.exit_code == 0
            assert len(res.stdout) == len(res.stderr) == 1 << 20
            assert res.truncated_bytes == size - 2 * (1 << 20)

    asyncio.run(_with_backend(body))


def test_get_dir_refuses_link_out_of_directory(
    base_image: str, run_id: str, tmp_path: Path
) -> None:
    async def body(backend: DockerBackend) -> None:
        async with live_sandbox(backend, spec(base_image, run_id)) as sbx:
            await sbx.exec(
                "mkdir -p /logs/ok && echo hi > /logs/ok/a && ln -s a /logs/ok/inner", timeout=30
            )
            assert await sbx.get_dir("/logs", tmp_path / "ok", max_bytes=100) == 3
            assert not (tmp_path / "ok" / "ok" / "inner").exists()  # inner links are skipped
            await sbx.exec("ln -s /etc /logs/evil", timeout=30)
            with pytest.raises(ArchiveEscapeError):
                await sbx.get_dir("/logs", tmp_path / "bad", max_bytes=1 << 20)

    asyncio.run(_with_backend(body))


def test_get_dir_writes_the_note_for_a_contract_file_over_its_bound(
    base_image: str, run_id: str, tmp_path: Path
) -> None:
    """Issue 58: the tar header gives the size; a usage.json over its bound is not copied."""
    async def body(backend: DockerBackend) -> None:
        async with live_sandbox(backend, spec(base_image, run_id)) as sbx:
            await sbx.exec("mkdir -p /logs/agent && head -c 5000 /dev/zero > /logs/agent/usage.json"
                           " && echo hi > /logs/agent/out.txt", timeout=30)
            out = tmp_path / "logs"
            written = await sbx.get_dir("/logs", out, max_bytes=1 << 20, bounds={"agent/usage.json": 100})
            note = (out / "agent" / "usage.json").read_text()
            assert "not kept" in note and "5000 bytes" in note and written == len(note) + 3

    asyncio.run(_with_backend(body))


def test_daemon_unreachable_is_unavailable(tmp_path: Path, run_id: str) -> None:
    async def body() -> None:
        backend = DockerBackend(base_url=f"unix://{tmp_path}/no-docker.sock")
        try:
            with pytest.raises(SandboxUnavailableError):
                await backend.create(spec("ray-bench-base:busybox", run_id))
            with pytest.raises(SandboxUnavailableError):
                await backend.list({LABEL_RUN: run_id})
        finally:
            await backend.close()

    asyncio.run(body())


def test_list_and_remove_volumes_and_networks(docker_client: Any, run_id: str) -> None:
    labels = run_labels(run_id)
    docker_client.api.create_volume(name=f"rb-{run_id}", labels=labels)
    docker_client.api.create_network(f"rb-{run_id}", labels=labels)

    async def body(backend: DockerBackend) -> None:
        refs = await backend.list({LABEL_RUN: run_id})
        assert sorted(r.kind for r in refs) == ["network", "volume"]
        for ref in refs:
            await backend.remove(ref)
            await backend.remove(ref)
        assert await backend.list({LABEL_RUN: run_id}) == []

    asyncio.run(_with_backend(body))


def _daemon_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip(f"the proxy speaks to a unix socket, not {host}")
    return host.removeprefix("unix://")


class _LosingProxy:
    """A unix socket in front of the real daemon that loses the answer to every container
    create: it closes the client's connection at once and hands the request to the daemon
    ``late_sec`` later, so the container appears after the client gave up (what a wedged
    daemon did under load: a ``Created`` container nobody removed)."""

    def __init__(self, path: Path, late_sec: float) -> None:
        self.path, self.late_sec = path, late_sec
        self.lost = 0
        self.late_answers: list[bytes] = []

    async def __aenter__(self) -> _LosingProxy:
        self.server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_unix_connection(_daemon_socket())

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        first = await reader.read(65536)
        if b"/containers/create" in first.split(b"\r\n", 1)[0]:
            # the whole request (headers and JSON body, which may come in pieces) before dropping
            while b"\r\n\r\n" not in first:
                first += await reader.read(65536)
            head, body = first.split(b"\r\n\r\n", 1)
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += await reader.read(65536)
            first = head + b"\r\n\r\n" + body
            self.lost += 1
            writer.close()  # the client sees its connection dropped: no answer

            async def late() -> None:
                await asyncio.sleep(self.late_sec)
                up_w.write(first)
                await up_w.drain()
                answer = await up_r.read(65536)  # the daemon's answer, which nobody hears
                self.late_answers.append(answer.split(b"\r\n", 1)[0])
                up_w.close()

            await late()
            return
        up_w.write(first)
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))


def test_a_create_whose_answer_is_lost_leaves_no_container(
    docker_client: Any, base_image: str, run_id: str, tmp_path: Path
) -> None:
    async def body() -> None:
        async with _LosingProxy(tmp_path / "d.sock", late_sec=1.0) as proxy:
            backend = DockerBackend(base_url=f"unix://{tmp_path}/d.sock")
            backend.undo_settle_sec = 120.0  # ends as soon as the late container is removed
            try:
                with pytest.raises((SandboxUnavailableError, SandboxCreateError)):
                    await backend.create(spec(base_image, run_id))
            finally:
                await backend.close()
            assert proxy.lost == 1
            # The daemon did make the container, after the client had given up...
            assert [a.split(b" ", 2)[1] for a in proxy.late_answers] == [b"201"], proxy.late_answers

    asyncio.run(body())
    # ...and the backend found it by name and removed it.
    labelled = docker_client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    assert labelled == [], labelled


def test_a_gpu_request_where_the_daemon_has_no_gpu_runtime_fails_as_task_and_leaves_nothing(
        base_image: str, run_id: str, docker_client: Any) -> None:
    """The daemon refuses the device request at start ("could not select device driver"): the
    create is not a crash nor a retry without bound, but a failure counted against the cell's
    attempts (class ``task``: no wait on this node makes it fit), and the container is removed
    (the autouse fixture finds none)."""
    if any("nvidia" in r for r in docker_client.info().get("Runtimes") or {}):
        pytest.skip("this daemon has a GPU runtime")

    async def body(backend: DockerBackend) -> SandboxTooLargeError:
        with pytest.raises(SandboxTooLargeError) as info:
            await backend.create(spec(base_image, run_id, resources=Resources(cpus=1, memory_mb=128, gpus=1)))
        return info.value

    err = asyncio.run(_with_backend(body))
    assert err.failure_class == "task"
    assert "could not select device driver" in str(err) and "[[gpu]]" in str(err), err
