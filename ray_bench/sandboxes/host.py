"""Host admission: may one more sandbox start on this host?

Pure arithmetic over the *limits* of the sandboxes already running (not their current use:
an agent's memory peaks late, and admitting on use over-commits), plus a reader for the
host's totals. The receipt shows the same arithmetic through :func:`render_admission`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ray_bench.sandboxes.base import Resources

MEMINFO = Path("/proc/meminfo")

#: What a sandbox without a limit is counted as. Docker leaves such a container unbounded; the
#: host must still budget something for it.
UNLIMITED_COUNTED_AS = Resources(cpus=1.0, memory_mb=2048)


def _meminfo_mb(meminfo: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in meminfo.read_text().splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            kib = int(fields[0])
            values[key.strip()] = kib // 1024 if fields[1:] == ["kB"] else kib // (1 << 20)
    return values


def read_available_mb(meminfo: Path = MEMINFO) -> int:
    """``MemAvailable`` from ``/proc/meminfo``, in MiB."""
    return _meminfo_mb(meminfo)["MemAvailable"]


@dataclass(frozen=True)
class HostResources:
    memory_mb: int
    cpus: float
    available_mb: int

    @classmethod
    def read(cls, meminfo: Path = MEMINFO) -> HostResources:
        info = _meminfo_mb(meminfo)
        cpus = (
            float(len(os.sched_getaffinity(0)))
            if hasattr(os, "sched_getaffinity")
            else float(os.cpu_count() or 1)
        )
        return cls(memory_mb=info["MemTotal"], cpus=cpus, available_mb=info["MemAvailable"])


@dataclass(frozen=True)
class Decision:
    admitted: bool
    reason: str
    running: int
    memory_mb_committed: int  # limits of the running sandboxes plus the next one
    memory_mb_budget: int  # host total minus the reserve
    cpus_committed: float
    cpus_budget: float
    host_memory_mb: int
    host_cpus: float
    reserve_mb: int
    reserve_cpus: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _counted(res: Resources, default: Resources) -> tuple[int, float]:
    memory = res.memory_mb if res.memory_mb is not None else default.memory_mb
    cpus = res.cpus if res.cpus is not None else default.cpus
    return int(memory or 0), float(cpus or 0.0)


def admit(
    running: Sequence[Resources],
    next: Resources,
    host: HostResources,
    reserve_mb: int,
    reserve_cpus: float,
    *,
    unlimited: Resources = UNLIMITED_COUNTED_AS,
) -> Decision:
    """Admit ``next`` if the limits of ``running`` plus ``next`` stay within the host's totals
    minus the reserve, for memory and for CPUs alike."""
    mem = cpu = 0.0
    for res in (*running, next):
        m, c = _counted(res, unlimited)
        mem += m
        cpu += c
    mem_budget = host.memory_mb - reserve_mb
    cpu_budget = host.cpus - reserve_cpus
    reasons = []
    if mem > mem_budget:
        reasons.append(f"memory {int(mem)} MiB > budget {mem_budget} MiB")
    if cpu > cpu_budget + 1e-9:
        reasons.append(f"cpus {cpu:g} > budget {cpu_budget:g}")
    return Decision(
        admitted=not reasons,
        reason="; ".join(reasons) or "within budget",
        running=len(running),
        memory_mb_committed=int(mem),
        memory_mb_budget=mem_budget,
        cpus_committed=cpu,
        cpus_budget=cpu_budget,
        host_memory_mb=host.memory_mb,
        host_cpus=host.cpus,
        reserve_mb=reserve_mb,
        reserve_cpus=reserve_cpus,
    )


def max_concurrent(
    each: Resources,
    host: HostResources,
    reserve_mb: int,
    reserve_cpus: float,
    *,
    unlimited: Resources = UNLIMITED_COUNTED_AS,
) -> int:
    """How many sandboxes of size ``each`` fit on ``host`` at once."""
    mem, cpu = _counted(each, unlimited)
    fits = [
        (host.memory_mb - reserve_mb) // mem if mem > 0 else None,
        int((host.cpus - reserve_cpus + 1e-9) // cpu) if cpu > 0 else None,
    ]
    bounded = [f for f in fits if f is not None]
    return max(0, min(bounded)) if bounded else 0


def render_admission(decision: Decision) -> list[str]:
    """Markdown lines for the receipt: the arithmetic behind one admission decision."""
    d = decision
    verdict = "admitted" if d.admitted else "refused"
    return [
        f"- host: {d.host_memory_mb} MiB memory, {d.host_cpus:g} CPUs; "
        f"reserve {d.reserve_mb} MiB, {d.reserve_cpus:g} CPUs",
        f"- memory: {d.memory_mb_committed} MiB committed ({d.running} running + next) "
        f"of {d.host_memory_mb} - {d.reserve_mb} = {d.memory_mb_budget} MiB",
        f"- cpus: {d.cpus_committed:g} committed of {d.host_cpus:g} - {d.reserve_cpus:g} "
        f"= {d.cpus_budget:g}",
        f"- decision: **{verdict}** ({d.reason})",
    ]
