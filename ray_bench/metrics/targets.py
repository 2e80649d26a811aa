"""The file_sd target files under the state root: one per run, written by whoever serves the
run's metrics (the driver's exporter, then for a while the lingering final figures), with
the serving process's pid beside it so that a dead server's target can be told apart and
removed (by the next exporter that starts on this host, and by ``ray-bench audit``).

    <state_root>/prometheus/targets/<run_id>.json   [{"targets": [...], "labels": {"run": ...}}]
    <state_root>/prometheus/targets/<run_id>.pid    the serving process (not matched by *.json)
    <state_root>/prometheus/targets/<run_id>.prom   the figures a linger process serves
    <state_root>/prometheus/targets/<run_id>.host   the address an exporter of the run bound: it
                                                    outlives the target, so that a later
                                                    ``ray-bench audit`` can publish its count
    <state_root>/prometheus/audits/<run_id>.json    where it does (its own scrape job, so the
                                                    run's ``up`` still means its driver)
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from ray_bench.files import write_whole
from ray_bench.runroot import pid_alive


def targets_dir(state_root: str | os.PathLike[str]) -> Path:
    return Path(state_root) / "prometheus" / "targets"


def target_file(state_root: str | os.PathLike[str], run_id: str) -> Path:
    """Where the file_sd target of ``run_id`` lives under ``state_root``."""
    return targets_dir(state_root) / f"{run_id}.json"


def audits_dir(state_root: str | os.PathLike[str]) -> Path:
    return Path(state_root) / "prometheus" / "audits"


def audit_target_file(state_root: str | os.PathLike[str], run_id: str) -> Path:
    """The file_sd target of the server that publishes a standalone audit of ``run_id``."""
    return audits_dir(state_root) / f"{run_id}.json"


def pid_file(target: Path) -> Path:
    return target.with_suffix(".pid")


def text_file(target: Path) -> Path:
    return target.with_suffix(".prom")


def host_file(target: Path) -> Path:
    return target.with_suffix(".host")


def hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def advertised(host: str) -> str:
    """The address Prometheus scrapes for a bind address (a wildcard bind is not one)."""
    return socket.getfqdn() if host in ("", "0.0.0.0", "::") else host


def write_target(target: Path, address: str, run_id: str, pid: int) -> None:
    write_atomic(pid_file(target), str(pid))
    write_atomic(target, [{"targets": [address], "labels": {"run": run_id}}])


def remove_target(target: Path, *, only_pid: int | None = None) -> bool:
    """Remove the target (and its pid file); with ``only_pid``, only while that process owns
    it (a lingering server must not remove the target of a driver that resumed the run)."""
    if only_pid is not None and owner(target) not in (only_pid, None):
        return False
    target.unlink(missing_ok=True)
    pid_file(target).unlink(missing_ok=True)
    return True


def owner(target: Path) -> int | None:
    try:
        text = pid_file(target).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def prune_stale_targets(state_root: str | os.PathLike[str]) -> list[str]:
    """Remove the targets whose serving process is gone (a SIGKILLed driver leaves its file
    behind, and Prometheus would scrape a dead port forever). Returns the runs pruned. Targets
    without a pid file (written by another tool, or by a version before pid files) are left."""
    pruned: list[str] = []
    # an audit's server that died (a reboot) leaves its target too; it is no run's news
    audits = audits_dir(state_root)
    for folder in (targets_dir(state_root), audits):
        for target in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            pid = owner(target)
            if pid is not None and not pid_alive(pid):
                remove_target(target)
                if folder != audits:
                    pruned.append(target.stem)
    return pruned


def write_atomic(path: Path, payload: object) -> None:
    # Prometheus watches the directory; a rename means it never reads half a file. The
    # temporary name does not end in .json, so the *.json glob never matches it.
    path.parent.mkdir(parents=True, exist_ok=True)
    text = payload if isinstance(payload, str) else json.dumps(payload, indent=2) + "\n"
    write_whole(path, text, durable=True)
