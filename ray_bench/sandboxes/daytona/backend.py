"""The ``daytona`` backend: one Daytona sandbox per attempt, through the ``daytona`` SDK.

Needs the ``daytona`` extra; without it the SDK import fails with ``ImportError`` and
:mod:`ray_bench.sandboxes` skips registration. The API key is a credential route: the
environment variable named by ``api_key_env`` (``DAYTONA_API_KEY``) is read on the node that
creates the sandbox and is never logged, stored or put in an error. ``DAYTONA_API_URL`` (or
``api_url=``) selects the server; ``tests/support/daytona_server.py`` is a local one backed by
Docker (see ``docs/daytona.md``).

How the interface maps onto Daytona:

- **create** from an image (``spec.image``), or a snapshot (``spec.image = "snapshot:NAME"``,
  or the backend's ``snapshot=`` when the spec names no image), with the spec's labels, env
  and resources. ``spec.lifetime_sec`` becomes the safety net: auto-stop after that many idle
  minutes, auto-delete as soon as stopped, and a wall-clock TTL a little longer, so a crashed
  driver leaves nothing running for long. Creation runs in its own task: a cancelled create
  waits briefly for it, deletes what it made, and sweeps by a one-off ``ray-bench.create``
  label for anything the SDK made but never returned.
- **exec** runs ``sh -c`` under an in-sandbox watchdog (``setsid`` + ``kill -9 -PGID``), so a
  timeout kills the whole process group on any Daytona server, and returns stdout and stderr
  separately, capped, base64-framed in one round trip (the toolbox's execute endpoint merges
  the streams).
- **files** travel as tar archives through the toolbox's bulk upload/download; downloads are
  capped and refuse entries that leave their directory (:class:`ArchiveEscapeError`).
- **rate limits**: a 429 carries ``Retry-After-<throttler>`` (throttlers ``authenticated``,
  ``sandbox-create``, ``sandbox-lifecycle``); every call waits that long and retries, a bounded
  number of times, then raises :class:`SandboxRateLimitedError` with ``retry_after``.

SDK errors are translated here: unreachable or 5xx -> :class:`SandboxUnavailableError`, a
failed create -> :class:`SandboxCreateError`, a sandbox that is gone or no longer started ->
:class:`SandboxGoneError`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import logging
import math
import os
import random
import shlex
import tarfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from daytona import (
    AsyncDaytona,
    AsyncSandbox,
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    DaytonaConfig,
    DaytonaConnectionError,
    DaytonaError,
    DaytonaNotFoundError,
    FileUpload,
    Image,
    ListSandboxesQuery,
)
from daytona import Resources as DaytonaResources
from pydantic import BaseModel, ConfigDict, Field

from ray_bench import sandboxes
from ray_bench.errors import (
    ArchiveEscapeError,
    SandboxCreateError,
    SandboxError,
    SandboxGoneError,
    SandboxRateLimitedError,
    SandboxUnavailableError,
)
from ray_bench.sandboxes.base import (
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    Sandbox,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

#: A one-off label per create call, so that a create that failed or was cancelled after the
#: server made the sandbox can still find and delete it.
LABEL_CREATE = "ray-bench.create"
SNAPSHOT_PREFIX = "snapshot:"
THROTTLERS = ("authenticated", "sandbox-create", "sandbox-lifecycle")
_SCRATCH = "/tmp/.ray-bench"
_GONE_STATES = frozenset(
    {
        "destroyed",
        "destroying",
        "error",
        "build_failed",
        "stopped",
        "stopping",
        "archived",
        "archiving",
        "unknown",
    }
)
# $1 scratch dir, $2 output cap, $3 timeout, $4 cwd, $5 command. The command is its own session
# (setsid), so the watchdog's `kill -9 -PGID` reaches its children; the watchdog is one too, so
# killing it also kills its `sleep`. Output comes back as one header line and two base64 blocks.
_EXEC = r"""d=$1; cap=$2; t=$3; mkdir -p "$d"; S=; command -v setsid >/dev/null 2>&1 && S=setsid
mkdir -p "$4" 2>/dev/null; cd "$4" || { echo "RB 126 0 0 0"; exit 0; }
$S sh -c "$5" >"$d/out" 2>"$d/err" </dev/null &
p=$!; echo "$p" >"$d/pid"
$S sh -c 'sleep "$1"; echo 1 >"$3/to"
  kill -9 -"$2" 2>/dev/null || kill -9 "$2" 2>/dev/null || rm -f "$3/to"' rb-watchdog \
  "$t" "$p" "$d" >/dev/null 2>&1 </dev/null &
w=$!
wait "$p" 2>/dev/null; rc=$?
kill -9 -"$w" 2>/dev/null || kill -9 "$w" 2>/dev/null
to=0; [ -f "$d/to" ] && to=1
echo "RB $rc $to $(wc -c <"$d/out") $(wc -c <"$d/err")"
head -c "$cap" "$d/out" | base64; echo RB-SEP
head -c "$cap" "$d/err" | base64
rm -rf "$d"
"""
_KILL = r"""p=$(cat "$1/pid" 2>/dev/null) && { kill -9 -"$p" 2>/dev/null || kill -9 "$p"; }
rm -rf "$1" """
# Slack on the HTTP request beyond the in-sandbox watchdog, for the output to come back.
_EXEC_SLACK_SEC = 60


class DaytonaPool(BaseModel):
    """The organisation's compute pool on Daytona: what the capacity actor may hand out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vcpu: int = Field(
        gt=0, description="vCPUs the organisation may run at once across all sandboxes."
    )
    memory_gib: int = Field(gt=0, description="Memory in GiB the organisation may hold at once.")
    disk_gib: int = Field(gt=0, description="Disk in GiB the organisation may hold at once.")
    creates_per_minute: float = Field(
        gt=0,
        description="Sandbox creates per minute the API allows (its `sandbox-create` throttler).",
    )
    default_vcpu: int = Field(
        default=1, gt=0, description="vCPUs a sandbox gets when its spec names none."
    )
    default_memory_gib: int = Field(
        default=1, gt=0, description="Memory in GiB a sandbox gets when its spec names none."
    )
    default_disk_gib: int = Field(
        default=3, gt=0, description="Disk in GiB a sandbox gets when its spec names none."
    )


def lifetime_minutes(lifetime_sec: float) -> int:
    """Whole minutes covering ``lifetime_sec`` (at least 1: Daytona reads 0 as "disabled")."""
    return max(1, math.ceil(lifetime_sec / 60))


def retry_after(headers: Mapping[str, Any]) -> float | None:
    """Seconds to wait from a 429's ``Retry-After[-<throttler>]`` headers (the longest one),
    else its ``X-RateLimit-Reset-<throttler>`` headers; ``None`` when it carries neither."""
    waits: list[float] = []
    resets: list[float] = []
    for key, value in headers.items():
        name = str(key).lower()
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            continue
        if name == "retry-after" or name.startswith("retry-after-"):
            waits.append(seconds)
        elif name.startswith("x-ratelimit-reset"):
            resets.append(seconds)
    found = waits or resets
    return max(found) if found else None


class DaytonaSandbox(Sandbox):
    def __init__(self, backend: DaytonaBackend, sandbox: AsyncSandbox, spec: SandboxSpec) -> None:
        self._backend = backend
        self._sandbox = sandbox
        self.id = sandbox.id
        self.labels = dict(spec.labels)
        self._workdir = spec.workdir
        self._deleted = False

    async def exec(
        self,
        command: str,
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> ExecResult:
        if self._deleted:
            raise SandboxGoneError(f"Daytona sandbox {self.id} was deleted")
        scratch = f"{_SCRATCH}/{uuid.uuid4().hex}"
        limit = max(1, math.ceil(timeout))
        script = _sh(
            _EXEC, scratch, str(max(0, output_cap)), str(limit), cwd or self._workdir, command
        )
        started = time.monotonic()
        try:
            response = await self._call(
                "exec",
                lambda: self._sandbox.process.exec(
                    script, env=dict(env or {}), timeout=limit + _EXEC_SLACK_SEC
                ),
            )
        except asyncio.CancelledError:
            # The HTTP request is gone but the command is not: kill its group, shielded.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._kill(scratch))
            raise
        duration = time.monotonic() - started
        try:
            return _parse_exec(response.result or "", response.exit_code, output_cap, duration)
        except SandboxError as exc:
            # A sandbox that vanished mid-command cuts the wrapper short; the API may take a
            # moment to notice, so look a few times before calling it a wrapper failure.
            for _ in range(3):
                await self._backend.raise_if_gone(self.id, exc)
                await asyncio.sleep(0.5)
            raise

    async def _kill(self, scratch: str) -> None:
        await asyncio.wait_for(self._sandbox.process.exec(_sh(_KILL, scratch), timeout=30), 40)

    async def put_dir(self, local_dir: Path, sandbox_dir: str) -> None:
        data = await asyncio.to_thread(_tar_dir, local_dir)
        await self._put_tar(data, sandbox_dir)

    async def put_file(self, data: bytes, sandbox_path: str, mode: int = 0o644) -> None:
        path = PurePosixPath(sandbox_path)
        await self._put_tar(_tar_file(data, path.name, mode), str(path.parent))

    async def _put_tar(self, data: bytes, sandbox_dir: str) -> None:
        tmp = f"{_SCRATCH}/{uuid.uuid4().hex}.tar"
        await self._call("upload", lambda: self._sandbox.fs.upload_files([FileUpload(data, tmp)]))
        script = _sh(
            'mkdir -p "$2" && tar -xf "$1" -C "$2"; rc=$?; rm -f "$1"; exit $rc', tmp, sandbox_dir
        )
        response = await self._call(
            "upload", lambda: self._sandbox.process.exec(script, timeout=300)
        )
        if response.exit_code != 0:
            raise SandboxError(
                f"unpacking into {sandbox_dir} failed: {(response.result or '')[-500:]}"
            )

    async def get_dir(self, sandbox_dir: str, local_dir: Path, *, max_bytes: int) -> int:
        tmp = f"{_SCRATCH}/{uuid.uuid4().hex}.tar"
        # Archive headers and padding ride on top of the payload; the cap itself is enforced on
        # extraction, this bound only keeps a huge log directory from crossing the wire.
        wire_cap = 2 * max(0, max_bytes) + (1 << 20)
        script = _sh(
            '[ -d "$2" ] || { echo RB-NODIR; exit 0; }; mkdir -p "${1%/*}"; '
            'tar -C "$2" -cf - . 2>/dev/null | head -c "$3" >"$1"; echo RB-OK',
            tmp,
            sandbox_dir,
            str(wire_cap),
        )
        response = await self._call(
            "download", lambda: self._sandbox.process.exec(script, timeout=300)
        )
        if "RB-NODIR" in (response.result or ""):
            return 0
        if "RB-OK" not in (response.result or ""):
            raise SandboxError(f"archiving {sandbox_dir} failed: {(response.result or '')[-500:]}")
        try:
            data = await self._call("download", lambda: self._sandbox.fs.download_file(tmp))
        finally:
            with contextlib.suppress(Exception):
                await self._sandbox.process.exec(_sh('rm -f "$1"', tmp), timeout=60)
        return await asyncio.to_thread(extract_capped, data, local_dir, max_bytes)

    async def delete(self) -> None:
        if self._deleted:
            return
        task = asyncio.ensure_future(self._backend.delete_id(self.id))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await task
            raise
        self._deleted = True

    async def _call(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        try:
            return await self._backend.retrying(f"{what} in sandbox {self.id}", fn)
        except SandboxRateLimitedError:
            raise
        except DaytonaError as exc:
            await self._backend.raise_if_gone(self.id, exc)
            raise _translate(exc, f"{what} in sandbox {self.id}") from exc


class DaytonaBackend(SandboxBackend):
    """Daytona sandboxes. Options (all optional) are the keyword arguments below."""

    name = "daytona"

    def __init__(
        self,
        *,
        api_url: str | None = None,
        api_url_env: str = "DAYTONA_API_URL",
        api_key_env: str = "DAYTONA_API_KEY",
        target: str | None = None,
        snapshot: str | None = None,
        image: str | None = None,
        os_user: str | None = None,
        create_timeout: float = 300.0,
        ttl_margin_min: int = 15,
        delete_after_stop_min: int = 0,
        max_rate_limit_retries: int = 5,
        max_retry_after: float = 120.0,
        max_server_retries: int = 3,
        cancel_grace: float = 10.0,
        pool: DaytonaPool | Mapping[str, Any] | None = None,
    ) -> None:
        self.api_url = api_url
        self.api_url_env = api_url_env
        self.api_key_env = api_key_env
        self.target = target
        self.snapshot = snapshot
        self.image = image
        self.os_user = os_user
        self.create_timeout = create_timeout
        self.ttl_margin_min = ttl_margin_min
        self.delete_after_stop_min = delete_after_stop_min
        self.max_rate_limit_retries = max_rate_limit_retries
        self.max_retry_after = max_retry_after
        self.max_server_retries = max_server_retries
        self.cancel_grace = cancel_grace
        self.pool = DaytonaPool.model_validate(pool) if pool is not None else None
        #: 429s seen and waited out, for metrics and tests.
        self.rate_limited_waits = 0
        self._clients: dict[asyncio.AbstractEventLoop, AsyncDaytona] = {}

    # ------------------------------------------------------------------ client

    def client(self) -> AsyncDaytona:
        """The SDK client for the running event loop (its HTTP sessions are bound to a loop)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            for old in [lp for lp in self._clients if lp.is_closed()]:
                del self._clients[old]
            key = os.environ.get(self.api_key_env)
            if not key:
                raise SandboxUnavailableError(
                    f"the daytona backend's credential route {self.api_key_env} is not set "
                    "on this node"
                )
            url = self.api_url or os.environ.get(self.api_url_env) or None
            try:
                client = AsyncDaytona(DaytonaConfig(api_key=key, api_url=url, target=self.target))
            except DaytonaError as exc:
                raise SandboxUnavailableError(
                    f"cannot configure the Daytona client: {exc.message}"
                ) from exc
            self._clients[loop] = client
        return client

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()  # type: ignore[no-untyped-call]

    # ------------------------------------------------------------------ calls

    async def retrying(
        self, what: str, fn: Callable[[], Awaitable[T]], *, server_retries: bool = True
    ) -> T:
        """Run one SDK call, waiting out 429s (by their headers) and brief 5xx spells."""
        limited = 0
        failed = 0
        while True:
            try:
                return await fn()
            except DaytonaError as exc:
                status = exc.status_code
                if status == 429:
                    wait = retry_after(exc.headers)
                    if limited >= self.max_rate_limit_retries:
                        raise SandboxRateLimitedError(
                            f"{what}: Daytona rate limit persisted through {limited} retries",
                            retry_after=wait,
                        ) from exc
                    limited += 1
                    self.rate_limited_waits += 1
                    delay = min(wait if wait is not None else 2.0**limited, self.max_retry_after)
                    # Jitter, so that runners limited together do not come back together.
                    await asyncio.sleep(delay * (1 + 0.2 * random.random()))
                    continue
                if (
                    server_retries
                    and status in (502, 503, 504)
                    and failed < self.max_server_retries
                ):
                    failed += 1
                    await asyncio.sleep(min(0.5 * 2**failed, 10.0))
                    continue
                raise

    async def raise_if_gone(self, sandbox_id: str, cause: BaseException) -> None:
        """Raise :class:`SandboxGoneError` when the sandbox no longer exists or runs."""
        try:
            sandbox = await self.retrying(
                f"get {sandbox_id}", lambda: self.client().get(sandbox_id)
            )
        except DaytonaNotFoundError as exc:
            raise SandboxGoneError(f"Daytona sandbox {sandbox_id} no longer exists") from exc
        except (DaytonaError, SandboxError):
            return
        state = _state(sandbox.state)
        if state in _GONE_STATES:
            reason = f": {sandbox.error_reason}" if sandbox.error_reason else ""
            raise SandboxGoneError(f"Daytona sandbox {sandbox_id} is {state}{reason}") from cause

    # ------------------------------------------------------------------ create

    def params(
        self, spec: SandboxSpec, labels: Mapping[str, str]
    ) -> CreateSandboxFromImageParams | CreateSandboxFromSnapshotParams:
        """The SDK's create parameters for ``spec`` (public so tests can check the safety net)."""
        minutes = lifetime_minutes(spec.lifetime_sec)
        common: dict[str, Any] = {
            "labels": dict(labels),
            "env_vars": dict(spec.env),
            "os_user": self.os_user,
            "network_block_all": not spec.network,
            # Idle-based stop after the lifetime, delete on stop, and a wall-clock cap on top:
            # a driver that died mid-cell leaves a sandbox for at most lifetime + margin.
            "auto_stop_interval": minutes,
            "auto_delete_interval": self.delete_after_stop_min,
            "ttl_minutes": minutes + self.ttl_margin_min,
        }
        image = spec.image
        if image is None and spec.dockerfile_dir is None:
            if self.image is not None:
                image = self.image
            else:  # the backend's snapshot, else the organisation's default snapshot
                return CreateSandboxFromSnapshotParams(snapshot=self.snapshot, **common)
        if image is not None and image.startswith(SNAPSHOT_PREFIX):
            return CreateSandboxFromSnapshotParams(snapshot=image[len(SNAPSHOT_PREFIX) :], **common)
        source: str | Image = (
            image
            if image is not None
            else Image.from_dockerfile(str(Path(spec.dockerfile_dir or ".") / "Dockerfile"))
        )
        res = spec.resources
        resources = DaytonaResources(
            cpu=math.ceil(res.cpus) if res.cpus else None,
            memory=math.ceil(res.memory_mb / 1024) if res.memory_mb else None,
            disk=math.ceil(res.disk_mb / 1024) if res.disk_mb else None,
        )
        return CreateSandboxFromImageParams(image=source, resources=resources, **common)

    async def create(self, spec: SandboxSpec) -> Sandbox:
        token = uuid.uuid4().hex
        params = self.params(spec, {**spec.labels, LABEL_CREATE: token})
        task = asyncio.ensure_future(self._create(params))
        try:
            made = await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.shield(self._undo_create(task, token))
            raise
        except SandboxRateLimitedError:
            raise  # a 429 made nothing
        except BaseException:
            await asyncio.shield(self._sweep(token))
            raise
        return DaytonaSandbox(self, made, spec)

    async def _create(
        self, params: CreateSandboxFromImageParams | CreateSandboxFromSnapshotParams
    ) -> AsyncSandbox:
        try:
            return await self.retrying(
                "create", lambda: self.client().create(params, timeout=self.create_timeout)
            )
        except DaytonaError as exc:
            raise _translate(exc, "create", create=True) from exc

    async def _undo_create(self, task: asyncio.Future[AsyncSandbox], token: str) -> None:
        done, _ = await asyncio.wait({task}, timeout=self.cancel_grace)
        if not done:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        elif not task.cancelled() and task.exception() is None:
            with contextlib.suppress(Exception):
                await self.delete_id(task.result().id)
        await self._sweep(token)

    async def _sweep(self, token: str) -> None:
        try:
            for ref in await self.list({LABEL_CREATE: token}):
                await self.remove(ref)
        except Exception as exc:  # the auto-delete safety net still stands behind this
            log.warning(
                "could not sweep a failed Daytona create (%s): %s", token, type(exc).__name__
            )

    # ------------------------------------------------------------------ delete, list

    async def delete_id(self, sandbox_id: str) -> None:
        """Delete one sandbox by id; a sandbox that is already gone is fine."""
        try:
            sandbox = await self.retrying(
                f"get {sandbox_id}", lambda: self.client().get(sandbox_id)
            )
            await self.retrying(f"delete {sandbox_id}", lambda: sandbox.delete(timeout=60))
        except DaytonaNotFoundError:
            return
        except DaytonaError as exc:
            raise _translate(exc, f"delete {sandbox_id}") from exc

    async def list(self, labels: Mapping[str, str]) -> list[SandboxRef]:
        async def page() -> list[SandboxRef]:
            query = ListSandboxesQuery(labels=dict(labels))
            return [
                SandboxRef(self.name, sb.id, dict(sb.labels), state=_state(sb.state))
                async for sb in self.client().list(query)
                if _state(sb.state) != "destroyed"
            ]

        try:
            return await self.retrying("list", page)
        except DaytonaError as exc:
            raise _translate(exc, "list") from exc

    async def remove(self, ref: SandboxRef) -> None:
        task = asyncio.ensure_future(self.delete_id(ref.id))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await task
            raise


def _state(state: Any) -> str:
    return str(getattr(state, "value", state) or "unknown")


def _translate(exc: DaytonaError, what: str, *, create: bool = False) -> SandboxError:
    status = exc.status_code
    message = f"{what}: {exc.message}"
    if isinstance(exc, DaytonaConnectionError) or (
        status is not None and status >= 500 and not create
    ):
        return SandboxUnavailableError(message)
    if status is not None and status in (502, 503, 504):
        return SandboxUnavailableError(message)
    if create:
        return SandboxCreateError(message)
    return SandboxError(message)


def _sh(script: str, *args: str) -> str:
    """``sh -c script`` with positional arguments, quoted for any POSIX-ish login shell."""
    return " ".join(shlex.quote(a) for a in ("sh", "-c", script, "rb", *args))


def _parse_exec(text: str, exit_code: int | None, cap: int, duration: float) -> ExecResult:
    # Shells may report a killed job on the merged output before the header line.
    at = text.find("RB ") if text.startswith("RB ") else text.find("\nRB ") + 1
    head, _, rest = text[at:].partition("\n") if at >= 0 else ("", "", "")
    fields = head.split()
    if len(fields) != 5 or fields[0] != "RB":
        # The wrapper itself failed (no `sh`, `base64` or `head` in the image): say so.
        raise SandboxError(f"exec wrapper failed (exit {exit_code}): {text[-500:]!r}")
    rc, timed_out, out_len, err_len = (int(f) for f in fields[1:])
    out_b64, _, err_b64 = rest.partition("RB-SEP\n")
    stdout = base64.b64decode("".join(out_b64.split()))
    stderr = base64.b64decode("".join(err_b64.split()))
    return ExecResult(
        exit_code=rc,
        stdout=stdout.decode("utf-8", "replace"),
        stderr=stderr.decode("utf-8", "replace"),
        timed_out=bool(timed_out),
        duration_sec=duration,
        truncated_bytes=max(0, out_len - cap) + max(0, err_len - cap),
    )


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _tar_dir(local_dir: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        # Children only: the root entry would impose local_dir's mode on the sandbox directory.
        for child in sorted(local_dir.iterdir()):
            tar.add(child, arcname=child.name, filter=_root_owned)
    return buf.getvalue()


def _tar_file(data: bytes, name: str, mode: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = _root_owned(tarfile.TarInfo(name))
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def extract_capped(data: bytes, dest: Path, max_bytes: int) -> int:
    """Extract the regular files and directories of a tar archive into ``dest``, at most
    ``max_bytes`` of file content in all; return the bytes written. Links and devices are
    skipped; an entry whose name leaves ``dest`` raises :class:`ArchiveEscapeError`. A
    truncated archive (the sandbox side caps what it sends) ends the extraction quietly."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    written = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tar:
            for member in tar:
                rel = PurePosixPath(member.name)
                if rel.is_absolute() or ".." in rel.parts:
                    raise ArchiveEscapeError(f"archive entry {member.name!r} leaves {dest}")
                parts = [p for p in rel.parts if p != "."]
                if not parts:
                    continue
                target = root.joinpath(*parts)
                if not target.resolve().is_relative_to(root):
                    raise ArchiveEscapeError(f"archive entry {member.name!r} leaves {dest}")
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    continue
                budget = max_bytes - written
                if budget <= 0:
                    break
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                chunk = handle.read(min(budget, member.size))
                target.write_bytes(chunk)
                written += len(chunk)
    except (tarfile.ReadError, EOFError) as exc:
        if written == 0 and not data:
            return 0
        log.debug("archive ended early (capped on the sandbox side): %s", exc)
    return written


sandboxes.register("daytona", DaytonaBackend)
