"""The resource supervisor: a node under its memory or disk reserve takes no more cells.

One :class:`ResourceSupervisor` per node that hosts runners (in a Ray actor pinned to the node,
``ray_bench.onray.supervisors``; in the driver for a local run). A node's halt is recorded in
the ledger (``node_halt``) and the node gets no new attempts; once no node may take cells the
run stops and :func:`write_run_halt` writes ``runs/ID/resource-halt.json`` (the reasons, the
figures, the managed containers). The driver refuses to resume while it exists until an
operator clears it with a reason (``--clear-halt --clearance-reason``); :func:`clear_halt`
archives the original under ``runs/ID/halts/`` with that reason.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ray_bench import runroot
from ray_bench.config.bounded import load_state_json
from ray_bench.errors import HaltActiveError, UserInputError
from ray_bench.files import write_whole
from ray_bench.models.plan import Plan
from ray_bench.sandboxes.base import LABEL_ATTEMPT, LABEL_CELL, LABEL_MANAGED, LABEL_RUN
from ray_bench.sandboxes.capabilities import having
from ray_bench.sandboxes.host import read_available_mb

HALT_FILE = runroot.HALT_FILE  # the run-root layout has one definition (ray_bench.runroot)
#: The node name of the driver's own host in a halt record.
LOCAL_NODE = "local"

ContainerLister = Callable[[], Sequence[Mapping[str, Any]]]


#: A node's own reserves, overriding the plan's (heterogeneous nodes; tests make one node short).
RESERVE_MB_ENV = "RAY_BENCH_HOST_RESERVE_MB"
RESERVE_DISK_MB_ENV = "RAY_BENCH_HOST_RESERVE_DISK_MB"


@dataclass(frozen=True)
class Reserve:
    """What a node keeps free: memory (MiB available) and disk (MiB free where sandboxes, staged
    uploads and Ray's spill files live: the node's temporary directory unless told)."""

    memory_mb: int
    disk_mb: int = 0
    disk_path: str = field(default_factory=tempfile.gettempdir)

    def on_node(self, environ: Mapping[str, str]) -> Reserve:
        """This reserve with the node's own overrides (:data:`RESERVE_MB_ENV`, ...) applied."""
        memory, disk = self.memory_mb, self.disk_mb
        for name, value in ((RESERVE_MB_ENV, environ.get(RESERVE_MB_ENV)),
                            (RESERVE_DISK_MB_ENV, environ.get(RESERVE_DISK_MB_ENV))):
            if value is None:
                continue
            if not value.strip().isdigit():  # a typo must not switch the guard off silently
                raise UserInputError(f"{name} is not a whole number of MiB", where="node environment",
                                     fix=f"set {name} to e.g. 2048, or unset it to use the suite's reserve")
            if name == RESERVE_MB_ENV:
                memory = int(value)
            else:
                disk = int(value)
        return replace(self, memory_mb=memory, disk_mb=disk)


def read_disk_free_mb(path: str) -> int:
    """Free MiB of the filesystem holding ``path`` (what an unprivileged writer may use)."""
    return shutil.disk_usage(path).free >> 20


def shortfall(available_mb: int, free_disk_mb: int, reserve: Reserve) -> str | None:
    """Why a node with these readings must take no more cells, or ``None`` (pure)."""
    reasons = []
    if available_mb < reserve.memory_mb:
        reasons.append(f"available memory {available_mb} MiB is under the reserve of {reserve.memory_mb} MiB")
    if free_disk_mb < reserve.disk_mb:
        reasons.append(f"free disk {free_disk_mb} MiB at {reserve.disk_path} is under the reserve of "
                       f"{reserve.disk_mb} MiB")
    return "; ".join(reasons) or None


@dataclass(frozen=True)
class ResourceHalt:
    """One node's halt (``node``: its Ray node id, ``local`` for the driver's own host)."""

    run_id: str
    reason: str
    available_mb: int
    reserve_mb: int
    at: str
    containers: list[dict[str, Any]] = field(default_factory=list)
    node: str = LOCAL_NODE
    address: str = ""
    free_disk_mb: int = 0
    disk_reserve_mb: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"kind": "resource-halt", **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ResourceHalt:
        return cls(
            run_id=str(data.get("run_id", "")),
            reason=str(data.get("reason", "")),
            available_mb=int(data.get("available_mb", 0)),
            reserve_mb=int(data.get("reserve_mb", 0)),
            at=str(data.get("at", "")),
            containers=list(data.get("containers", [])),
            node=str(data.get("node", LOCAL_NODE)),
            address=str(data.get("address", "")),
            free_disk_mb=int(data.get("free_disk_mb", 0)),
            disk_reserve_mb=int(data.get("disk_reserve_mb", 0)),
        )


def halt_path(run_root: Path) -> Path:
    return runroot.RunPaths(run_root).halt


def read_halt(run_root: Path) -> dict[str, Any] | None:
    """The halt record of ``run_root``, or ``None`` when there is none."""
    try:
        data = load_state_json(halt_path(run_root))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        # Fail closed: a halt record that cannot be read still halts the run.
        return {"reason": "the halt record is unreadable (corrupt or too large); inspect it, "
                          "then clear it with --clear-halt"}
    return data


def require_no_halt(run_root: Path) -> None:
    """Raise :class:`HaltActiveError` while a resource halt exists (the driver's resume check)."""
    halt = read_halt(run_root)
    if halt is not None:
        raise HaltActiveError(
            f"resource halt active: {halt.get('reason', 'unknown reason')}",
            where=str(halt_path(run_root)),
            fix="free memory or disk on the halted nodes, then resume with --clear-halt --clearance-reason TEXT",
        )


def clear_halt(run_root: Path, halt_file: Path | None, reason: str) -> Path:
    """Archive the halt as ``halts/<timestamp>-resource-halt.json`` with the clearance reason,
    remove it, and return the archive path. ``halt_file`` (if given) must be this run's halt."""
    path = halt_path(run_root)
    if halt_file is not None and Path(halt_file).resolve() != path.resolve():
        raise UserInputError(
            f"{halt_file} is not this run's halt file", where=str(run_root), fix=f"name {path}"
        )
    if not reason.strip():
        raise UserInputError(
            "a clearance reason is required", where=str(path), fix="pass --clearance-reason TEXT"
        )
    original = read_halt(run_root)
    if original is None:
        raise UserInputError("no resource halt to clear", where=str(path), fix="drop --clear-halt")
    now = datetime.now(UTC)
    archive_dir = runroot.RunPaths(run_root).halts
    archive_dir.mkdir(parents=True, exist_ok=True)
    archive = archive_dir / f"{now.strftime('%Y%m%dT%H%M%S.%fZ')}-{HALT_FILE}"
    record = {"halt": original, "cleared_at": now.isoformat(), "clearance_reason": reason}
    _write_atomic(archive, record)
    path.unlink()
    return archive


def _write_atomic(path: Path, data: Mapping[str, Any]) -> None:
    write_whole(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def docker_container_lister(run_id: str, base_url: str | None = None) -> ContainerLister:
    """A lister of this run's managed containers via the Docker SDK (for the halt record)."""

    def lister() -> list[dict[str, Any]]:
        import docker

        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        try:
            filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_RUN}={run_id}"]}
            found = client.api.containers(all=True, filters=filters)
        finally:
            client.close()
        return [
            {
                "id": c["Id"][:12],
                "name": (c.get("Names") or ["?"])[0].lstrip("/"),
                "state": c.get("State"),
                "cell": (c.get("Labels") or {}).get(LABEL_CELL),
                "attempt": (c.get("Labels") or {}).get(LABEL_ATTEMPT),
            }
            for c in found
        ]

    return lister


class ResourceSupervisor:
    """One node's supervisor: call :meth:`check` periodically; a returned halt means that this
    node must take no more cells. A halt stays (memory that comes back for a moment does not
    make the node safe again). It runs in the driver for the driver's own host and inside a
    :class:`~ray_bench.onray.supervisors.NodeSupervisor` actor on every node of a cluster:
    nodes share no filesystem, so it writes nothing; the driver records what it returns."""

    def __init__(
        self,
        reserve: Reserve,
        run_id: str,
        *,
        node: str = LOCAL_NODE,
        address: str = "",
        read_available: Callable[[], int] = read_available_mb,
        read_disk_free: Callable[[str], int] = read_disk_free_mb,
        list_containers: ContainerLister | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.reserve = reserve
        self.run_id = run_id
        self.node = node
        self.address = address
        self._read_available = read_available
        self._read_disk_free = read_disk_free
        self._list_containers = list_containers
        self._clock = clock
        self.halt: ResourceHalt | None = None

    def check(self) -> ResourceHalt | None:
        """``None`` when all is well, else this node's halt (the first one found stays)."""
        if self.halt is not None:
            return self.halt
        available = self._read_available()
        free_disk = self._read_disk_free(self.reserve.disk_path) if self.reserve.disk_mb > 0 else 0
        reason = shortfall(available, free_disk, self.reserve)
        if reason is None:
            return None
        containers: list[dict[str, Any]] = []
        if self._list_containers is not None:
            try:
                containers = [dict(c) for c in self._list_containers()]
            except Exception as exc:  # the halt matters more than its inventory
                containers = [{"error": f"listing containers failed: {type(exc).__name__}: {exc}"}]
        where = "host" if self.node == LOCAL_NODE else f"node {self.address or self.node[:8]}"
        self.halt = ResourceHalt(
            run_id=self.run_id, reason=f"{where}: {reason}", available_mb=available,
            reserve_mb=self.reserve.memory_mb,
            at=datetime.fromtimestamp(self._clock(), UTC).isoformat(), containers=containers,
            node=self.node, address=self.address, free_disk_mb=free_disk,
            disk_reserve_mb=self.reserve.disk_mb,
        )
        return self.halt


class Supervision(Protocol):
    """The supervisors of the nodes that host runners, as the driver sees them."""

    @property
    def node_count(self) -> int: ...

    def check(self) -> list[ResourceHalt]:
        """Every halt so far (without waiting on a slow node)."""
        ...

    def close(self) -> None: ...


def uses_docker(plan: Plan) -> bool:
    """Some cell runs on a backend whose containers the resource supervisor lists (its
    capabilities' ``listed_containers``, never its name)."""
    return bool(having({c.backend for c in plan.cells}, lambda c: c.listed_containers))


def docker_url_of(plan: Plan) -> str | None:
    """The daemon the supervisor lists containers on: the ``base_url`` option of the plan's
    backend with listed containers (None: the default socket)."""
    for name in having(plan.backends, lambda c: c.listed_containers):
        url = plan.backends[name].options.get("base_url")
        return str(url) if url else None
    return None


def reserve_of(plan: Plan) -> Reserve:
    """What every node keeps free (a node may override it: :meth:`Reserve.on_node`)."""
    return Reserve(plan.host_reserve_mb, plan.host_reserve_disk_mb)


class HostSupervision:
    """The driver's own host as the only node (a local run, the simulator, in-process tests);
    :meth:`of` builds it for a plan. A run on Ray has one supervisor per node instead
    (``ray_bench.onray.supervisors.RaySupervision``, built by ``execute_run``)."""

    def __init__(self, supervisor: ResourceSupervisor) -> None:
        self.supervisor = supervisor

    @classmethod
    def of(cls, plan: Plan, read_available: Callable[[], int] = read_available_mb) -> HostSupervision:
        """This host read against the plan's reserve, its managed containers listed when the plan
        uses Docker; ``read_available``: the host's available memory in MiB (tests fake pressure)."""
        lister = docker_container_lister(plan.run_id, base_url=docker_url_of(plan)) if uses_docker(plan) else None
        return cls(ResourceSupervisor(reserve_of(plan), plan.run_id, read_available=read_available,
                                      list_containers=lister))

    @property
    def node_count(self) -> int:
        return 1

    def check(self) -> list[ResourceHalt]:
        halt = self.supervisor.check()
        return [] if halt is None else [halt]

    def close(self) -> None:
        return None


def write_run_halt(run_root: Path, halts: Sequence[ResourceHalt]) -> ResourceHalt:
    """The run's hard stop, once no node that hosts runners may take cells: ``resource-halt.json``
    (the first halt's figures, every node's halt under ``nodes``). Returns the first halt."""
    first = halts[0]
    record = {**first.to_json(), "reason": "; ".join(h.reason for h in halts),
              "nodes": [h.to_json() for h in halts]}
    run_root.mkdir(parents=True, exist_ok=True)
    _write_atomic(halt_path(run_root), record)
    return first
