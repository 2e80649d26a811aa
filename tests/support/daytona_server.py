"""A local server that speaks the part of the Daytona API the ``daytona`` SDK uses, backed by
real Docker containers, so the real SDK (and the ``daytona`` backend on top of it) runs against
it with no cloud account.

Main API under ``{url}/api``: ``POST /sandbox``, ``GET /sandbox/{id}``, ``GET /sandbox``
(``labels`` JSON filter, cursor pages of 100), ``DELETE /sandbox/{id}``,
``GET /sandbox/{id}/toolbox-proxy-url``, ``GET /snapshots/{name}``. The toolbox under ``{url}/toolbox/{id}``:
``POST /process/execute``, ``POST /files/bulk-upload`` (multipart), ``POST /files/bulk-download``
(answered as multipart). The SDK's Socket.IO event stream gets a 404; the SDK falls back to
polling ``GET /sandbox/{id}``.

Behaviours of the real API (``apps/api`` of daytonaio/daytona, last public release) it keeps:

- ``DELETE`` is asynchronous: the sandbox keeps its state with ``desiredState: destroyed`` for a
  moment, then goes ``destroying``, then ``destroyed`` (then 404). A ``DELETE`` while the state
  differs from the desired state (a bring-up not yet ``started``, a delete under way; not
  ``pending_build``, ``error`` or ``build_failed``) answers **409** "Sandbox state change in
  progress".
- Listing by labels is eventually consistent (:attr:`Faults.list_lag_sec`): a new sandbox shows up
  late, a destroyed one lingers as ``destroying``.
- A create is ``unknown`` in the POST's answer (for :attr:`Faults.unknown_sec`, DELETE 409), then
  ``pending_build`` / ``building_snapshot`` (a Dockerfile build, really built on the local Docker,
  logs at ``build-logs-url``) or ``pulling_snapshot`` (:attr:`Faults.pull_sec` the first time a
  runner meets the snapshot), then ``creating``, then ``started`` -- or ``build_failed`` / ``error``.
- Names are unique per organisation: a second create with a name in use answers 409; ``GET
  /sandbox/{name}`` finds a sandbox by name.
- ``networkAllowList`` and ``domainAllowList`` are validated as ``validateNetworkAllowList`` and
  ``validateDomainAllowList`` do (``apps/api/src/sandbox/utils/network-validation.util.ts``: IPv4
  CIDRs, prefix 0-32, at most 10 networks; domain names, optionally ``*.``-prefixed, at most 10;
  400 with their messages) and enforced on the container: its network namespace gets OUTPUT rules
  (``nsenter`` + ``iptables`` on the host, as Daytona's runner firewalls a sandbox's traffic, not
  the sandbox) that reject all but loopback, the listed networks and the addresses of the listed
  domains; a container the rules cannot be set on goes to ``error``, never left open. Domains
  resolve through :attr:`DaytonaServer.dns` (written into each container's ``/etc/hosts``): an
  entry ``name`` admits that name's address, ``*.suffix`` the addresses of the names below it; a
  listed name not in it admits nothing (its lookup is rejected like any other traffic). The rules
  are per address: two names at one address are one host to them.
  ``POST /sandbox/{id}/network-settings`` changes them on a running sandbox as
  ``SandboxService.updateNetworkSettings`` does (``networkBlockAll`` is a rule that rejects all
  but loopback, so it can be lifted).
- Organisation quotas (:attr:`Faults.quota_vcpu`, ``quota_memory_gib``, ``quota_disk_gib``)
  answer 400 "Total CPU limit exceeded. Maximum allowed: N." when a create would pass them; the
  per-sandbox limits (:attr:`Faults.max_cpu_per_sandbox`, ...) answer 403 "CPU request 8 exceeds
  maximum allowed per sandbox (4)." first. A sandbox's disk is enforced where
  :attr:`Faults.disk_paths` say (ENOSPC past it).
- Every sandbox is reported with ``user: daytona`` unless its create names a user, image and
  snapshot creates alike, while its commands run as its image's own USER (Daytona's runner sets
  no user): the default snapshot's image (``default_image`` with ``USER 1000:1000``, like
  Daytona's ``daytona`` user, with its HOME and passwordless sudo) runs as uid 1000, an image
  that sets no USER runs as root. A command without ``cwd`` runs where the daemon starts: the
  image's WORKDIR, else the user's HOME.

Faults, set on :attr:`DaytonaServer.faults` at any time: 429s with ``Retry-After-<throttler>``
and ``X-RateLimit-*-<throttler>`` headers on a fraction of creates (or on every create) and of
every other route class (``sandbox-lifecycle`` for deletes, ``authenticated``), 403s, 5xx
answers, creates whose answer is lost after the sandbox was made, toolbox executes answered 502
after the command ran, or cut (502, or the connection closed) while it runs on, toolbox
executes timed out (408: injected without running them, or a command that outran its
request's ``timeout``, whose process group is then terminated as the daemon's is, and counted
in ``exec_timed_out``), slow creates and builds, slow deletes, and :meth:`DaytonaServer.vanish`,
which removes a sandbox's container behind the API's back.

Every container carries the sandbox's labels (under :data:`LABEL_PREFIX`) plus
:data:`MARKER_LABEL` (the server's id), so a test can verify zero residue with the Docker SDK
alone.

Run it for an operator::

    python -m tests.support.daytona_server --port 0 --image rbtest:bb
    # prints DAYTONA_API_URL=... and DAYTONA_API_KEY=... for `export`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import io
import json
import math
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import Any

import aiohttp
import docker
import docker.errors
import requests
from aiohttp import web

from ray_bench.sandboxes.docker.streams import exec_output

#: Networks one ``networkAllowList`` may hold, domains one ``domainAllowList`` may hold (10 each
#: since daytonaio/daytona d7b6b0e3b "increase network allow list limit to 10" and f250f7d39
#: "sandbox domain allow list").
MAX_ALLOWED_NETWORKS = 10
MAX_ALLOWED_DOMAINS = 10
#: ``validateDomainAllowList``'s ``domainRegex``: hostname labels, an alphabetic TLD, optionally a
#: leading ``*.``.
_DOMAIN = re.compile(r"(\*\.)?([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]{2,}")


def network_allow_list_error(allow: str) -> str | None:
    """``validateNetworkAllowList`` of daytonaio/daytona (``apps/api/src/sandbox/utils/
    network-validation.util.ts``): its messages, its order (each entry, then the count, which
    counts empty entries too)."""
    networks = [n.strip() for n in allow.split(",")]
    for network in networks:
        if not network:
            continue
        address, _, prefix = network.partition("/")
        if not _is_ipv4(address):
            return f'Invalid IP address: "{address}" in network "{network}". Must be a valid IPv4 address'
        if not prefix:
            return f'Invalid network format: "{network}". Missing CIDR prefix length (e.g., /24)'
        digits = re.match(r"\s*[+-]?\d+", prefix)  # parseInt: the leading integer, NaN passes the range check
        if digits is not None and not 0 <= int(digits.group()) <= 32:
            return f"Invalid CIDR prefix length: {network}. Prefix must be between 0 and 32"
    if len(networks) > MAX_ALLOWED_NETWORKS:
        return f"Network allow list cannot contain more than {MAX_ALLOWED_NETWORKS} networks"
    return None


def domain_allow_list_error(allow: str) -> str | None:
    """``validateDomainAllowList`` (same file): each entry against ``domainRegex``, then the count
    (empty entries counted)."""
    domains = [d.strip() for d in allow.split(",")]
    for domain in domains:
        if domain and not _DOMAIN.fullmatch(domain):
            return f'Invalid domain: "{domain}". Must be a valid domain name'
    if len(domains) > MAX_ALLOWED_DOMAINS:
        return f"Domain allow list cannot contain more than {MAX_ALLOWED_DOMAINS} domains"
    return None


def _is_ipv4(text: str) -> bool:
    """node's ``net.isIPv4``: four decimal parts 0-255, no leading zeros."""
    parts = text.split(".")
    return len(parts) == 4 and all(re.fullmatch(r"0|[1-9]\d{0,2}", p) and int(p) <= 255 for p in parts)


def domain_addresses(domains: str, dns: Mapping[str, str]) -> list[str]:
    """The addresses a ``domainAllowList`` admits: each listed name's, each ``*.suffix``'s names
    below the suffix (not the suffix itself), as ``dns`` resolves them."""
    out: list[str] = []
    for entry in (d.strip().lower() for d in domains.split(",")):
        if not entry:
            continue
        for name, address in ((n.lower(), a) for n, a in dns.items()):
            if (name.endswith(entry[1:]) if entry.startswith("*.") else name == entry) and address not in out:
                out.append(address)
    return out


def _firewall(container_id: str, client: Any, allow: str | None, domains: str | None, dns: Mapping[str, str],
              block_all: bool = False) -> None:
    """Only loopback, the allowed networks and the allowed domains' addresses out of the
    container's network namespace; the rest rejected (a connection fails at once). ``block_all``:
    loopback only. No list and no block: the rules are removed. Set from the host, so the sandbox
    cannot undo it; each call replaces the rules before it."""
    pid = client.api.inspect_container(container_id)["State"]["Pid"]
    rules = [["-F", "OUTPUT"]]
    if block_all or allow or domains:
        rules.append(["-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"])
        if not block_all:
            rules += [["-A", "OUTPUT", "-d", n.strip(), "-j", "ACCEPT"] for n in (allow or "").split(",") if n.strip()]
            rules += [["-A", "OUTPUT", "-d", a, "-j", "ACCEPT"] for a in domain_addresses(domains or "", dns)]
        rules.append(["-A", "OUTPUT", "-j", "REJECT"])
    for rule in rules:
        subprocess.run(["nsenter", "-t", str(pid), "-n", "iptables", *rule], check=True, capture_output=True,
                       timeout=30)

MARKER_LABEL = "ray-bench.fake-daytona"
SANDBOX_ID_LABEL = "ray-bench.fake-daytona.sandbox"
#: A sandbox's labels are on its container under this prefix, not verbatim: the ``docker``
#: backend lists and cleans up containers by the same ``ray-bench.*`` labels, and must not
#: take a (fake) Daytona sandbox for one of its own.
LABEL_PREFIX = "ray-bench.fake-daytona.label/"
#: Not a secret: the fake accepts only this key unless told otherwise.
DEFAULT_API_KEY = "fake-daytona-key"
#: The API's page of ``GET /sandbox`` (default and most).
LIST_PAGE = 100
#: At most this many toolbox commands run at once (one thread each): well above the sandboxes
#: one fixture serves, so a command never waits for another to finish.
COMMAND_THREADS = 2048
#: Seconds the daemon gives a timed-out command's process group between its SIGTERM and SIGKILL
#: (``terminationGracePeriod`` of the toolbox's ExecuteController).
EXEC_TERMINATION_GRACE_SEC = 5.0
#: The bucket of build contexts (the SDK's default, ``daytona-volume-builds``).
CONTEXT_BUCKET = "daytona-volume-builds"


@dataclass
class Faults:
    """What the server does wrong on purpose. Mutate freely while it runs."""

    #: Fraction of ``POST /sandbox`` answered 429 (``sandbox-create`` throttler).
    create_429_fraction: float = 0.0
    #: Every create is answered 429 (a create that stays limited).
    create_429_always: bool = False
    #: Seconds sent in ``Retry-After-sandbox-create``.
    retry_after_sec: float = 1.0
    #: Fraction of ``POST /sandbox`` answered with :attr:`error_status`.
    create_5xx_fraction: float = 0.0
    #: Fraction of every other API request answered with :attr:`error_status`.
    api_5xx_fraction: float = 0.0
    error_status: int = 503
    #: Seconds a new sandbox stays ``creating`` before its container starts.
    create_delay_sec: float = 0.0
    #: Seconds a build stays ``pending_build`` then ``building_snapshot`` (each).
    build_delay_sec: float = 0.0
    #: Seconds a runner takes to build an image it has not built in the last 24 (Daytona)
    #: hours: every image create is a declarative build (``FROM image``) cached per runner, so a
    #: new image costs one cold build on each runner a create lands on (0: instant).
    cold_build_sec: float = 0.0
    #: Fraction of creates that make the sandbox and then answer :attr:`error_status` (the
    #: gateway lost the answer).
    create_lost_fraction: float = 0.0
    #: Fraction of toolbox executes that run the command and then answer 502.
    exec_lost_fraction: float = 0.0
    #: Toolbox executes whose command contains this (when set) run, and are answered 502.
    exec_lost_match: str = ""
    #: Toolbox executes whose command contains this (when set) run, and the request is cut
    #: :attr:`exec_cut_after_sec` in while the command runs on, as a proxy in front of the daemon
    #: cuts it (the daemon does not stop the command): answered 502 (:attr:`exec_cut_how`
    #: ``"502"``) or the connection closed without an answer (``"reset"``).
    exec_cut_match: str = ""
    exec_cut_after_sec: float = 1.0
    exec_cut_how: str = "502"
    #: The first this many toolbox executes whose command contains :attr:`exec_timeout_match`
    #: are answered 408 "command execution timeout", as the daemon answers a command that
    #: outran its ``timeout`` (a loaded runner), without running them.
    exec_timeout_count: int = 0
    exec_timeout_match: str = ""
    #: Toolbox executes whose command contains :attr:`exec_refused_match` are refused, without
    #: running, with these statuses in turn (429 by the ``authenticated`` throttler with its
    #: headers, else that status), then run as usual.
    exec_refused: tuple[int, ...] = ()
    exec_refused_match: str = ""
    #: Toolbox executes whose command contains this (when set) run, and are answered with the
    #: first line of their output dropped: what a reader that read the answer's headers late lost
    #: (docker-py's, before this fixture read around it).
    exec_head_lost_match: str = ""
    #: Seconds a deleted sandbox keeps its state (desired ``destroyed``), then ``destroying``.
    delete_delay_sec: float = 0.2
    #: Seconds the label listing lags behind the truth.
    list_lag_sec: float = 0.0
    #: Organisation quotas (None: unlimited). Disk counts stopped sandboxes too, as Daytona's does.
    quota_vcpu: int | None = None
    quota_memory_gib: int | None = None
    quota_disk_gib: int | None = None
    #: The organisation's per-sandbox limits (``maxCpuPerSandbox``, ``maxMemoryPerSandbox``,
    #: ``maxDiskPerSandbox``; None: unlimited): a create asking more, from its own size or its
    #: snapshot's, is refused 403 before the quotas are counted (``validateOrganizationQuotas`` of
    #: ``apps/api/src/sandbox/services/sandbox.service.ts``: a ``ForbiddenException``).
    max_cpu_per_sandbox: int | None = None
    max_memory_per_sandbox: int | None = None
    max_disk_per_sandbox: int | None = None
    #: Seconds a new sandbox stays ``unknown`` (the row the API inserted with ``pending: true``,
    #: before the sandbox manager hands it to a runner; long when no runner has room). A DELETE
    #: meanwhile answers 409, as during the rest of the bring-up.
    unknown_sec: float = 0.0
    #: Seconds a runner takes to pull a snapshot it does not hold yet: the first sandbox of a
    #: snapshot on each runner waits this long in ``pulling_snapshot``, later ones on that runner
    #: start at once (each runner keeps its own ``SnapshotRunner`` row per snapshot ref,
    #: ``runner.service.ts`` ``getSnapshotRunner(runnerId, snapshotRef)``; a create lands on a
    #: random available runner, ``getRandomAvailableRunner``).
    pull_sec: float = 0.0
    #: The sandbox's disk enforced at these paths of its container (each a tmpfs of the
    #: sandbox's ``disk`` in :attr:`disk_gib_bytes` units): a write past it fails with ENOSPC,
    #: as on the real runner, whose container's rootfs has the sandbox's disk size. Not the
    #: whole rootfs: this host's overlay2 sits on ext4, and Docker's per-container size
    #: (``storage_opt size``) needs xfs with project quotas; a tmpfs is in memory, so off by
    #: default (500 sandboxes x 3 GiB). A tmpfs hides what the image has at its path.
    disk_paths: tuple[str, ...] = ()
    #: Bytes in one GiB of :attr:`disk_paths` (tests shrink it, as ``minute_sec`` for time).
    disk_gib_bytes: int = 1 << 30
    #: Fraction of every other authenticated request (get, list, delete, toolbox) answered 429 by
    #: its throttler (`sandbox-lifecycle` for a delete, `authenticated` for the rest).
    throttled_429_fraction: float = 0.0
    #: Every authenticated request is answered 403 with this message (a suspended organisation).
    forbidden_message: str | None = None
    #: Seconds in one of Daytona's minutes, for the lifecycle clock (auto-stop after
    #: ``autoStopInterval`` idle minutes, auto-delete ``autoDeleteInterval`` minutes after a
    #: stop, destroy ``ttlMinutes`` after the create): tests shrink it.
    minute_sec: float = 60.0
    #: Seed for the fault dice, so a run is reproducible.
    seed: int = 0


@dataclass
class _Box:
    id: str
    body: dict[str, Any]
    image: str
    container: str | None = None
    state: str = "unknown"
    error_reason: str | None = None
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    user: str = "root"
    #: A state change is under way (Daytona's ``pending``): a DELETE now answers 409.
    pending: bool = False
    desired: str = "started"
    made_mono: float = field(default_factory=time.monotonic)
    destroyed_mono: float | None = None
    build_log: list[str] = field(default_factory=list)
    building: bool = False
    #: The uid the container's processes run as (its image's USER, or the create's user).
    uid: int = 0
    #: Where the daemon starts, so where a command without ``cwd`` runs: the image's WORKDIR,
    #: else the user's HOME (``DAYTONA_USER_HOME_AS_WORKDIR``: ``apps/runner/pkg/docker/
    #: container_configs.go`` sets it when the image has no WORKDIR, ``apps/daemon/cmd/daemon/
    #: main.go`` then changes to ``os.UserHomeDir()``).
    start_dir: str | None = None
    #: Last toolbox activity, and commands running now (auto-stop counts idle time only).
    active_mono: float = field(default_factory=time.monotonic)
    busy: int = 0
    stopped_mono: float | None = None
    #: When its first toolbox request arrived, and when the fixture began serving it.
    first_call_mono: float | None = None
    first_served_mono: float | None = None


class DaytonaServer:
    """The fake. ``start()`` runs it in a daemon thread with its own event loop."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str = DEFAULT_API_KEY,
        snapshots: Mapping[str, str] | None = None,
        default_image: str | None = None,
        default_snapshot_user: str | None = "1000:1000",
        faults: Faults | None = None,
        docker_client: Any | None = None,
        runners: int = 1,
    ) -> None:
        self.host = host
        self.port = port
        self.api_key = api_key
        #: snapshot name -> local image, each ``active``; a create from a snapshot not listed (nor
        #: made by ``POST /snapshots``) answers 400 "Snapshot X not found...", as the API does.
        self.snapshots = dict(snapshots or {})
        #: Snapshots made through ``POST /snapshots``: name -> their DTO fields (state and all).
        self._made_snapshots: dict[str, dict[str, Any]] = {}
        #: The organisation's ``snapshotQuota`` (``DEFAULT_ORG_QUOTA_SNAPSHOT_QUOTA``, 30): a
        #: snapshot's create or activation past it is refused 400 (``SnapshotService.
        #: validateOrganizationQuotas``); snapshots building, pending, pulling or active count.
        self.snapshot_quota = 30
        #: Daytona's runners: each keeps its own build cache (build hash -> monotonic time built).
        self.runners = max(1, runners)
        self._runner_cache: list[dict[str, float]] = [{} for _ in range(self.runners)]
        self._runner_locks: dict[tuple[int, str], asyncio.Lock] = {}
        #: (runner, build hash) of every cold build, in order.
        self.cold_builds: list[tuple[int, str]] = []
        self.default_image = default_image
        #: snapshot name -> (vCPU, GiB memory, GiB disk); a snapshot not listed is 1/1/3, the
        #: size of Daytona's default snapshot. A sandbox made from a snapshot has its size.
        self.snapshot_sizes: dict[str, tuple[int, int, int]] = {}
        #: The most sandboxes one ``GET /sandbox`` page holds (tests lower it to see paging).
        self.list_page = LIST_PAGE
        #: The default snapshot's USER (Daytona's default snapshot runs as `daytona`, uid 1000):
        #: ``start()`` builds ``default_image`` with it; None serves ``default_image`` as it is.
        self.default_snapshot_user = default_snapshot_user
        self._default_snapshot: str | None = None
        self.faults = faults or Faults()
        #: Host name -> IPv4 address: what a sandbox's name lookups answer (its ``/etc/hosts``,
        #: written at create) and what a ``domainAllowList`` entry admits.
        self.dns: dict[str, str] = {}
        self.server_id = uuid.uuid4().hex[:12]
        #: Every ``POST /sandbox`` body received, in order (including refused ones).
        self.create_requests: list[dict[str, Any]] = []
        #: Per runner: snapshot name -> monotonic time its pull ended (:attr:`Faults.pull_sec`).
        self._runner_pulls: list[dict[str, float]] = [{} for _ in range(self.runners)]
        self._pull_locks: dict[tuple[int, str], asyncio.Lock] = {}
        self.counts: dict[str, int] = {
            "create_429": 0, "create_5xx": 0, "created": 0, "create_lost": 0, "create_409": 0,
            "quota_400": 0, "delete_409": 0, "exec_lost": 0, "exec_timeout": 0, "exec_timed_out": 0,
            "exec_head_lost": 0, "exec_cut": 0, "exec_refused": 0,
            "built": 0, "list_pages": 0,
            "throttled_429": 0,
            "ttl_destroyed": 0, "auto_stopped": 0, "cold_builds": 0, "warm_builds": 0,
            "snapshot_missing_400": 0, "snapshot_activated": 0, "snapshot_quota_400": 0, "snapshot_deleted": 0,
            "limit_403": 0, "cold_pulls": 0,
        }
        #: (sandbox id, command) of every toolbox execute that ran, in order.
        self.executions: list[tuple[str, str]] = []
        #: Seconds each toolbox request waited inside the fixture, from its arrival until it was
        #: served (a starved fixture shows here, not in the client's figures).
        self.toolbox_waits: list[float] = []
        #: Seconds each command waited for a thread to run it in.
        self.command_waits: list[float] = []
        self._boxes: dict[str, _Box] = {}
        self._lock = threading.RLock()  # the quota check runs under it too (_create)
        #: One die per kind of fault (and one for placing builds on runners), each seeded from
        #: the faults' seed: concurrent requests interleave their rolls in any order, so a shared
        #: die would give each kind a different share of its draws from run to run.
        self._dice: dict[str, random.Random] = {}
        self._dice_for = self.faults
        self._timeouts_for, self._timeouts_left = self.faults, self.faults.exec_timeout_count
        self._docker = docker_client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: Threads for toolbox commands, one per running command, and for the state check before
        #: every toolbox call (threads start only as needed).
        self._commands = ThreadPoolExecutor(max_workers=COMMAND_THREADS, thread_name_prefix="fake-daytona-cmd")
        #: The organisation's object storage (Daytona's S3 bucket for build contexts): object
        #: key ("<org>/<context hash>/context.tar") -> bytes, and multipart uploads under way.
        self.objects: dict[str, bytes] = {}
        self._multipart: dict[str, dict[int, bytes]] = {}
        #: Dockerfile content hash -> the image built from it, and a lock per hash.
        self._built: dict[str, str] = {}
        self._build_locks: dict[str, asyncio.Lock] = {}

    # ---------------------------------------------------------------- lifecycle

    @property
    def docker(self) -> Any:
        if self._docker is None:
            self._docker = docker.from_env()
        return self._docker

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.url}/api"

    def env(self) -> dict[str, str]:
        """The environment that points the SDK (and the backend) at this server."""
        return {"DAYTONA_API_URL": self.api_url, "DAYTONA_API_KEY": self.api_key}

    def start(self) -> DaytonaServer:
        if self.port == 0:
            with socket.socket() as sock:
                sock.bind((self.host, 0))
                self.port = sock.getsockname()[1]
        if self.default_image:
            self._default_snapshot = self.default_image
            if self.default_snapshot_user:
                self._default_snapshot = f"fake-daytona-default:{self.server_id}"
                self.docker.images.build(fileobj=default_snapshot_context(self.default_image,
                                                                          self.default_snapshot_user),
                                         custom_context=True, tag=self._default_snapshot, rm=True,
                                         labels={MARKER_LABEL: self.server_id})
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            # Docker calls run in threads: the default pool (6 threads on 2 cores) queued 200
            # sandboxes' execs and uploads behind each other for minutes. Short calls share 64
            # threads; a command gets a thread of its own (``_commands``), as the service runs
            # every sandbox's commands at once: with commands in the shared pool, 64 agents'
            # long execs held all of it and every other toolbox call queued behind them (at 500
            # sandboxes, first calls waited past the 12-minute auto-stop interval).
            loop.set_default_executor(ThreadPoolExecutor(max_workers=64, thread_name_prefix="fake-daytona"))
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # pragma: no cover - reported to start()
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-daytona", daemon=True)
        self._thread.start()
        ready.wait(30)
        if errors:
            raise errors[0]
        return self

    async def _serve(self) -> None:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_post("/api/sandbox", self._create)
        app.router.add_get("/api/sandbox", self._list)
        app.router.add_get("/api/sandbox/{id}", self._get)
        app.router.add_delete("/api/sandbox/{id}", self._delete)
        app.router.add_get("/api/sandbox/{id}/toolbox-proxy-url", self._proxy_url)
        app.router.add_post("/api/sandbox/{id}/network-settings", self._network_settings)
        app.router.add_get("/api/snapshots/{name}", self._snapshot)
        app.router.add_post("/api/snapshots", self._create_snapshot)
        app.router.add_post("/api/snapshots/{id}/activate", self._activate_snapshot)
        app.router.add_get("/api/snapshots", self._list_snapshots)
        app.router.add_delete("/api/snapshots/{id}", self._delete_snapshot)
        app.router.add_get("/api/sandbox/{id}/build-logs-url", self._build_logs_url)
        app.router.add_get("/sandboxes/{id}/build-logs", self._build_logs)
        app.router.add_get("/api/object-storage/push-access", self._push_access)
        app.router.add_route("*", "/s3/{bucket}/{key:.+}", self._s3)
        app.router.add_post("/toolbox/{id}/process/execute", self._execute)
        app.router.add_post("/toolbox/{id}/files/bulk-upload", self._upload)
        app.router.add_post("/toolbox/{id}/files/bulk-download", self._download)
        self._spawn(self._clock())
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()

    async def _shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self, *, remove_containers: bool = True) -> None:
        """Stop serving; by default also remove every container this server made."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
        self._commands.shutdown(wait=False, cancel_futures=True)
        if remove_containers:
            for container in self.containers():
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    container.remove(force=True, v=True)
            built = self.docker.images.list(filters={"label": f"{MARKER_LABEL}={self.server_id}"})
            for image in built:
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    self.docker.images.remove(image.id, force=True)

    def __enter__(self) -> DaytonaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- test hooks

    def containers(self) -> list[Any]:
        """Every container this server made that still exists (any state)."""
        return list(
            self.docker.containers.list(
                all=True, filters={"label": f"{MARKER_LABEL}={self.server_id}"}
            )
        )

    def vanish(self, sandbox_id: str) -> None:
        """Remove a sandbox's container behind the API's back (a node lost, an OOM reaper)."""
        box = self._boxes[sandbox_id]
        if box.container:
            with contextlib.suppress(docker.errors.NotFound):
                self.docker.containers.get(box.container).remove(force=True, v=True)

    def discard_leftovers(self) -> list[str]:
        """Destroy at once every sandbox not yet destroyed, containers and all, and return their
        ids: what one test left must not hold the organisation's quota against the next."""
        with self._lock:
            left = [b for b in self._boxes.values() if b.state != "destroyed"]
            for box in left:
                box.state = box.desired = "destroyed"
                box.pending, box.destroyed_mono = False, time.monotonic()
        for box in left:
            self._remove_container(box)
        return [b.id for b in left]

    def sandbox_ids(self) -> list[str]:
        with self._lock:
            return [b.id for b in self._boxes.values() if b.state != "destroyed"]

    def boxes(self) -> list[dict[str, Any]]:
        """Every sandbox ever made (destroyed ones too): id, name, labels, state, desired state."""
        with self._lock:
            return [{"id": b.id, "name": b.body.get("name"), "labels": dict(b.body.get("labels") or {}),
                     "state": b.state, "desired": b.desired, "made_mono": b.made_mono,
                     "first_call_mono": b.first_call_mono, "first_served_mono": b.first_served_mono}
                    for b in self._boxes.values()]

    # ---------------------------------------------------------------- helpers

    def _error(
        self, status: int, message: str, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        body = {
            "statusCode": status,
            "message": message,
            "code": _CODES.get(status, "ERROR"),
            "source": "DAYTONA_API",
        }
        return web.json_response(body, status=status, headers=dict(headers or {}))

    def _auth(self, request: web.Request) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._error(401, "Unauthorized")
        # Daytona's throttlers: `sandbox-create` (POST /sandbox, below), `sandbox-lifecycle`
        # (start, stop, delete) and `authenticated` (every other authenticated call).
        throttler = "sandbox-lifecycle" if request.method == "DELETE" else "authenticated"
        creating = request.method == "POST" and request.path.endswith("/api/sandbox")
        if not creating and self._roll(self.faults.throttled_429_fraction, "throttled_429"):
            self.counts["throttled_429"] += 1
            return self._rate_limited(throttler)
        if self.faults.forbidden_message is not None:
            return self._error(403, self.faults.forbidden_message)
        return None

    def _die(self, kind: str) -> random.Random:
        if self._dice_for is not self.faults:  # new faults, new dice: each plan replays alike
            self._dice, self._dice_for = {}, self.faults
        return self._dice.setdefault(kind, random.Random(f"{self.faults.seed}:{kind}"))

    def _roll(self, fraction: float, kind: str) -> bool:
        return fraction > 0 and self._die(kind).random() < fraction

    def _rate_limited(self, throttler: str) -> web.Response:
        retry = self.faults.retry_after_sec
        reset = max(1, round(retry))
        headers = {
            f"Retry-After-{throttler}": f"{retry:g}",
            f"X-RateLimit-Limit-{throttler}": "10",
            f"X-RateLimit-Remaining-{throttler}": "0",
            f"X-RateLimit-Reset-{throttler}": str(reset),
        }
        return self._error(429, "ThrottlerException: Too Many Requests", headers)

    def _dto(self, box: _Box) -> dict[str, Any]:
        body = box.body
        if body.get("snapshot"):  # a snapshot's sandbox has the snapshot's size
            cpu, mem, disk = self._snapshot_size(body["snapshot"])
            res = {"cpu": cpu, "memory": mem, "disk": disk}
        else:
            res = {"cpu": body.get("cpu") or 1, "memory": body.get("memory") or 1, "disk": body.get("disk") or 3}
        return {
            "id": box.id,
            "organizationId": "fake-org",
            "name": body.get("name") or box.id,
            "snapshot": body.get("snapshot"),
            "user": box.user,
            "env": body.get("env") or {},
            "labels": body.get("labels") or {},
            "public": bool(body.get("public", False)),
            "networkBlockAll": bool(body.get("networkBlockAll", False)),
            "networkAllowList": body.get("networkAllowList"),
            "domainAllowList": body.get("domainAllowList"),
            "kvm": False,
            "target": body.get("target") or "local",
            "gpu": 0,
            **res,
            "state": box.state,
            "desiredState": box.desired,
            "errorReason": box.error_reason,
            "autoStopInterval": body.get("autoStopInterval"),
            "autoArchiveInterval": body.get("autoArchiveInterval"),
            "autoDeleteInterval": body.get("autoDeleteInterval"),
            "autoDestroyAt": (datetime.fromisoformat(box.created_at) + timedelta(minutes=body["ttlMinutes"])
                              ).isoformat() if body.get("ttlMinutes") else None,
            "createdAt": box.created_at,
            "updatedAt": datetime.now(UTC).isoformat(),
            "toolboxProxyUrl": f"{self.url}/toolbox",
        }

    def _list_item(self, box: _Box) -> dict[str, Any]:
        dto = self._dto(box)
        for key in ("env", "kvm"):
            dto.pop(key)
        return dto

    def _refresh(self, box: _Box) -> None:
        """A started sandbox whose container is gone is in ``error`` (what a lost runner shows)."""
        if box.state != "started" or box.container is None or box.pending:
            return
        try:
            status = self.docker.containers.get(box.container).status
        except docker.errors.NotFound:
            box.state, box.error_reason = "error", "sandbox container no longer exists"
            return
        if status != "running":
            box.state, box.desired, box.error_reason = "stopped", "stopped", f"container {status}"

    def _snapshot_size(self, name: str) -> tuple[int, int, int]:
        made = self._made_snapshots.get(name)
        if made is not None:
            return int(made["cpu"]), int(made["mem"]), int(made["disk"])
        return self.snapshot_sizes.get(name, (1, 1, 3))

    def _snapshot_refusal(self, name: str) -> str | None:
        """``SandboxService.create``'s answer for a snapshot that is not there or not active."""
        made = self._made_snapshots.get(name) or next(
            (m for m in self._made_snapshots.values() if m["id"] == name), None)
        if made is not None:
            return None if made["state"] == "active" else f"Snapshot {name} is {made['state']}"
        if name in self.snapshots:
            return None
        return f"Snapshot {name} not found. Did you add it through the Daytona Dashboard?"

    def _image_for(self, body: Mapping[str, Any]) -> str:
        """The local image a snapshot-based create runs (a build's image is made later)."""
        snapshot = body.get("snapshot")
        if snapshot:
            made = self._made_snapshots.get(snapshot)
            if made is not None and made.get("localImage"):
                return str(made["localImage"])
            return self.snapshots.get(snapshot, snapshot)
        if self._default_snapshot:
            return self._default_snapshot
        raise ValueError("no snapshot or image given and the server has no default image")

    # ---------------------------------------------------------------- main API

    def _size_asked(self, body: Mapping[str, Any]) -> tuple[int, int, int]:
        """vCPU, GiB memory and GiB disk a create asks: a snapshot's own size (``createFromSnapshot``
        takes the snapshot's), else the body's, else Daytona's defaults (1, 1, 3)."""
        if body.get("snapshot") and not (body.get("buildInfo") or {}).get("dockerfileContent"):
            return self._snapshot_size(str(body["snapshot"]))
        return int(body.get("cpu") or 1), int(body.get("memory") or 1), int(body.get("disk") or 3)

    def _limit_refusal(self, body: Mapping[str, Any]) -> str | None:
        """The per-sandbox check at the head of ``validateOrganizationQuotas``
        (``apps/api/src/sandbox/services/sandbox.service.ts``), its text verbatim; answered 403."""
        f = self.faults
        cpu, memory, disk = self._size_asked(body)
        more = ("Need higher resource limits per-sandbox? Contact us at support@daytona.io and let us "
                "know about your use case.")  # PER_SANDBOX_LIMIT_MESSAGE (apps/api/src/common/constants)
        if f.max_cpu_per_sandbox is not None and cpu > f.max_cpu_per_sandbox:
            return f"CPU request {cpu} exceeds maximum allowed per sandbox ({f.max_cpu_per_sandbox}).\n{more}"
        if f.max_memory_per_sandbox is not None and memory > f.max_memory_per_sandbox:
            return (f"Memory request {memory}GB exceeds maximum allowed per sandbox "
                    f"({f.max_memory_per_sandbox}GB).\n{more}")
        if f.max_disk_per_sandbox is not None and disk > f.max_disk_per_sandbox:
            return f"Disk request {disk}GB exceeds maximum allowed per sandbox ({f.max_disk_per_sandbox}GB).\n{more}"
        return None

    def _quota_refusal(self, body: Mapping[str, Any]) -> str | None:
        """Daytona's organisation quota check (``SandboxService.validateOrganizationQuotas``)."""
        f = self.faults
        with self._lock:
            # Counted until the state changes: a sandbox being destroyed still holds its quota.
            live = [b for b in self._boxes.values() if b.state != "destroyed"]
        def total(key: str, default: int, boxes: list[_Box]) -> int:
            return sum(int(b.body.get(key) or default) for b in boxes)
        running = [b for b in live if b.state not in ("stopped", "archived", "error", "build_failed")]
        wants = {k: int(body.get(k) or d) for k, d in (("cpu", 1), ("memory", 1), ("disk", 3))}
        tier = "To increase concurrency limits, upgrade your organization's Tier by visiting the dashboard."
        if f.quota_vcpu is not None and total("cpu", 1, running) + wants["cpu"] > f.quota_vcpu:
            return f"Total CPU limit exceeded. Maximum allowed: {f.quota_vcpu}.\n{tier}"
        if f.quota_memory_gib is not None and total("memory", 1, running) + wants["memory"] > f.quota_memory_gib:
            return f"Total memory limit exceeded. Maximum allowed: {f.quota_memory_gib}GiB.\n{tier}"
        if f.quota_disk_gib is not None and total("disk", 3, live) + wants["disk"] > f.quota_disk_gib:
            return (f"Total disk limit exceeded. Maximum allowed: {f.quota_disk_gib}GiB.\n"
                    f"Consider archiving your unused sandboxes to free up available storage.\n{tier}")
        return None

    async def _create(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._auth(request)) is not None:
            return denied
        body = await request.json()
        self.create_requests.append(body)
        if self.faults.create_429_always or self._roll(self.faults.create_429_fraction, "create_429"):
            self.counts["create_429"] += 1
            return self._rate_limited("sandbox-create")
        if self._roll(self.faults.create_5xx_fraction, "create_5xx"):
            self.counts["create_5xx"] += 1
            return self._error(self.faults.error_status, "injected server error")
        if body.get("networkAllowList") and (invalid := network_allow_list_error(body["networkAllowList"])):
            return self._error(400, invalid)  # SandboxService.resolveNetworkAllowList: BadRequestError
        if body.get("domainAllowList") is not None and (invalid := domain_allow_list_error(body["domainAllowList"])):
            return self._error(400, invalid)  # resolveDomainAllowList, after the networks (SandboxService.create)
        name = body.get("name")
        with self._lock:
            taken = name is not None and any(
                b.body.get("name") == name and b.state != "destroyed" for b in self._boxes.values())
        if taken:
            self.counts["create_409"] += 1
            return self._error(409, f"Sandbox with name {name} already exists")
        build = body.get("buildInfo") or {}
        dockerfile = build.get("dockerfileContent")
        if (missing := self._missing_context(build)) is not None:
            return self._error(400, missing)
        image = ""
        snapshot = body.get("snapshot")
        if not dockerfile and snapshot and (refused := self._snapshot_refusal(snapshot)) is not None:
            self.counts["snapshot_missing_400"] += 1
            return self._error(400, refused)
        if not dockerfile and snapshot and (used := self._made_snapshots.get(snapshot)) is not None:
            used["lastUsedAt"] = datetime.now(UTC).isoformat()  # the API's SandboxCreatedEvent handler
        if not dockerfile:
            try:
                image = self._image_for(body)
                await asyncio.to_thread(self.docker.images.get, image)
            except (ValueError, docker.errors.ImageNotFound) as exc:
                return self._error(400, f"cannot create sandbox: {exc}")
        # The API records `daytona` unless the create names a user (image and snapshot creates
        # alike), while the runner sets no user: the container runs as its image's USER.
        user = body.get("user") or "daytona"
        box = _Box(id=str(uuid.uuid4()), body=body, image=image, user=user)
        if dockerfile:
            box.state, box.building = "pending_build", True
        if (too_big := self._limit_refusal(body)) is not None:
            self.counts["limit_403"] += 1
            return self._error(403, too_big)
        # The quota check and the new sandbox's row in one step, as the API's transaction: checked
        # before the image lookup's await, three creates at once all passed a quota of two (CI).
        with self._lock:
            if (refusal := self._quota_refusal(body)) is not None:
                self.counts["quota_400"] += 1
                return self._error(400, refusal)
            self._boxes[box.id] = box
        self.counts["created"] += 1
        answer = self._dto(box)
        self._spawn(self._bring_up(box, dockerfile, tuple(build.get("contextHashes") or ())))
        if self._roll(self.faults.create_lost_fraction, "create_lost"):
            self.counts["create_lost"] += 1
            return self._error(self.faults.error_status, "injected gateway error after the create")
        return web.json_response(answer)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bring_up(self, box: _Box, dockerfile: str | None, contexts: tuple[str, ...] = ()) -> None:
        """unknown -> (pending_build -> building_snapshot | pulling_snapshot) -> creating -> started."""
        f = self.faults
        if dockerfile:
            # One build per Dockerfile content, as Daytona makes one snapshot per build hash:
            # later sandboxes of the same build wait for it in `pending_build`.
            await asyncio.sleep(f.build_delay_sec)
            if box.desired == "destroyed":
                box.building = False
                return
            try:
                box.image = await self._build_on_runner(dockerfile, box.build_log, box, contexts)
            except (docker.errors.BuildError, docker.errors.APIError) as exc:
                box.building = False
                box.state, box.error_reason = "build_failed", f"image build failed: {exc}"[:500]
                return
            box.building = False
            if box.desired == "destroyed":
                return
        else:
            # `unknown` until the sandbox manager takes the row (`pending`: DELETE answers 409).
            await asyncio.sleep(max(0.01, f.unknown_sec))
            if box.desired == "destroyed":
                return
            box.state = "pulling_snapshot"
            await self._pull_on_runner(str(box.body.get("snapshot") or box.image))
        if box.desired == "destroyed":
            return
        box.state = "creating"
        await asyncio.sleep(f.create_delay_sec)
        if box.desired != "destroyed" and box.state == "creating":
            await self._start_container(box)

    async def _pull_on_runner(self, snapshot: str) -> None:
        """A random runner (``getRandomAvailableRunner``) pulls ``snapshot`` once, in
        :attr:`Faults.pull_sec`; sandboxes of it on that runner meanwhile wait for the same pull."""
        if self.faults.pull_sec <= 0:
            return
        runner = self._die("runner").randrange(self.runners)
        async with self._pull_locks.setdefault((runner, snapshot), asyncio.Lock()):
            if snapshot not in self._runner_pulls[runner]:
                await asyncio.sleep(self.faults.pull_sec)
                self._runner_pulls[runner][snapshot] = time.monotonic()
                self.counts["cold_pulls"] += 1

    def _pick_runner(self, key: str) -> int:
        """A runner that built ``key`` in the last 24 Daytona hours, else one at random: builds
        are spread across runners, and each caches its own (``SnapshotRunner`` per runner)."""
        fresh = 24 * 60 * self.faults.minute_sec
        now = time.monotonic()
        warm = [r for r, cache in enumerate(self._runner_cache) if now - cache.get(key, -math.inf) < fresh]
        if warm:
            return self._die("runner").choice(warm)
        return self._die("runner").randrange(self.runners)

    async def _build_on_runner(self, dockerfile: str, log: list[str], box: _Box | None,
                               contexts: tuple[str, ...] = ()) -> str:
        """The local image of ``dockerfile`` built on a runner: a cold build there costs
        :attr:`Faults.cold_build_sec` (once per runner and build, later creates on that runner wait
        for it in ``pending_build``); the image itself is built once on the local Docker."""
        key = hashlib.sha256("\n".join((dockerfile, *contexts)).encode()).hexdigest()  # as the build hash
        runner = self._pick_runner(key)
        async with self._runner_locks.setdefault((runner, key), asyncio.Lock()):
            fresh = 24 * 60 * self.faults.minute_sec
            if time.monotonic() - self._runner_cache[runner].get(key, -math.inf) >= fresh:
                if box is not None:
                    box.state = "building_snapshot"
                log.append(f"runner-{runner}: building {key[:16]}")
                await asyncio.sleep(self.faults.build_delay_sec + self.faults.cold_build_sec)
                async with self._build_locks.setdefault(key, asyncio.Lock()):
                    built = self._built.get(key)
                    if built is None:
                        built = self._built[key] = await asyncio.to_thread(self._build, log, dockerfile, key,
                                                                           contexts)
                self._runner_cache[runner][key] = time.monotonic()
                self.cold_builds.append((runner, key))
                self.counts["cold_builds"] += 1
            else:
                self.counts["warm_builds"] += 1
            return self._built[key]

    def _build(self, log: list[str], dockerfile: str, key: str, contexts: tuple[str, ...] = ()) -> str:
        # One organisation's snapshot: a tag shared by the fixtures on this dockerd (other xdist
        # workers, other suites) moved to whichever built last, and the first to stop removed it
        # under the others' later creates (404 "No such image": a cell failed at create).
        tag = f"fake-daytona-build:{self.server_id}-{key[:16]}"
        log.append(f"building {tag}")
        try:
            if contexts:  # the runner unpacks every context archive beside the Dockerfile
                _, logs = self.docker.images.build(fileobj=self._build_context(dockerfile, contexts), tag=tag,
                                                   custom_context=True, rm=True, forcerm=True,
                                                   labels={MARKER_LABEL: self.server_id})
            else:
                _, logs = self.docker.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag,
                                                   rm=True, forcerm=True,
                                                   labels={MARKER_LABEL: self.server_id})
            for entry in logs:
                if entry.get("stream"):
                    log.append(str(entry["stream"]).rstrip())
        except docker.errors.BuildError as exc:
            for entry in exc.build_log:
                if entry.get("stream") or entry.get("error"):
                    log.append(str(entry.get("stream") or entry.get("error")).rstrip())
            raise
        self.counts["built"] += 1
        return tag

    def _uid_of(self, image: str, user: str | None) -> int:
        """The numeric uid of ``user`` (else the image's USER); a name not numeric is asked of
        ``/etc/passwd`` in the image (no container needed)."""
        if user is None:
            user = str(self.docker.images.get(image).attrs.get("Config", {}).get("User") or "")
        name = user.split(":", 1)[0]
        if not name or name == "root":
            return 0
        if name.isdigit():
            return int(name)
        out = self.docker.containers.run(image, ["sh", "-c", f"id -u {shlex.quote(name)}"], remove=True)
        return int(out.decode().strip() or 0)

    def _start_dir(self, image: str, container: str) -> str:
        """The image's WORKDIR, else the HOME of the user the container runs as."""
        workdir = str(self.docker.images.get(image).attrs.get("Config", {}).get("WorkingDir") or "")
        if workdir:
            return workdir
        api = self.docker.api
        exec_id = api.exec_create(container, ["sh", "-c", 'printf %s "$HOME"'])["Id"]
        return exec_output(api, exec_id).decode(errors="replace").strip() or "/"

    def _find_container(self, name: str) -> Any:
        """The container named ``name``, started if it is not running; ``None`` if there is none."""
        for _ in range(3):
            try:
                container = self.docker.containers.get(name)
                if container.status != "running":
                    container.start()
                return container
            except docker.errors.NotFound:
                return None
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                time.sleep(2)
        return None

    async def _start_container(self, box: _Box) -> None:
        body = box.body
        labels = {f"{LABEL_PREFIX}{k}": v for k, v in (body.get("labels") or {}).items()}
        labels.update({MARKER_LABEL: self.server_id, SANDBOX_ID_LABEL: box.id})
        kwargs: dict[str, Any] = {
            "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"],
            "detach": True,
            "labels": labels,
            "environment": body.get("env") or {},
            "name": f"fake-daytona-{box.id[:12]}",
            "init": True,
        }
        if body.get("user"):  # a create that names its user runs as it; else the image's USER
            kwargs["user"] = body["user"]
        size = body
        if body.get("snapshot"):  # a snapshot's sandbox runs with the snapshot's size, as its DTO says
            cpu, mem, _ = self._snapshot_size(body["snapshot"])
            size = {"cpu": cpu, "memory": mem}
        if size.get("cpu"):
            kwargs["nano_cpus"] = int(size["cpu"] * 1e9)
        if size.get("memory"):
            kwargs["mem_limit"] = f"{int(size['memory'])}g"
        if body.get("networkBlockAll"):
            kwargs["network_mode"] = "none"
        if self.dns:  # the names the sandbox resolves (what DNS would answer it)
            kwargs["extra_hosts"] = dict(self.dns)
        if self.faults.disk_paths:  # the sandbox's disk, where this host can enforce it (Faults)
            disk_bytes = self._size_asked(body)[2] * self.faults.disk_gib_bytes
            kwargs["tmpfs"] = {path: f"size={disk_bytes},mode=1777" for path in self.faults.disk_paths}
        try:
            container = await asyncio.to_thread(self.docker.containers.run, box.image, **kwargs)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            # A daemon too busy to answer in time may still have made the container (measured:
            # 60 s read timeouts at load average ~160): adopt it, as Daytona's runner reconciles
            # what its Docker did; only a container that is not there is an error.
            container = await asyncio.to_thread(self._find_container, str(kwargs["name"]))
            if container is None:
                box.state, box.error_reason = "error", f"{type(exc).__name__}: {exc}"[:500]
                return
        box.container = container.id
        allow, domains = body.get("networkAllowList"), body.get("domainAllowList")
        if (allow or domains) and not body.get("networkBlockAll"):
            try:
                await asyncio.to_thread(_firewall, container.id, self.docker, allow, domains, dict(self.dns))
            except (OSError, subprocess.SubprocessError, docker.errors.DockerException) as exc:
                box.state, box.error_reason = "error", f"network allow list not applied: {exc}"[:500]
                return
        box.uid = await asyncio.to_thread(self._uid_of, box.image, kwargs.get("user"))
        box.start_dir = await asyncio.to_thread(self._start_dir, box.image, container.id)
        if box.desired == "destroyed":  # deleted while starting: the destroy task removes it
            return
        box.state = "started"

    def _remove_container(self, box: _Box) -> None:
        if box.container:
            with contextlib.suppress(docker.errors.NotFound):
                self.docker.containers.get(box.container).remove(force=True, v=True)

    def _find(self, request: web.Request) -> _Box | None:
        """By id, or by name (``GET /sandbox/{idOrName}``)."""
        key = request.match_info["id"]
        box = self._boxes.get(key)
        if box is None:
            with self._lock:
                box = next((b for b in self._boxes.values()
                            if b.body.get("name") == key and b.state != "destroyed"), None)
        if box is None or box.state == "destroyed":
            return None
        return box

    async def _get(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._auth(request)) is not None:
            return denied
        if self._roll(self.faults.api_5xx_fraction, "api_5xx"):
            return self._error(self.faults.error_status, "injected server error")
        box = self._find(request)
        if box is None:
            return self._error(404, f"Sandbox with ID or name {request.match_info['id']} not found")
        await asyncio.to_thread(self._refresh, box)
        return web.json_response(self._dto(box))

    async def _network_settings(self, request: web.Request) -> web.StreamResponse:
        """``POST /sandbox/{id}/network-settings``: ``SandboxController.updateNetworkSettings`` and
        ``SandboxService.updateNetworkSettings`` (daytonaio/daytona f250f7d39): an empty list clears
        it, ``networkBlockAll: true`` clears the network list (not the domain list), a network list
        lifts the block, ``networkBlockAll: false`` alone clears the network list; the runner then
        gets the effective settings (here: the container's rules replaced)."""
        if (denied := self._auth(request)) is not None:
            return denied
        body = await request.json()
        block, allow, domains = (body.get(k) for k in ("networkBlockAll", "networkAllowList", "domainAllowList"))
        if block is None and allow is None and domains is None:
            return self._error(400, "At least one of networkBlockAll, networkAllowList or domainAllowList "
                                    "must be provided")
        box = self._find(request)
        if box is None:
            return self._error(404, f"Sandbox with ID or name {request.match_info['id']} not found")
        now = {k: box.body.get(k) for k in ("networkBlockAll", "networkAllowList", "domainAllowList")}
        if domains is not None:
            if domains.strip() and (invalid := domain_allow_list_error(domains)):
                return self._error(400, invalid)
            now["domainAllowList"] = domains if domains.strip() else None
        if block is not None:
            now["networkBlockAll"] = block
            if block:
                now["networkAllowList"] = None
        if allow is not None:
            if not allow.strip():
                now["networkAllowList"] = None
            elif invalid := network_allow_list_error(allow):
                return self._error(400, invalid)
            else:
                now["networkAllowList"], now["networkBlockAll"] = allow, False
        elif block is False:
            now["networkAllowList"] = None
        if box.container is not None:
            try:
                await asyncio.to_thread(self._apply_network, box.container, now)
            except (OSError, subprocess.SubprocessError, docker.errors.DockerException) as exc:
                return self._error(500, f"network settings not applied: {exc}"[:500])
        box.body = {**box.body, **now}  # not the recorded create request
        return web.json_response(self._dto(box))

    def _apply_network(self, container_id: str, now: Mapping[str, Any]) -> None:
        """The runner's side: a container made with no network (a create's ``networkBlockAll``)
        joins the bridge when the block is lifted; the rules then say the rest."""
        attrs = self.docker.api.inspect_container(container_id)
        if not now.get("networkBlockAll") and attrs["HostConfig"]["NetworkMode"] == "none":
            self.docker.api.disconnect_container_from_network(container_id, "none")
            self.docker.api.connect_container_to_network(container_id, "bridge")
        _firewall(container_id, self.docker, now.get("networkAllowList"), now.get("domainAllowList"),
                  dict(self.dns), block_all=bool(now.get("networkBlockAll")))

    async def _snapshot(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._auth(request)) is not None:
            return denied
        name = request.match_info["name"]
        made = self._made_snapshots.get(name) or next(
            (m for m in self._made_snapshots.values() if m["id"] == name), None)
        if made is not None:
            return web.json_response({k: v for k, v in made.items() if k != "localImage"})
        if name not in self.snapshots:
            return self._error(404, f"Snapshot with name {name} not found")
        cpu, mem, disk = self.snapshot_sizes.get(name, (1, 1, 3))
        now = datetime.now(UTC).isoformat()
        return web.json_response({
            "id": hashlib.sha256(name.encode()).hexdigest()[:16], "organizationId": "fake-org", "general": False,
            "name": name, "imageName": self.snapshots[name], "state": "active", "size": None, "entrypoint": None,
            "cpu": cpu, "gpu": 0, "mem": mem, "disk": disk, "errorReason": None, "createdAt": now,
            "updatedAt": now, "lastUsedAt": None, "sourceSandboxId": None,
        })

    async def _create_snapshot(self, request: web.Request) -> web.StreamResponse:
        """``POST /snapshots``: ``pending``, then ``building`` (a ``buildInfo``, built on a runner
        like a sandbox's) or ``pulling`` (an ``imageName``, which must exist locally), then
        ``active`` -- or ``build_failed`` / ``error`` with ``errorReason``. Names are unique."""
        if (denied := self._auth(request)) is not None:
            return denied
        if self._roll(self.faults.throttled_429_fraction, "throttled_429"):
            self.counts["throttled_429"] += 1
            return self._rate_limited("authenticated")
        body = await request.json()
        name = str(body.get("name") or "")
        if not name:
            return self._error(400, "name must be a string")
        if name in self._made_snapshots or name in self.snapshots:
            return self._error(409, f"Snapshot with name {name} already exists")
        if (refused := self._snapshot_quota_refusal()) is not None:
            return refused
        build = body.get("buildInfo") or {}
        if (missing := self._missing_context(build)) is not None:
            return self._error(400, missing)
        if not build.get("dockerfileContent") and not body.get("imageName"):
            return self._error(400, "Must specify either imageName or buildInfo")
        now = datetime.now(UTC).isoformat()
        made: dict[str, Any] = {
            "id": str(uuid.uuid4()), "organizationId": "fake-org", "general": False, "name": name,
            "imageName": body.get("imageName") or "", "state": "pending", "size": None, "entrypoint": None,
            "cpu": int(body.get("cpu") or 1), "gpu": 0, "mem": int(body.get("memory") or 1),
            "disk": int(body.get("disk") or 3), "errorReason": None, "createdAt": now, "updatedAt": now,
            "lastUsedAt": None, "sourceSandboxId": None,
            # The API's BuildInfoDto: what the SDK reads back (its snapshotRef names the build).
            "buildInfo": {"dockerfileContent": build.get("dockerfileContent"),
                          "contextHashes": list(build.get("contextHashes") or []),
                          "createdAt": now, "updatedAt": now,
                          "snapshotRef": hashlib.sha256(str(build.get("dockerfileContent")).encode()).hexdigest()}
            if build else None,
        }
        self._made_snapshots[name] = made
        self._spawn(self._make_snapshot(made, build.get("dockerfileContent"), body.get("imageName"),
                                        tuple(build.get("contextHashes") or ())))
        return web.json_response({k: v for k, v in made.items() if k != "localImage"})

    async def _make_snapshot(self, made: dict[str, Any], dockerfile: str | None, image: str | None,
                             contexts: tuple[str, ...] = ()) -> None:
        await asyncio.sleep(0.05)
        log: list[str] = []
        try:
            if dockerfile:
                made["state"] = "building"
                made["localImage"] = await self._build_on_runner(dockerfile, log, None, contexts)
            else:
                made["state"] = "pulling"
                await asyncio.to_thread(self.docker.images.get, image)
                made["localImage"] = image
        except (docker.errors.BuildError, docker.errors.APIError, docker.errors.ImageNotFound) as exc:
            made["state"] = "build_failed" if dockerfile else "error"
            made["errorReason"] = (f"image build failed: {exc}" if dockerfile else f"{exc}")[:500]
            return
        made["state"], made["updatedAt"] = "active", datetime.now(UTC).isoformat()

    def reset_builds(self, runners: int | None = None) -> None:
        """Cold runners again (every build cache empty), ``runners`` of them, and no snapshot made
        through ``POST /snapshots``; the local Docker keeps the images it built."""
        if runners is not None:
            self.runners = max(1, runners)
        self._runner_cache = [{} for _ in range(self.runners)]
        self._runner_locks.clear()
        self._runner_pulls = [{} for _ in range(self.runners)]
        self._pull_locks.clear()
        self.cold_builds.clear()
        self._made_snapshots.clear()

    def deactivate_snapshot(self, name: str, *, ago_sec: float = 3600.0) -> None:
        """What the API's snapshot manager does to a snapshot no sandbox used for 14 days
        (``apps/api/src/sandbox/managers/snapshot.manager.ts``): ``inactive``, ``ago_sec`` ago."""
        made = self._made_snapshots[name]
        made["state"] = "inactive"
        made["updatedAt"] = (datetime.now(UTC) - timedelta(seconds=ago_sec)).isoformat()

    async def _activate_snapshot(self, request: web.Request) -> web.StreamResponse:
        """``POST /snapshots/{id}/activate`` as ``SnapshotService.activateSnapshot``: only an
        ``inactive`` snapshot, not within 10 minutes of its deactivation; ``pending``, then
        pulled back to ``active``."""
        if (denied := self._auth(request)) is not None:
            return denied
        key = request.match_info["id"]
        made = next((m for m in self._made_snapshots.values() if key in (m["id"], m["name"])), None)
        if made is None:
            return self._error(404, f"Snapshot {key} not found")
        if made["state"] == "active":
            return self._error(400, f"Snapshot {key} is already active")
        if made["state"] != "inactive":
            return self._error(400, f"Snapshot {key} cannot be activated - it is in {made['state']} state")
        if datetime.now(UTC) - datetime.fromisoformat(made["updatedAt"]) < timedelta(minutes=10):
            return self._error(400, "Snapshot deactivation is still in progress. Please try again in a few minutes.")
        if (refused := self._snapshot_quota_refusal()) is not None:
            return refused
        made["state"], made["updatedAt"] = "pending", datetime.now(UTC).isoformat()
        self.counts["snapshot_activated"] += 1

        async def pull() -> None:
            await asyncio.sleep(0.05)
            made["state"] = "pulling"
            await asyncio.sleep(max(0.05, self.faults.build_delay_sec))
            made["state"], made["updatedAt"] = "active", datetime.now(UTC).isoformat()

        self._spawn(pull())
        return web.json_response({k: v for k, v in made.items() if k != "localImage"})

    def _snapshot_quota_refusal(self) -> web.Response | None:
        """The API's answer when one more snapshot would pass :attr:`snapshot_quota`."""
        used = len(self.snapshots) + sum(1 for m in self._made_snapshots.values()
                                         if m["state"] in ("building", "pending", "pulling", "active"))
        if used + 1 > self.snapshot_quota:
            self.counts["snapshot_quota_400"] += 1
            return self._error(400, f"Snapshot quota exceeded. Maximum allowed: {self.snapshot_quota}")
        return None

    async def _list_snapshots(self, request: web.Request) -> web.StreamResponse:
        """``GET /snapshots``: pages (``limit`` 100 by default), most recently used first (the
        API's default sort, ``lastUsedAt`` descending)."""
        if (denied := self._auth(request)) is not None:
            return denied
        page = max(1, int(request.query.get("page") or 1))
        limit = max(1, min(200, int(request.query.get("limit") or 100)))
        items = sorted(({k: v for k, v in m.items() if k != "localImage"} for m in self._made_snapshots.values()),
                       key=lambda m: m["lastUsedAt"] or m["createdAt"], reverse=True)
        return web.json_response({"items": items[(page - 1) * limit:page * limit], "total": len(items),
                                  "page": page, "totalPages": max(1, math.ceil(len(items) / limit))})

    async def _delete_snapshot(self, request: web.Request) -> web.StreamResponse:
        """``DELETE /snapshots/{id}`` as ``SnapshotService.removeSnapshot``: ``removing`` at once
        (no longer counted against the quota), then gone."""
        if (denied := self._auth(request)) is not None:
            return denied
        key = request.match_info["id"]
        made = next((m for m in self._made_snapshots.values() if m["id"] == key), None)
        if made is None:
            return self._error(404, f"Snapshot {key} not found")
        made["state"] = "removing"
        self.counts["snapshot_deleted"] += 1

        async def remove() -> None:
            await asyncio.sleep(0.2)
            self._made_snapshots.pop(made["name"], None)

        self._spawn(remove())
        return web.json_response({})

    def delete_snapshot(self, name: str) -> None:
        """Remove a snapshot behind the run's back (an operator, an expiry)."""
        self._made_snapshots.pop(name, None)
        self.snapshots.pop(name, None)

    async def _proxy_url(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._auth(request)) is not None:
            return denied
        if self._find(request) is None:
            return self._error(404, "Sandbox not found")
        return web.json_response({"url": f"{self.url}/toolbox"})

    async def _list(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._auth(request)) is not None:
            return denied
        if self._roll(self.faults.api_5xx_fraction, "api_5xx"):
            return self._error(self.faults.error_status, "injected server error")
        wanted = json.loads(request.query.get("labels") or "{}")
        lag = self.faults.list_lag_sec
        now = time.monotonic()
        with self._lock:
            # Eventually consistent: what was true `lag` seconds ago. New sandboxes show late;
            # destroyed ones linger as `destroying`.
            boxes = [b for b in self._boxes.values() if now - b.made_mono >= lag and (
                b.state != "destroyed" or (b.destroyed_mono is not None and now - b.destroyed_mono < lag))]
        matched = [b for b in boxes
                   if all((b.body.get("labels") or {}).get(k) == v for k, v in wanted.items())]
        # Cursor pages of at most `list_page` (the API's: 100, its default and largest page).
        start = int(request.query.get("cursor") or 0)
        limit = min(int(request.query.get("limit") or self.list_page), self.list_page)
        items = []
        for box in matched[start:start + limit]:
            await asyncio.to_thread(self._refresh, box)
            item = self._list_item(box)
            if box.state == "destroyed":
                item["state"], item["desiredState"] = "destroying", "destroyed"
            items.append(item)
        more = start + limit < len(matched)
        self.counts["list_pages"] += 1
        return web.json_response({"items": items, "nextCursor": str(start + limit) if more else None})

    async def _delete(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._auth(request)) is not None:
            return denied
        if self._roll(self.faults.api_5xx_fraction, "api_5xx"):
            return self._error(self.faults.error_status, "injected server error")
        box = self._find(request)
        if box is None:
            return self._error(404, f"Sandbox with ID or name {request.match_info['id']} not found")
        # SandboxService.destroy: a pending state change (other than pending_build) -> 409, and a
        # sandbox is pending while its state differs from its desired state: during the whole
        # bring-up (pulling, creating, building: up to an hour) and during a delete.
        if box.state != box.desired and box.state not in _DELETABLE_WHILE_PENDING:
            self.counts["delete_409"] += 1
            return self._error(409, "Sandbox state change in progress")
        box.pending, box.desired = True, "destroyed"
        answer = self._dto(box)
        self._spawn(self._destroy(box))
        return web.json_response(answer)

    async def _clock(self) -> None:
        """Daytona's lifecycle jobs: auto-stop an idle started sandbox, auto-delete a stopped
        one, destroy one past its TTL (whatever its state)."""
        while True:
            await asyncio.sleep(0.25)
            minute, now = self.faults.minute_sec, time.monotonic()
            with self._lock:
                boxes = [b for b in self._boxes.values() if b.desired != "destroyed" and b.state != "destroyed"]
            for box in boxes:
                body = box.body
                ttl, stop_after, delete_after = (body.get("ttlMinutes"), body.get("autoStopInterval"),
                                                 body.get("autoDeleteInterval"))
                if ttl and now - box.made_mono >= ttl * minute:
                    self.counts["ttl_destroyed"] += 1
                    self._begin_destroy(box)
                elif (box.state == "started" and stop_after and not box.busy
                      and now - box.active_mono >= stop_after * minute):
                    self.counts["auto_stopped"] += 1
                    await asyncio.to_thread(self._stop_container, box)
                    box.state, box.desired, box.stopped_mono = "stopped", "stopped", time.monotonic()
                elif (box.state == "stopped" and delete_after is not None and delete_after >= 0
                      and now - (box.stopped_mono or now) >= delete_after * minute):
                    self._begin_destroy(box)

    def _stop_container(self, box: _Box) -> None:
        if box.container:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                self.docker.containers.get(box.container).stop(timeout=1)

    def _begin_destroy(self, box: _Box) -> None:
        box.pending, box.desired = True, "destroyed"
        self._spawn(self._destroy(box))

    async def _destroy(self, box: _Box) -> None:
        await asyncio.sleep(self.faults.delete_delay_sec)
        while box.building:  # a build in progress finishes (or fails) first
            await asyncio.sleep(0.1)
        box.state = "destroying"
        await asyncio.sleep(self.faults.delete_delay_sec)
        await asyncio.to_thread(self._remove_container, box)
        box.state, box.pending, box.destroyed_mono = "destroyed", False, time.monotonic()

    async def _build_logs_url(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._auth(request)) is not None:
            return denied
        box = self._find(request)
        if box is None or not (box.body.get("buildInfo") or {}).get("dockerfileContent"):
            return self._error(404, f"Sandbox {request.match_info['id']} has no build info")
        return web.json_response({"url": f"{self.url}/sandboxes/{box.id}/build-logs"})

    async def _build_logs(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._auth(request)) is not None:
            return denied
        box = self._boxes.get(request.match_info["id"])
        if box is None:
            return self._error(404, "sandbox not found")
        follow = request.query.get("follow") == "true"
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        sent = 0
        while True:
            lines = box.build_log[sent:]
            sent += len(lines)
            if lines:
                await response.write(("\n".join(lines) + "\n").encode())
            if not follow or (not box.building and box.state != "pending_build"):
                break
            await asyncio.sleep(0.2)
        await response.write_eof()
        return response

    # ---------------------------------------------------------------- object storage

    def _missing_context(self, build: Mapping[str, Any]) -> str | None:
        """Why a build's context cannot be found, or ``None``: every hash in ``contextHashes``
        names an archive the SDK put into the organisation's bucket beforehand."""
        for digest in build.get("contextHashes") or ():
            if f"{CONTEXT_BUCKET}/fake-org/{digest}/context.tar" not in self.objects:
                return f"build context {digest} not found in object storage"
        return None

    def _build_context(self, dockerfile: str, contexts: tuple[str, ...]) -> io.BytesIO:
        """One tar: every context archive's members, then the Dockerfile."""
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            for digest in contexts:
                raw = self.objects[f"{CONTEXT_BUCKET}/fake-org/{digest}/context.tar"]
                with tarfile.open(fileobj=io.BytesIO(raw), mode="r") as ctx:
                    for member in ctx.getmembers():
                        data = ctx.extractfile(member) if member.isfile() else None
                        tar.addfile(member, data)
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(dockerfile.encode())
            tar.addfile(info, io.BytesIO(dockerfile.encode()))
        out.seek(0)
        return out

    async def _push_access(self, request: web.Request) -> web.StreamResponse:
        """``GET /object-storage/push-access``: temporary credentials for the organisation's
        build-context bucket (the SDK uploads a Dockerfile's COPY sources there before the create)."""
        if (denied := self._auth(request)) is not None:
            return denied
        return web.json_response({
            "storageUrl": f"{self.url}/s3", "accessKey": "fake-access-key", "secret": "fake-secret",
            "sessionToken": "fake-session-token", "bucket": CONTEXT_BUCKET, "region": "us-east-1",
            "organizationId": "fake-org",
        })

    async def _s3(self, request: web.Request) -> web.StreamResponse:
        """The S3 calls the SDK's ``obstore`` client makes (path-style): HEAD and GET an object,
        PUT one whole, or in parts (``POST ?uploads``, ``PUT ?partNumber&uploadId``,
        ``POST ?uploadId``). Signatures are not checked (the credentials are the fixture's)."""
        key = f"{request.match_info['bucket']}/{request.match_info['key']}"
        query = request.query
        if request.method in ("HEAD", "GET"):
            data = self.objects.get(key)
            if data is None:
                return web.Response(status=404, text="<Error><Code>NoSuchKey</Code></Error>")
            headers = {"Content-Length": str(len(data)), "ETag": f'"{hashlib.md5(data).hexdigest()}"',
                       "Last-Modified": "Thu, 01 Jan 2026 00:00:00 GMT"}
            if request.method == "HEAD":
                return web.Response(status=200, headers=headers)
            return web.Response(body=data, headers=headers)
        if request.method == "PUT":
            data = await request.read()
            etag = f'"{hashlib.md5(data).hexdigest()}"'
            if "uploadId" in query:
                self._multipart.setdefault(query["uploadId"], {})[int(query["partNumber"])] = data
            else:
                self.objects[key] = data
            return web.Response(status=200, headers={"ETag": etag})
        if request.method == "POST" and "uploads" in query:
            upload = uuid.uuid4().hex
            self._multipart[upload] = {}
            return web.Response(content_type="application/xml", text=(
                "<InitiateMultipartUploadResult><Bucket>{}</Bucket><Key>{}</Key><UploadId>{}</UploadId>"
                "</InitiateMultipartUploadResult>").format(request.match_info["bucket"],
                                                           request.match_info["key"], upload))
        if request.method == "POST" and "uploadId" in query:
            await request.read()
            parts = self._multipart.pop(query["uploadId"], {})
            self.objects[key] = b"".join(parts[n] for n in sorted(parts))
            return web.Response(content_type="application/xml", text=(
                f"<CompleteMultipartUploadResult><Key>{request.match_info['key']}</Key>"
                f"<ETag>\"{hashlib.md5(self.objects[key]).hexdigest()}\"</ETag></CompleteMultipartUploadResult>"))
        if request.method == "DELETE" and "uploadId" in query:
            self._multipart.pop(query["uploadId"], None)
            return web.Response(status=204)
        return web.Response(status=405)

    # ---------------------------------------------------------------- toolbox

    async def _running(self, request: web.Request) -> tuple[_Box | None, web.Response | None]:
        if (denied := self._auth(request)) is not None:
            return None, denied
        box = self._find(request)
        if box is None:
            return None, self._error(404, "sandbox not found")
        # A toolbox request is activity when it arrives (the proxy records it on its way in).
        box.active_mono = arrived = time.monotonic()
        if box.first_call_mono is None:
            box.first_call_mono = arrived
        # On the commands' own threads, not the 64 shared ones: the real proxy does not queue a
        # toolbox call behind other sandboxes' Docker calls (at 500 sandboxes this wait reached 87 s).
        await asyncio.get_running_loop().run_in_executor(self._commands, self._refresh, box)
        if box.state != "started":
            return None, self._error(400, f"sandbox is not running (state {box.state})")
        box.active_mono = served = time.monotonic()  # a toolbox call is activity (auto-stop counts idle time)
        self.toolbox_waits.append(served - arrived)
        if box.first_served_mono is None:
            box.first_served_mono = served
        return box, None

    async def _execute(self, request: web.Request) -> web.StreamResponse:
        box, denied = await self._running(request)
        if box is None:
            assert denied is not None
            return denied
        req = await request.json()
        command = req["command"]
        timeout = req.get("timeout") or 10 * 60
        f = self.faults
        if self._timeouts_for is not f:  # new faults, a new count
            self._timeouts_for, self._timeouts_left = f, f.exec_timeout_count
        if f.exec_refused_match and f.exec_refused_match in command:
            refused = self.counts["exec_refused"]
            if refused < len(f.exec_refused):
                self.counts["exec_refused"] += 1
                status = f.exec_refused[refused]
                return (self._rate_limited("authenticated") if status == 429
                        else self._error(status, "injected refusal of a toolbox execute"))
        if self._timeouts_left > 0 and f.exec_timeout_match in command:
            self._timeouts_left -= 1
            self.counts["exec_timeout"] += 1
            return self._timed_out(request, timeout)

        queued = time.monotonic()
        loop = asyncio.get_running_loop()
        begun = asyncio.Event()
        made: list[str] = []  # the Docker exec's id, once made

        def run() -> tuple[int, bytes]:
            self.command_waits.append(time.monotonic() - queued)
            api = self.docker.api
            exec_id = api.exec_create(box.container, ["sh", "-c", command], environment=req.get("envs") or None,
                                      workdir=req.get("cwd") or box.start_dir or None)["Id"]
            made.append(exec_id)
            loop.call_soon_threadsafe(begun.set)  # the daemon's timeout counts from here
            # All the command printed, as the toolbox's one buffer for stdout and stderr holds
            # it: docker-py's exec_start loses the first frames under load (ray_bench's reader).
            out = exec_output(api, exec_id)
            code = api.exec_inspect(exec_id).get("ExitCode")
            return int(code if code is not None else -1), out or b""

        self.executions.append((box.id, command))
        box.busy += 1  # a running command keeps the sandbox active, however long it runs
        try:
            # The request's `timeout` is the command's own run time, as the daemon counts it:
            # not the fixture's wait for a thread and for its Docker to make the exec (at load
            # 280 on 2 cores that alone passed the 30 s of the backend's `id` probe).
            ran = loop.run_in_executor(self._commands, run)
            started = asyncio.ensure_future(begun.wait())
            await asyncio.wait({ran, started}, return_when=asyncio.FIRST_COMPLETED)
            started.cancel()
            if f.exec_cut_match and f.exec_cut_match in command:
                cut = await self._cut(request, ran, box, f)
                if cut is not None:
                    return cut
            code, out = await asyncio.wait_for(asyncio.shield(ran), timeout)
        except TimeoutError:
            # As the daemon's ExecuteCommand: the command's process group is terminated (SIGTERM,
            # SIGKILL after the grace), the end awaited, and then the request is answered 408.
            self.counts["exec_timed_out"] += 1
            await self._terminate_exec(made, ran)
            return self._timed_out(request, timeout)
        except docker.errors.NotFound:
            return self._error(400, "sandbox is not running")
        finally:
            box.busy -= 1
            box.active_mono = time.monotonic()
        if self._roll(self.faults.exec_lost_fraction, "exec_lost") or (
                f.exec_lost_match and f.exec_lost_match in command):
            self.counts["exec_lost"] += 1
            return self._error(502, "injected gateway error after the command ran")
        if f.exec_head_lost_match and f.exec_head_lost_match in command:
            self.counts["exec_head_lost"] += 1
            out = out.partition(b"\n")[2]
        return web.json_response({"exitCode": code, "result": out.decode("utf-8", "replace")})

    async def _cut(self, request: web.Request, ran: asyncio.Future[Any], box: _Box,
                   f: Faults) -> web.StreamResponse | None:
        """:attr:`Faults.exec_cut_match`: the request is cut while the command runs on (the
        sandbox stays busy until it ends); None when the command ended before the cut."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(ran), f.exec_cut_after_sec)
            return None
        self.counts["exec_cut"] += 1
        box.busy += 1  # the command still runs: the `finally` above counts the request's end

        def ended(_: asyncio.Future[Any]) -> None:
            box.busy -= 1
            box.active_mono = time.monotonic()
        ran.add_done_callback(ended)
        if f.exec_cut_how == "reset":
            assert request.transport is not None
            request.transport.abort()  # no answer at all: the client's connection is reset
            return web.Response(status=502)  # written nowhere
        return self._error(502, "injected gateway error while the command runs")

    async def _terminate_exec(self, made: list[str], ran: asyncio.Future[Any]) -> None:
        """``common.TerminateProcessTreeGracefully`` on the exec's process group: a Docker exec's
        process leads a session of its own, as the daemon's ``Setpgid`` command leads a group, so
        processes that made sessions of their own (``setsid``) are out of its reach, as there."""
        if not made:
            return
        info = await asyncio.to_thread(self.docker.api.exec_inspect, made[0])
        pid = int(info.get("Pid") or 0)
        for sig, grace in ((signal.SIGTERM, EXEC_TERMINATION_GRACE_SEC), (signal.SIGKILL, 30.0)):
            if pid <= 0 or ran.done():
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
            with contextlib.suppress(Exception):  # the end came, or the grace passed
                await asyncio.wait_for(asyncio.shield(ran), grace)

    def _timed_out(self, request: web.Request, timeout: float) -> web.Response:
        """The daemon's 408 for a command that outran its ``timeout``, in its ErrorResponse shape."""
        body = {
            "statusCode": 408,
            "message": f"Command execution timed out after {int(timeout)} seconds. The timeout can be increased "
                       "by adjusting the timeout parameter in the request.",
            "code": "REQUEST_TIMEOUT",
            "timestamp": datetime.now(UTC).isoformat(),
            "path": request.path,
            "method": request.method,
        }
        return web.json_response(body, status=408)

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        box, denied = await self._running(request)
        if box is None:
            assert denied is not None
            return denied
        reader = await request.multipart()
        paths: dict[str, str] = {}
        blobs: dict[str, bytes] = {}
        while (part := await reader.next()) is not None:
            name = getattr(part, "name", None) or ""
            match = re.fullmatch(r"files\[(\d+)\]\.(path|file)", name)
            if match is None:
                continue
            data = await part.read()  # type: ignore[union-attr]
            if match.group(2) == "path":
                paths[match.group(1)] = data.decode()
            else:
                blobs[match.group(1)] = bytes(data)
                paths.setdefault(match.group(1), getattr(part, "filename", "") or "")
        # The toolbox writes as the sandbox's user: its parents are made by that user, the files
        # belong to it (a non-root sandbox cannot write where its user may not).
        uid = box.uid
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for idx, blob in blobs.items():
                info = tarfile.TarInfo(paths[idx].lstrip("/"))
                info.size, info.mode, info.mtime = len(blob), 0o644, int(time.time())
                info.uid = info.gid = uid
                tar.addfile(info, io.BytesIO(blob))
        parents = sorted({str(PurePosixPath(p).parent) for p in paths.values()})
        try:
            container = await asyncio.to_thread(self.docker.containers.get, box.container)
            code, out = await asyncio.to_thread(container.exec_run, ["mkdir", "-p", *parents])
            if code != 0:
                return self._error(400, f"failed to upload files: {out.decode(errors='replace')[:300]}")
            await asyncio.to_thread(container.put_archive, "/", buf.getvalue())
        except docker.errors.NotFound:
            return self._error(400, "sandbox is not running")
        return web.json_response({})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        box, denied = await self._running(request)
        if box is None:
            assert denied is not None
            return denied
        paths = (await request.json()).get("paths") or []

        def fetch(path: str) -> bytes:
            container = self.docker.containers.get(box.container)
            stream, _ = container.get_archive(path)
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                for member in tar:
                    if member.isfile():
                        handle = tar.extractfile(member)
                        assert handle is not None
                        return handle.read()
            raise IsADirectoryError(path)

        writer = aiohttp.MultipartWriter("form-data")
        for path in paths:
            try:
                data = await asyncio.to_thread(fetch, path)
            except docker.errors.NotFound:
                part = writer.append_json(
                    {
                        "message": f"file not found: {path}",
                        "statusCode": 404,
                        "code": "FILE_NOT_FOUND",
                    }
                )
                part.headers["Content-Disposition"] = _disposition("error", path)
                continue
            except IsADirectoryError:
                part = writer.append_json(
                    {"message": f"is a directory: {path}", "statusCode": 400, "code": "BAD_REQUEST"}
                )
                part.headers["Content-Disposition"] = _disposition("error", path)
                continue
            part = writer.append(data, {"Content-Type": "application/octet-stream"})
            part.headers["Content-Disposition"] = _disposition("file", path)
        return web.Response(
            body=writer,
            headers={"Content-Type": f"multipart/form-data; boundary={writer.boundary}"},
        )


#: ``sudo`` as Daytona's default snapshot grants it to its user (``daytona ALL=(ALL)
#: NOPASSWD:ALL``, ``images/sandbox/Dockerfile``): a setuid-root program that runs its command
#: as root, password never asked (``-n`` and other options are accepted and ignored).
_SUDO_C = r"""#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
  int i = 1;
  while (i < argc && argv[i][0] == '-') { if (!strcmp(argv[i++], "--")) break; }
  if (i >= argc) { fprintf(stderr, "usage: sudo [-n] command\n"); return 1; }
  if (setgid(0) || setuid(0)) { perror("sudo"); return 1; }
  execvp(argv[i], argv + i);
  perror("sudo");
  return 127;
}
"""


def _sudo_binary() -> bytes | None:
    """The static ``sudo`` above, compiled once per machine (None without a C compiler)."""
    import shutil
    import subprocess
    import tempfile

    digest = hashlib.sha256(_SUDO_C.encode()).hexdigest()[:16]
    built = os.path.join(tempfile.gettempdir(), f"fake-daytona-sudo-{digest}")
    if not os.path.exists(built):
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            return None
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "sudo.c")
            with open(src, "w") as f:
                f.write(_SUDO_C)
            subprocess.run([cc, "-static", "-Os", "-o", os.path.join(tmp, "sudo"), src], check=True)
            os.replace(os.path.join(tmp, "sudo"), built)
    with open(built, "rb") as f:
        return f.read()


def default_snapshot_context(image: str, user: str) -> io.BytesIO:
    """The build context of the default snapshot's image as Daytona's is made
    (``images/sandbox/Dockerfile``): a ``daytona`` user with a HOME (where its sandboxes start:
    the image sets no WORKDIR) and passwordless sudo; it runs as ``user``."""
    uid, _, gid = user.partition(":")
    lines = [f"FROM {image}"]
    files: dict[str, tuple[bytes, int]] = {}
    sudo = _sudo_binary()
    if sudo is not None:
        files["sudo"] = (sudo, 0o4755)
        lines += ["COPY sudo /usr/bin/sudo", "RUN chmod 4755 /usr/bin/sudo"]  # COPY drops the setuid bit
    if uid.isdigit():
        lines.append(f"RUN echo 'daytona:x:{uid}:{gid or uid}::/home/daytona:/bin/sh' >>/etc/passwd && "
                     f"mkdir -p /home/daytona && chown {uid}:{gid or uid} /home/daytona")
    lines.append(f"USER {user}")
    files["Dockerfile"] = ("\n".join(lines).encode() + b"\n", 0o644)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def object_storage_over_http(monkeypatch: Any) -> None:
    """Let the SDK's build-context uploads reach the fixture's plain-HTTP object storage.

    The real service hands out an HTTPS ``storageUrl``; the SDK builds its ``obstore`` S3 client
    inside ``isolated_env()`` (``os.environ`` emptied, so ``AWS_ALLOW_HTTP`` cannot reach it)
    with only a timeout, and the client refuses ``http://``. The one liberty the tests take with
    the SDK: this process's S3 clients may use HTTP. Everything else (push access, the upload,
    the create's ``contextHashes``, the build) is the SDK's and the fixture's own."""
    from daytona._async import object_storage

    real = object_storage.S3Store

    def store(*args: Any, client_options: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        return real(*args, client_options={**(client_options or {}), "allow_http": True}, **kwargs)

    monkeypatch.setattr(object_storage, "S3Store", store)


def _disposition(name: str, filename: str) -> str:
    # aiohttp's set_content_disposition percent-encodes the filename; the SDK matches it verbatim.
    quoted = filename.replace('"', "%22")
    return f'form-data; name="{name}"; filename="{quoted}"'


#: States a DELETE is accepted in though they differ from the desired one (``SandboxService.destroy``
#: lets a queued build go; a sandbox in error will never reach its desired state).
_DELETABLE_WHILE_PENDING = frozenset({"pending_build", "error", "build_failed"})

_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    404: "NOT_FOUND",
    408: "TIMEOUT",
    429: "TOO_MANY_REQUESTS",
    500: "INTERNAL_SERVER_ERROR",
    502: "BAD_GATEWAY",
    503: "SERVICE_UNAVAILABLE",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--api-key", default=DEFAULT_API_KEY)
    parser.add_argument("--image", help="image for creates that name no snapshot or image")
    parser.add_argument(
        "--snapshot",
        action="append",
        default=[],
        metavar="NAME=IMAGE",
        help="serve snapshot NAME from local image IMAGE (repeatable)",
    )
    args = parser.parse_args(argv)
    snapshots = dict(s.split("=", 1) for s in args.snapshot)
    server = DaytonaServer(
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        snapshots=snapshots,
        default_image=args.image,
    ).start()
    for key, value in server.env().items():
        print(f"{key}={shlex.quote(value)}", flush=True)
    print(
        f"# fake Daytona {server.server_id} on {server.url};"
        " Ctrl-C stops it and removes its containers",
        flush=True,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
