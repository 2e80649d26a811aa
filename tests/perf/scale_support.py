"""Synthetic suites for the scale benchmarks (issue 8): many tiny tasks, a no-op agent, a
verifier that only writes its reward."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import yaml

TASK_TOML = """version = "1.0"

[agent]
timeout_sec = 60.0

[verifier]
timeout_sec = 30.0

[environment]
workdir = "/app"
"""
VERIFIER = '#!/bin/sh\nmkdir -p "$LOGS_DIR/verifier"; echo 1 > "$LOGS_DIR/verifier/reward.txt"\n'
#: The suite model's bound on ``reps`` (``models/suite.py``).
MAX_REPS = 1000
ROUTES = {"RB_BENCH_KEY_A": "bench-value-a", "RB_BENCH_KEY_B": "bench-value-b",
          "RB_BENCH_KEY_C": "bench-value-c", "RB_BENCH_KEY_D": "bench-value-d"}


def write_tasks(tasks_dir: Path, n: int) -> list[str]:
    names = []
    for i in range(n):
        name = f"t{i:05d}"
        d = tasks_dir / name
        (d / "tests").mkdir(parents=True, exist_ok=True)
        (d / "task.toml").write_text(TASK_TOML)
        (d / "instruction.md").write_text(f"Task {i}: do nothing.\n")
        test = d / "tests" / "test.sh"
        test.write_text(VERIFIER)
        test.chmod(0o755)
        names.append(name)
    return names


def write_suite(root: Path, *, tasks: int, reps: int, concurrency: int, agent: str = "true",
                local_root: Path | None = None, preflight_cells: int = 1,
                accounts: int = 2) -> tuple[Path, Path]:
    """A suite of ``tasks`` no-op tasks x 2 arms x ``reps`` on the local backend, and
    ``accounts`` accounts (2 to 4) sharing ``concurrency`` sessions (routes set in this process)."""
    os.environ.update(ROUTES)
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "tasks").is_dir() or len(list((root / "tasks").iterdir())) != tasks:
        write_tasks(root / "tasks", tasks)
    local: dict[str, object] = {"max_sandboxes": concurrency}
    if local_root is not None:
        local["options"] = {"root": str(local_root)}
    suite = {
        "name": "scale", "tasks_dir": "tasks", "reps": reps, "backend": "local",
        "backends": {"local": local},
        "arms": [{"name": "baseline", "role": "baseline", "command": agent},
                 {"name": "mcp", "role": "variant", "command": agent}],
        "preflight_cells": preflight_cells, "max_attempts": 2,
    }
    keys = sorted(ROUTES)[:max(1, min(accounts, len(ROUTES)))]
    share = [concurrency // len(keys) + (1 if i < concurrency % len(keys) else 0) for i in range(len(keys))]
    accounts_doc = {"accounts": [
        {"name": f"bench-{key[-1].lower()}", "route": {"env": {"DEMO_API_KEY": key}},
         "limits": {"max_concurrent": max(1, n)}}
        for key, n in zip(keys, share, strict=True)]}
    (root / "suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    (root / "accounts.yaml").write_text(yaml.safe_dump(accounts_doc, sort_keys=False))
    return root / "suite.yaml", root / "accounts.yaml"


def write_noop_suite(root: Path, *, cells: int, concurrency: int,
                     local_root: Path | None = None) -> tuple[Path, Path]:
    """The no-op throughput suite (bench_throughput, bench_vs_inspect): one task x 2 arms x
    ``cells // 2`` repetitions, up to 2,000 cells (a suite's ``reps`` is at most 1,000); above,
    as many tasks as that needs, ``cells`` rounded down to a multiple of twice their number."""
    tasks = -(-max(2, cells) // (2 * MAX_REPS))
    return write_suite(root, tasks=tasks, reps=max(1, cells // (2 * tasks)), concurrency=concurrency,
                       local_root=local_root)


def peak_rss_mb() -> float:
    """This process's peak resident set size so far (Linux: ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _stat(pid: str) -> tuple[int, float, float, str] | None:
    """(ppid, own cpu seconds, waited-for children's cpu seconds, name), from /proc."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    tick = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / tick  # utime stime
    children = (int(fields[13]) + int(fields[14])) / tick  # cutime cstime
    return int(fields[1]), own, children, cmd


def descendant_cpu() -> dict[str, float]:
    """CPU seconds of this process's descendants (the Ray instance it started), by name:
    ``ray::CellRunner``, ``ray::AdmissionActor``, raylet, gcs_server, ... Subprocesses that ran
    and were waited for (agent and verifier shells) are counted as ``NAME+children``."""
    procs = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(entry.name)) is not None:
            procs[int(entry.name)] = st
    mine = {os.getpid()}
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _, _, _) in procs.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                changed = True
    out: dict[str, float] = {}
    for pid in mine - {os.getpid()}:
        _, own, children, cmd = procs[pid]
        name = cmd if cmd.startswith("ray::") else Path(cmd.split()[0] if cmd else "?").name
        out[name] = out.get(name, 0.0) + own
        if children:
            out[name + "+children"] = out.get(name + "+children", 0.0) + children
    return out


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
