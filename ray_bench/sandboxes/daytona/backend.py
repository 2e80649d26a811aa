"""The backend: an SDK client per event loop (the API key read from its credential route), the
create parameters that carry the safety net, create with its clean-up on failure or
cancellation, and delete, list and remove."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from daytona import (
    AsyncDaytona,
    AsyncSandbox,
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    DaytonaConfig,
    DaytonaError,
    DaytonaNotFoundError,
    ListSandboxesQuery,
)
from daytona import Resources as DaytonaResources
from daytona.common.snapshot import Snapshot

from ray_bench.errors import (
    SandboxCreateError,
    SandboxDeleteRefusedError,
    SandboxError,
    SandboxGoneError,
    SandboxQuotaError,
    SandboxRateLimitedError,
    SandboxTooLargeError,
    SandboxUnavailableError,
)
from ray_bench.models.build import SNAPSHOT_PREFIX
from ray_bench.sandboxes.base import Sandbox, SandboxBackend, SandboxRef, SandboxSpec
from ray_bench.sandboxes.daytona.clients import ClientPool
from ray_bench.sandboxes.daytona.create import create_once
from ray_bench.sandboxes.daytona.harness import harness_image
from ray_bench.sandboxes.daytona.ratelimit import call_with_retries
from ray_bench.sandboxes.daytona.reaper import Reaper
from ray_bench.sandboxes.daytona.sandbox import DaytonaSandbox
from ray_bench.sandboxes.daytona.translate import GONE_STATES, state_name, translate
from ray_bench.sandboxes.daytona_lists import split_networks
from ray_bench.sandboxes.daytona_pool import DaytonaPool

T = TypeVar("T")
log = logging.getLogger(__name__)

#: A one-off label per create call, so that a create that failed or was cancelled after the
#: server made the sandbox can still find and delete it.
LABEL_CREATE = "ray-bench.create"
#: A reaper's longest wait between two DELETEs.
REAP_MAX_DELAY_SEC = 30.0
#: How long a reaper keeps trying a sandbox that reports no TTL (a build may take an hour).
REAP_FALLBACK_SEC = 75 * 60.0
#: A stop's bound. A stop (a signal, ``pause --now``) cancels the cells coming up: each waits
#: ``cancel_grace`` (10 s) for its create, asks the delete of what it made for at most
#: ``STOP_DELETE_SEC`` and hands a refusal (409: a pull or a build still under way, up to an hour)
#: to the reaper; the end-of-run cleanup then waits at most ``REMOVE_WAIT_SEC`` per sandbox it
#: still finds refusing, and ``close`` as long for every reaper. What is still refused after
#: that is left to its TTL (``ttlMinutes``: the service destroys it) and to ``audit --cleanup``,
#: which asks again and lists it as a pending delete. Issue 53: SIGTERM during a 60 s build exited
#: after 105 s (each refused delete was asked for ``delete_timeout``, 180 s), and a stuck
#: 60-minute build held ``execute`` or ``audit --cleanup`` for up to an hour.
STOP_DELETE_SEC = 5.0
REMOVE_WAIT_SEC = 20.0


def lifetime_minutes(lifetime_sec: float) -> int:
    """Whole minutes covering ``lifetime_sec`` (at least 1: Daytona reads 0 as "disabled")."""
    return max(1, math.ceil(lifetime_sec / 60))


def kept_lists(params: CreateSandboxFromImageParams | CreateSandboxFromSnapshotParams, made: AsyncSandbox) -> None:
    """Raise when the sandbox does not hold the allow lists its create asked for: an API from before
    ``domainAllowList`` (daytonaio/daytona f250f7d39) drops the field and would run it open, so the
    create fails (and is swept) instead. The API stores the lists as sent (``resolveDomainAllowList``)."""
    for field, what in (("network_allow_list", "networkAllowList"), ("domain_allow_list", "domainAllowList")):
        asked = getattr(params, field)
        if asked and getattr(made, field, None) != asked:
            raise SandboxCreateError(f"Daytona sandbox {made.id} does not hold the {what} its create asked for "
                                     f"({asked}): this Daytona API does not enforce it, so it is not used")


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
        call_timeout: float = 60.0,
        transfer_timeout: float = 300.0,
        delete_timeout: float = 180.0,
        stop_delete_sec: float = STOP_DELETE_SEC,
        remove_wait_sec: float = REMOVE_WAIT_SEC,
        pool: DaytonaPool | Mapping[str, Any] | None = None,
        live_poll_sec: float = 5.0,
        connection_pool: int = 250,
        sandboxes_per_client: int | None = None,
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
        #: Seconds any one API call may take (the SDK sets none on get and list).
        self.call_timeout = call_timeout
        #: Seconds a file upload or download may take.
        self.transfer_timeout = transfer_timeout
        #: Seconds a delete may take to reach ``destroyed``.
        self.delete_timeout = delete_timeout
        #: Seconds the delete of what a cancelled or failed create made is asked before a
        #: refusal (409: still coming up) goes to the reaper (see :data:`STOP_DELETE_SEC`).
        self.stop_delete_sec = stop_delete_sec
        #: Seconds ``remove`` (the audit, the end-of-run cleanup) and ``close`` wait for deletes
        #: still refused (see :data:`REMOVE_WAIT_SEC`).
        self.remove_wait_sec = remove_wait_sec
        #: Seconds between reads of a watched command's output (one toolbox call each; see
        #: DaytonaSandbox.exec for why the output is polled rather than streamed).
        self.live_poll_sec = live_poll_sec
        self.pool = DaytonaPool.model_validate(pool) if pool is not None else None
        #: 429s seen and waited out, for metrics and tests.
        self.rate_limited_waits = 0
        #: The SDK's ``connection_pool_maxsize`` of each client.
        self.connection_pool = connection_pool
        #: Sandboxes one client carries: at most half its pool (an exec and a watch's poll each).
        self.sandboxes_per_client = sandboxes_per_client or max(1, connection_pool // 2)
        self._pools: dict[asyncio.AbstractEventLoop, ClientPool] = {}
        self._snapshot_sizes: dict[str, Snapshot] = {}
        #: Deletes the API refuses while a sandbox comes up, kept trying until its TTL.
        self.reaper = Reaper(self.delete_id)

    # ------------------------------------------------------------------ client

    def clients(self) -> ClientPool:
        """The SDK clients of the running event loop (their HTTP sessions are bound to a loop)."""
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            for old in [lp for lp in self._pools if lp.is_closed()]:
                del self._pools[old]
            pool = self._pools[loop] = ClientPool(self._make_client, self.sandboxes_per_client)
        return pool

    def client(self) -> AsyncDaytona:
        """The client for control calls (get, list, delete) on the running event loop."""
        return self.clients().control()

    def _make_client(self) -> AsyncDaytona:
        key = os.environ.get(self.api_key_env)
        if not key:
            raise SandboxUnavailableError(
                f"the daytona backend's credential route {self.api_key_env} is not set "
                "on this node"
            )
        url = self.api_url or os.environ.get(self.api_url_env) or None
        try:
            return AsyncDaytona(DaytonaConfig(api_key=key, api_url=url, target=self.target,
                                              connection_pool_maxsize=self.connection_pool))
        except DaytonaError as exc:
            raise SandboxUnavailableError(
                f"cannot configure the Daytona client: {exc.message}"
            ) from exc

    async def close(self) -> None:
        # Deletes still refused for now outlive no run: the reapers finish first (each bounded
        # by its sandbox's TTL).
        left = await self.reaper.drain(self.remove_wait_sec)
        if left:
            log.warning("Daytona sandboxes %s still refuse deletion (coming up): left to their TTL and to "
                        "`ray-bench audit --cleanup`", ", ".join(left))
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close()

    # ------------------------------------------------------------------ calls

    async def retrying(
        self,
        what: str,
        fn: Callable[[], Awaitable[T]],
        *,
        server_retries: bool = True,
        timeout: float | None = None,
    ) -> T:
        """Run one SDK call, waiting out 429s (by their headers) and, when ``server_retries``,
        brief 5xx spells; every try is bounded by ``timeout`` (default: ``call_timeout``)."""
        return await call_with_retries(
            what,
            fn,
            max_rate_limit_retries=self.max_rate_limit_retries,
            max_retry_after=self.max_retry_after,
            max_server_retries=self.max_server_retries if server_retries else 0,
            on_rate_limited=self._count_rate_limited,
            timeout=timeout if timeout is not None else self.call_timeout,
        )

    def _count_rate_limited(self) -> None:
        self.rate_limited_waits += 1

    async def lookup(self, id_or_name: str) -> AsyncSandbox | None:
        """The sandbox by id or name, or ``None`` when the API says it does not exist."""
        try:
            return await self.retrying(
                f"get {id_or_name}", lambda: self.client().get(id_or_name)
            )
        except DaytonaNotFoundError:
            return None
        except DaytonaError as exc:
            raise translate(exc, f"get {id_or_name}") from exc

    async def raise_if_gone(self, sandbox_id: str, cause: BaseException) -> None:
        """Raise :class:`SandboxGoneError` when the sandbox no longer exists or runs."""
        try:
            sandbox = await self.lookup(sandbox_id)
        except SandboxError:
            return
        if sandbox is None:
            raise SandboxGoneError(f"Daytona sandbox {sandbox_id} no longer exists") from cause
        state = state_name(sandbox.state)
        if state in GONE_STATES or state_name(getattr(sandbox, "desired_state", None)) == "destroyed":
            reason = f": {sandbox.error_reason}" if sandbox.error_reason else ""
            raise SandboxGoneError(f"Daytona sandbox {sandbox_id} is {state}{reason}") from cause

    # ------------------------------------------------------------------ create

    def params(
        self, spec: SandboxSpec, labels: Mapping[str, str], name: str | None = None
    ) -> CreateSandboxFromImageParams | CreateSandboxFromSnapshotParams:
        """The SDK's create parameters for ``spec`` (public so tests can check the safety net)."""
        minutes = lifetime_minutes(spec.lifetime_sec)
        networks, domains = split_networks(spec.allowlist or ())
        common: dict[str, Any] = {
            "name": name,
            "labels": dict(labels),
            "env_vars": dict(spec.env),
            "os_user": self.os_user,
            # An empty allowlist reaches nothing: blocked, as an empty networkAllowList would not be
            "network_block_all": not spec.network or spec.allowlist == (),
            # Daytona's networkAllowList (comma-separated IPv4 CIDRs) and domainAllowList (names,
            # `*.suffix`), set at create (daytona SDK common/daytona.py CreateSandboxBaseParams;
            # daytonaio/daytona apps/api/src/sandbox/services/sandbox.service.ts, create)
            "network_allow_list": ",".join(networks) or None,
            "domain_allow_list": ",".join(domains) or None,
            # Idle-based stop after the lifetime, delete on stop, and a wall-clock cap on top:
            # a driver that died mid-cell leaves a sandbox for at most lifetime + margin.
            "auto_stop_interval": minutes,
            "auto_delete_interval": self.delete_after_stop_min,
            # The TTL counts from the create: the create (a pull, a build) is in it too.
            "ttl_minutes": lifetime_minutes(spec.lifetime_sec + self.create_timeout) + self.ttl_margin_min,
        }
        image = spec.image
        if image is None and spec.dockerfile_dir is None:
            if self.image is not None:
                image = self.image
            else:  # the backend's snapshot, else the organisation's default snapshot
                return CreateSandboxFromSnapshotParams(snapshot=self.snapshot, **common)
        if image is not None and image.startswith(SNAPSHOT_PREFIX):
            return CreateSandboxFromSnapshotParams(snapshot=image[len(SNAPSHOT_PREFIX) :], **common)
        source = harness_image(image, spec.dockerfile_dir)
        res = spec.resources
        resources = DaytonaResources(
            cpu=math.ceil(res.cpus) if res.cpus else None,
            memory=math.ceil(res.memory_mb / 1024) if res.memory_mb else None,
            disk=math.ceil(res.disk_mb / 1024) if res.disk_mb else None,
        )
        return CreateSandboxFromImageParams(image=source, resources=resources, **common)

    async def create(self, spec: SandboxSpec) -> Sandbox:
        token = uuid.uuid4().hex
        # The name is unique in the organisation: a POST repeated by anyone for this attempt
        # answers 409 instead of making a second sandbox, and the sandbox can be found by it.
        name = f"rb-{token}"
        params = self.params(spec, {**spec.labels, LABEL_CREATE: token}, name=name)
        if isinstance(params, CreateSandboxFromSnapshotParams) and params.snapshot:
            await self.check_snapshot(params.snapshot, spec)
        task = asyncio.ensure_future(self._create_and_probe(params, name, spec))
        try:
            made = await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.shield(self._undo_create(task, name, token))
            raise
        except (SandboxRateLimitedError, SandboxQuotaError, SandboxTooLargeError):
            raise  # refused before anything was made
        except BaseException:
            await asyncio.shield(self._sweep(name, token))
            raise
        return made

    async def check_snapshot(self, snapshot: str, spec: SandboxSpec) -> None:
        """A create from a snapshot takes the snapshot's size (the API takes no resources with
        it): refuse one that does not exist or is smaller than the spec asks, never use it."""
        found = self._snapshot_sizes.get(snapshot)
        if found is None:  # read once per backend: a snapshot's size does not change
            try:
                found = await self.retrying(f"get snapshot {snapshot}", lambda: self.client().snapshot.get(snapshot))
            except DaytonaNotFoundError as exc:
                raise SandboxCreateError(f"Daytona snapshot {snapshot!r} does not exist") from exc
            except DaytonaError as exc:
                raise translate(exc, f"get snapshot {snapshot}") from exc
            self._snapshot_sizes[snapshot] = found
        res = spec.resources
        asked = {"vCPU": math.ceil(res.cpus) if res.cpus else 0,
                 "GiB memory": math.ceil(res.memory_mb / 1024) if res.memory_mb else 0,
                 "GiB disk": math.ceil(res.disk_mb / 1024) if res.disk_mb else 0}
        has = {"vCPU": found.cpu, "GiB memory": found.mem, "GiB disk": found.disk}
        short = [f"{asked[k]} {k} (it has {has[k]:g})" for k in asked if asked[k] > has[k]]
        if short:
            raise SandboxCreateError(f"Daytona snapshot {snapshot!r} is smaller than the task asks: "
                                     + ", ".join(short))

    async def _create_and_probe(
        self,
        params: CreateSandboxFromImageParams | CreateSandboxFromSnapshotParams,
        name: str,
        spec: SandboxSpec,
    ) -> DaytonaSandbox:
        """The started sandbox, with its user asked of the sandbox itself: the API reports
        ``daytona`` for every create that names no user, whatever the image runs as."""
        lease = self.clients().lease()
        try:
            made = await create_once(self, params, name, lease.client)
            kept_lists(params, made)
            sandbox = DaytonaSandbox(self, made, spec, lease)
            await sandbox.probe_user()
        except BaseException:
            lease.release()
            raise
        return sandbox

    async def _undo_create(self, task: asyncio.Future[DaytonaSandbox], name: str, token: str) -> None:
        done, _ = await asyncio.wait({task}, timeout=self.cancel_grace)
        if not done:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        elif not task.cancelled() and task.exception() is None:
            with contextlib.suppress(Exception):
                await task.result().delete()
        await self._sweep(name, token)

    async def _sweep(self, name: str, token: str) -> None:
        """Delete what a failed create made: by its name (consistent), then by its label (the
        listing may lag)."""
        patience = min(self.stop_delete_sec, self.delete_timeout)
        try:
            found = await self.lookup(name)
            if found is not None:
                await self.delete(found.id, wait=False, patience=patience)
            for ref in await self.list({LABEL_CREATE: token}):
                if not ref.removing:
                    await self.delete(ref.id, wait=False, patience=patience)
        except Exception as exc:  # the auto-delete safety net still stands behind this
            log.warning(
                "could not sweep a failed Daytona create (%s): %s", name, type(exc).__name__
            )

    # ------------------------------------------------------------------ delete, list

    async def delete(self, sandbox_id: str, *, wait: bool, patience: float | None = None) -> None:
        """Delete one sandbox; one the API refuses for now (409 through ``patience``, else
        ``delete_timeout``: it is still coming up) goes to the :class:`Reaper`, awaited when
        ``wait`` (the audit, the end-of-run cleanup) for at most :attr:`remove_wait_sec`, past
        which :class:`SandboxDeleteRefusedError` says so; else left to run (a cell does not wait
        out an hour-long build)."""
        began = time.monotonic()
        if sandbox_id not in self.reaper:
            try:
                await self.delete_id(sandbox_id, patience=patience)
                return
            except SandboxDeleteRefusedError as exc:
                log.info("Daytona sandbox %s refuses deletion while it comes up: reaping", sandbox_id)
                self.reaper.hand(sandbox_id, exc.until)
        if wait:
            left = max(0.0, self.remove_wait_sec - (time.monotonic() - began))
            try:
                await asyncio.wait_for(asyncio.shield(self.reaper.wait(sandbox_id)), left)
            except TimeoutError:
                until = self.reaper.until.get(sandbox_id)
                raise SandboxDeleteRefusedError(
                    f"Daytona sandbox {sandbox_id} still refuses deletion (coming up) after "
                    f"{self.remove_wait_sec:g}s: its deletion is asked again until its TTL destroys it",
                    until=until if until is not None else time.monotonic() + REAP_FALLBACK_SEC) from None

    async def delete_id(self, sandbox_id: str, until: float | None = None, patience: float | None = None) -> None:
        """Delete one sandbox and wait until the API says it is ``destroyed`` or gone: at most
        ``delete_timeout``, or until ``until`` (monotonic) for the reaper. Deletion is
        asynchronous in Daytona: a DELETE while a state change is pending (a bring-up, an
        earlier DELETE) answers 409, which means "ask again". Still refused at the deadline:
        :class:`SandboxDeleteRefusedError`, carrying when the sandbox's TTL destroys it anyway."""
        hurried = patience is not None  # a stop's or an audit's bound: an accepted DELETE will do
        patience = self.delete_timeout if patience is None else patience
        deadline = until if until is not None else time.monotonic() + patience
        requested = refused = False
        delay = 0.2
        while True:
            sandbox = await self.lookup(sandbox_id)
            if sandbox is None or state_name(sandbox.state) == "destroyed":
                return
            being_destroyed = state_name(sandbox.state) == "destroying" or (
                state_name(getattr(sandbox, "desired_state", None)) == "destroyed"
            )
            if not requested and not being_destroyed:
                try:
                    await self.retrying(f"delete {sandbox_id}", partial(sandbox.delete, self.call_timeout))
                    requested = True
                except DaytonaNotFoundError:
                    return
                except DaytonaError as exc:
                    if exc.status_code != 409:  # 409: a state change is under way; ask again
                        raise translate(exc, f"delete {sandbox_id}") from exc
                    refused = True
            if time.monotonic() >= deadline:
                if hurried and requested and until is None:
                    return  # accepted: the service destroys it (listed as being removed meanwhile)
                what = f"delete {sandbox_id}: still {state_name(sandbox.state)}"
                if until is not None:
                    raise SandboxError(f"{what} at its TTL")
                if refused and not requested:
                    raise SandboxDeleteRefusedError(f"{what} after {patience:g}s of 409s",
                                                    until=self._ttl_deadline(sandbox))
                raise SandboxError(f"{what} after {patience:g}s")
            await asyncio.sleep(delay * (1 + 0.2 * random.random()))
            # The first minutes closely; a reaper then backs off to every 30 s.
            delay = min(delay * 1.5, 2.0 if until is None else REAP_MAX_DELAY_SEC)

    def _ttl_deadline(self, sandbox: AsyncSandbox) -> float:
        """When (monotonic) the service destroys ``sandbox`` by its TTL (``autoDestroyAt``);
        without one, :data:`REAP_FALLBACK_SEC` from now (a build may take an hour)."""
        left = REAP_FALLBACK_SEC
        raw = getattr(sandbox, "auto_destroy_at", None)
        if raw:
            with contextlib.suppress(ValueError):
                at = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
                left = (at - datetime.now(UTC)).total_seconds() + 60
        return time.monotonic() + max(left, self.delete_timeout)

    async def list(self, labels: Mapping[str, str]) -> list[SandboxRef]:
        async def page() -> list[SandboxRef]:
            query = ListSandboxesQuery(labels=dict(labels))
            return [
                SandboxRef(
                    self.name,
                    sb.id,
                    dict(sb.labels),
                    state=state_name(sb.state),
                    removing=state_name(sb.state) == "destroying"
                    or state_name(getattr(sb, "desired_state", None)) == "destroyed"
                    or sb.id in self.reaper,
                )
                async for sb in self.client().list(query)
                if state_name(sb.state) != "destroyed"
            ]

        try:
            return await self.retrying("list", page)
        except DaytonaError as exc:
            raise translate(exc, "list") from exc

    async def remove(self, ref: SandboxRef) -> None:
        task = asyncio.ensure_future(self.delete(ref.id, wait=True, patience=self.remove_wait_sec))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await task
            raise
