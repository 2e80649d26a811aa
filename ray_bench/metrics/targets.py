"""The file_sd target files under the state root: one per run, written by whoever serves the
run's metrics (the driver's exporter, then for a while the lingering final figures), with
the serving process's pid beside it so that a dead server's target can be told apart and
removed (by the next exporter that starts on this host, and by ``ray-bench audit``).

    <state_root>/prometheus/targets/<run_id>.json   [{"targets": [...], "labels": {"run": ...}}]
    <state_root>/prometheus/targets/<run_id>.pid    the serving process (not matched by *.json)
    <state_root>/prometheus/targets/<run_id>.dead   when that process was first found gone: its
                                                    target stays DEAD_TARGET_KEEP_SEC from then
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
import time
from collections.abc import Collection
from pathlib import Path

from ray_bench.files import write_whole
from ray_bench.runroot import pid_alive

#: How long the target of a run whose serving process is gone stays after it was first found
#: gone. Its `up == 0` is what pages RayBenchDriverDown (`for: 2m`), and a removed target has no
#: `up` at all: the next `execute` or `audit` on the host, seconds after a driver's SIGKILL,
#: removed it and no alert ever fired (issue 56). The alert's 2 minutes, plus a scrape interval
#: before `up` reads 0 and a rule evaluation (15 s each in the shipped prometheus.yml), plus
#: Alertmanager's default group_wait (30 s) before the page goes out, is 3 minutes; 5 leave room for
#: a slower scrape. Removed then, the run reads as RayBenchRunVanished (not down forever).
DEAD_TARGET_KEEP_SEC = 300.0


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


def dead_file(target: Path) -> Path:
    return target.with_suffix(".dead")


def hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def advertised(host: str) -> str:
    """The address Prometheus scrapes for a bind address (a wildcard bind is not one)."""
    return socket.getfqdn() if host in ("", "0.0.0.0", "::") else host


def write_target(target: Path, address: str, run_id: str, pid: int) -> None:
    write_atomic(pid_file(target), str(pid))
    dead_file(target).unlink(missing_ok=True)  # a new owner: the last one's death is no news
    write_atomic(target, [{"targets": [address], "labels": {"run": run_id}}])


def remove_target(target: Path, *, only_pid: int | None = None) -> bool:
    """Remove the target (and its pid file); with ``only_pid``, only while that process owns
    it (a lingering server must not remove the target of a driver that resumed the run)."""
    if only_pid is not None and owner(target) not in (only_pid, None):
        return False
    target.unlink(missing_ok=True)
    pid_file(target).unlink(missing_ok=True)
    dead_file(target).unlink(missing_ok=True)
    return True


def retire_linger(target: Path) -> bool:
    """Take the run's target from the linger serving an earlier session's final figures (a resume
    of the run): the new driver's figures supersede them. The linger sees its pid file name
    another process at its next turn (a second at most, :mod:`ray_bench.metrics.linger`) and
    exits, freeing the port (a fixed ``--metrics-port`` the new driver binds). Returns whether a
    linger was serving."""
    pid = owner(target)
    if pid is None or pid == os.getpid() or not text_file(target).exists() or not pid_alive(pid):
        return False
    write_atomic(pid_file(target), str(os.getpid()))
    return True


def owner(target: Path) -> int | None:
    try:
        text = pid_file(target).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def prune_stale_targets(state_root: str | os.PathLike[str], *, over: Collection[str] = (),
                        now: float | None = None) -> list[str]:
    """Remove the targets whose serving process is gone (a SIGKILLed driver leaves its file
    behind, and Prometheus would scrape a dead port forever) once RayBenchDriverDown had time to
    fire: :data:`DEAD_TARGET_KEEP_SEC` after one was first found gone (this call notes when), at
    once for the runs named in ``over`` (an operator's `audit` of that run; a resume replacing
    it). Returns the runs pruned. Targets without a pid file (written by another tool, or by a
    version before pid files) are left."""
    now = time.time() if now is None else now
    pruned: list[str] = []
    folder = targets_dir(state_root)
    for target in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        pid = owner(target)
        if pid is None or pid_alive(pid):
            continue
        if target.stem in over or dead_target_due(_first_found_dead(target, now), now):
            remove_target(target)
            pruned.append(target.stem)
    # an audit's server that died (a reboot) leaves its target too; no alert reads its `up`
    audits = audits_dir(state_root)
    for target in sorted(audits.glob("*.json")) if audits.is_dir() else []:
        pid = owner(target)
        if pid is not None and not pid_alive(pid):
            remove_target(target)
    return pruned


def dead_target_due(first_found_dead: float, now: float) -> bool:
    """Whether a dead server's target, first found gone at ``first_found_dead``, may go at ``now``."""
    return now - first_found_dead >= DEAD_TARGET_KEEP_SEC


def _first_found_dead(target: Path, now: float) -> float:
    """When the target's process was first found gone (``now``, noted, if this is the first time)."""
    try:
        return float(dead_file(target).read_text().strip())
    except (OSError, ValueError):
        write_atomic(dead_file(target), repr(now))
        return now


def write_atomic(path: Path, payload: object) -> None:
    # Prometheus watches the directory; a rename means it never reads half a file. The
    # temporary name does not end in .json, so the *.json glob never matches it.
    path.parent.mkdir(parents=True, exist_ok=True)
    text = payload if isinstance(payload, str) else json.dumps(payload, indent=2) + "\n"
    write_whole(path, text, durable=True)
