"""The resource supervisor: a hard stop when host memory falls under its reserve.

:meth:`ResourceSupervisor.check` writes ``runs/ID/resource-halt.json`` (the reason, the
figures, the run's managed containers). The driver stops launching while it exists and refuses
to resume until an operator clears it with a reason (``--clear-halt --clearance-reason``);
:func:`clear_halt` archives the original under ``runs/ID/halts/`` with that reason.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ray_bench.config.bounded import load_state_json
from ray_bench.errors import HaltActiveError, UserInputError
from ray_bench.sandboxes.base import LABEL_ATTEMPT, LABEL_CELL, LABEL_MANAGED, LABEL_RUN
from ray_bench.sandboxes.host import read_available_mb

HALT_FILE = "resource-halt.json"
HALTS_DIR = "halts"

ContainerLister = Callable[[], Sequence[Mapping[str, Any]]]


@dataclass(frozen=True)
class ResourceHalt:
    run_id: str
    reason: str
    available_mb: int
    reserve_mb: int
    at: str
    containers: list[dict[str, Any]] = field(default_factory=list)

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
        )


def halt_path(run_root: Path) -> Path:
    return run_root / HALT_FILE


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
            fix="free host memory, then resume with --clear-halt --clearance-reason TEXT",
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
    archive_dir = run_root / HALTS_DIR
    archive_dir.mkdir(parents=True, exist_ok=True)
    archive = archive_dir / f"{now.strftime('%Y%m%dT%H%M%S.%fZ')}-{HALT_FILE}"
    record = {"halt": original, "cleared_at": now.isoformat(), "clearance_reason": reason}
    _write_atomic(archive, record)
    path.unlink()
    return archive


def _write_atomic(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


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
    """Call :meth:`check` periodically; a returned halt means: stop launching."""

    def __init__(
        self,
        run_root: Path,
        run_id: str,
        reserve_mb: int,
        *,
        read_available: Callable[[], int] = read_available_mb,
        list_containers: ContainerLister | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.run_root = run_root
        self.run_id = run_id
        self.reserve_mb = reserve_mb
        self._read_available = read_available
        self._list_containers = list_containers
        self._clock = clock

    def check(self) -> ResourceHalt | None:
        """``None`` when all is well. Otherwise the halt: the one already on disk (a halt stays
        until cleared) or a new one, written before returning."""
        existing = read_halt(self.run_root)
        if existing is not None:
            return ResourceHalt.from_json(existing)
        available = self._read_available()
        if available >= self.reserve_mb:
            return None
        containers: list[dict[str, Any]] = []
        if self._list_containers is not None:
            try:
                containers = [dict(c) for c in self._list_containers()]
            except Exception as exc:  # the halt matters more than its inventory
                containers = [{"error": f"listing containers failed: {type(exc).__name__}: {exc}"}]
        halt = ResourceHalt(
            run_id=self.run_id,
            reason=(
                f"host available memory {available} MiB"
                f" is under the reserve of {self.reserve_mb} MiB"
            ),
            available_mb=available,
            reserve_mb=self.reserve_mb,
            at=datetime.fromtimestamp(self._clock(), UTC).isoformat(),
            containers=containers,
        )
        self.run_root.mkdir(parents=True, exist_ok=True)
        _write_atomic(halt_path(self.run_root), halt.to_json())
        return halt
